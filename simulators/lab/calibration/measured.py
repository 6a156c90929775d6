"""`python -m simulators calibrate measured`: a calibration profile for any pair, from what its user can measure or a
paper publishes.

Per task, the pair's vanilla token/s and its speculative (SpS) token/s or speedup, with the SpS block efficiency
(or accepted length; eta = A + 1) where known, and the SpS gamma or schedule it ran with, on a conf/hardware profile:
    --from FIGURES.yaml                   several tasks (simulators/lab/figures.py: conf/calibration/*.yaml)
    --model M --task T --hardware H --vanilla-tok-s ... --sps-tok-s ... [--sps-eta ...] --sps-gamma 4 ...
    --model M --task T --hardware H --sps-speedup S ...          a speedup alone (no token/s)
    --records runs/records.jsonl --model M --task T --hardware H   a real run's vanilla + speculative points
It fits what `python -m simulators check paper` fits (simulators/lab/calibration/paper_fit.py): per task the target's
per-forward overhead on the hardware's spec-sheet roofline so vanilla token/s matches, the draft's as r x that, and
the surrogate draft's agreement so SpS block efficiency matches at the SpS setting used. What is not given:
- vanilla token/s (a speedup alone): the roofline at the hardware profile's estimated per-forward overhead; the
  profile says so (`fit.inputs.vanilla_tok_s: {value, inferred: "hardware roofline ..."}`), SpS token/s = speedup x it;
- the SpS block efficiency: inferred through the cost model. At the task's target overhead and the draft overhead
  r x it, SpS token/s grows with the draft's agreement (a round is the draft's forwards plus one target forward of
  gamma + 1 tokens, and brings eta tokens), so the agreement whose replayed SpS token/s equals the given one pins eta
  (bisection; `fit.inputs.sps_block_efficiency: {value, inferred: ...}`). Its uncertainty, how far eta moves when the
  task's draft overhead moves over r x paper_fit.RATIO_SPREAD (how far the Yi-34B/6B tasks' own ratios stray from
  their shared one), is `fit.inferred_eta_spread` (relative, e.g. 0.18 = ±18%) and printed.
- r: least squares in log SpS token/s over the tasks that give both eta and an SpS figure (as before); else, with a
  setting's mean accepted tokens (`sps: {mean_accepted_tokens: X}`, Spec-Bench's: new tokens per target forward over
  every step of every task), the r at which the tasks' inferred etas pool (all tasks' new tokens / all their target
  forwards) to X, so each task's speedup is matched by its own eta and the setting's mean by r; else the hardware
  profile's estimated draft / target overhead ratio (forward + layers x layer overhead: 0.786 on a800x2 for Yi, the
  Yi fit's own r).
Nothing else: no lookahead or Ouroboros figure. The fit's residuals (fitted / input - 1: vanilla token/s, SpS token/s
or speedup, eta, the setting's mean; the fitted values from the decode loop on the fitted profile, what a sweep of
it runs) are printed per task, and a fit missing an input by more than --tolerance (default 20%: the Yi fit's one r
misses GSM8K's SpS token/s by +16.6%) is one `error:` line naming the task, the input, the fitted value and the
tolerance, with nothing written. One profile per task, conf/sim/<model>_<task>.yaml (the model YAML's
`sim_profiles:` or that name makes it the default for the task), holding the task's `prompt_len`: a synthetic-dataset
run that stands for the task cuts the simulator's own prompts that long, as this fit did (simulators/trust.py).
`calibrate paper` is this command on the paper's figures (the Yi-34B/6B profiles). --devices / --placement / --dtype
run the pair as a run's sim.devices / sim.placement / sim.dtype would (the profile keeps them). Provenance: a
figures or records file is named from the repository's root, or by its own name and sha256 (never a machine path);
the command whole; the commit (`-dirty` when the tree differs from it).
Impossible figures (simulators/lab/figures.py), a pair that does not fit the machine and an unwritable --out-dir are one
`error:` line before any fitting; a fit whose draft overhead stops at an end of its range (the SpS token/s out of the
cost model's reach) writes nothing.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from ouroboros.errors import OuroborosError
from simulators.architectures import check_name, conf_root, load_conf
from simulators.lab.calibration.paper_fit import (
    DRAFT_OVERHEADS,
    Calibration,
    base_hardware,
    calibrate,
    draft_overhead_grid,
    measured_clock,
    run,
    text_knobs,
    text_profile,
)
from simulators.lab.figures import YI_FIGURES, Task, load_tasks, records_task, sps_setting

TOLERANCE = 0.20   # the largest |fitted / input - 1| a profile is written with (the Yi fit's own: 16.6%)
MACHINE_FLAGS = ("devices", "placement", "dtype")   # sim options the pair runs with, as a run's sim.<key>


# ----------------------------------------------------------------------------------------------- residuals
def residuals(cal: Calibration, n_prompts: int, seed: int) -> list[dict[str, Any]]:
    """Per task and input: the fitted value (the decode loop on the fitted profile's knobs and overheads, the
    prompts of the fit) beside the input (None where the input was inferred), and their relative error."""
    rows = []
    pooled = [0, 0]
    for t in cal.tasks:
        how = dict(t.inferred)
        ot, od, st = cal.over_t[t.name], cal.over_d[t.name], cal.setting[t.name]
        loop = run(t, "speculative", {"schedule": "hf"} if st == "hf" else {"gamma": int(st)}, cal.a[t.name],
                   n_prompts, seed)
        pooled = [pooled[0] + loop.new_tokens, pooled[1] + loop.steps]
        v = cal.vanilla[t.name].tps(ot, 0.0)
        sps = loop.tps(ot, od)
        for key, fitted, given in (
                ("vanilla_tok_s", v, None if "vanilla_tok_s" in how else t.vanilla_tps),
                ("sps_speedup", sps / v, t.sps_speedup) if t.sps_speedup is not None else
                ("sps_tok_s", sps, t.sps_tps),
                ("sps_block_efficiency", loop.eta, None if "sps_block_efficiency" in how else t.sps_eta)):
            rows.append({"task": t, "input": key, "fitted": fitted, "given": given,
                         "error": None if not given else fitted / given - 1})
    mean = next((t.mean_eta for t in cal.tasks if t.mean_eta is not None), None)
    if mean is not None:
        fitted = pooled[0] / max(pooled[1], 1)
        rows.append({"task": None, "input": "mean_accepted_tokens", "fitted": fitted, "given": mean,
                     "error": fitted / mean - 1})
    return rows


LABELS = {"vanilla_tok_s": "vanilla token/s", "sps_tok_s": "SpS token/s", "sps_speedup": "SpS speedup",
          "sps_block_efficiency": "SpS eta", "mean_accepted_tokens": "the setting's mean accepted tokens"}


def print_residuals(cal: Calibration, rows: list[dict[str, Any]], tolerance: float, out=print) -> None:
    out(f"fit residuals (fitted / input - 1; the fitted values from the decode loop on each profile; --tolerance "
        f"{tolerance:.0%}):")
    for t in cal.tasks:
        cells = []
        for r in rows:
            if r["task"] is not t:
                continue
            label, how = LABELS[r["input"]], dict(t.inferred).get(r["input"])
            if r["given"]:
                cells.append(f"{label} {r['fitted']:.4g} (input {r['given']:g}, {pct(r['error'])})")
            elif r["input"] == "sps_block_efficiency" and how:
                cells.append(f"{label} {r['fitted']:.4g} (inferred from SpS {'speedup' if t.sps_speedup else 'token/s'}"
                             f", ±{cal.spread[t.name]:.0%} over the draft overhead's plausible range)")
            else:
                cells.append(f"{label} {r['fitted']:.4g} ({'inferred: ' + how.split(':')[0] if how else 'no input'})")
        out(f"  {t.key}: " + ", ".join(cells))
    for r in rows:
        if r["task"] is None:
            out(f"  all tasks: {LABELS[r['input']]} {r['fitted']:.4g} (input {r['given']:g}, {pct(r['error'])})")


def pct(e: float) -> str:
    return f"{e if abs(e) >= 5e-4 else 0.0:+.1%}"   # no "-0.0%"


def check_residuals(cal: Calibration, rows: list[dict[str, Any]], tolerance: float) -> None:
    """One line on the worst input the fit misses by more than `tolerance`, with what to do about it."""
    bad = [r for r in rows if r["error"] is not None and abs(r["error"]) > tolerance]
    if not bad:
        return
    r = max(bad, key=lambda r: abs(r["error"]))
    t: Task | None = r["task"]
    label, what = LABELS[r["input"]], f"task {t.key}" if t is not None else "the setting"
    if t is None:
        why = "the draft overhead stopped short of it: check the figures and the hardware profile"
    elif r["input"] in ("sps_tok_s", "sps_speedup") and t.name in cal.reach:
        never, always = cal.reach[t.name]
        sps = float(t.sps_tps or 0.0)
        why = (f"out of the cost model's reach (SpS {never:.4g} to {always:.4g} tok/s at this draft overhead, from a "
               "draft that never agrees to one that always does): check the figures and the hardware profile"
               if not never <= sps <= always else
               "the surrogate's block efficiency jumps past it on these prompts (its agreement flips whole stretches "
               "at once): try more --prompts, or raise --tolerance")
    elif r["input"] in ("sps_tok_s", "sps_speedup"):
        why = ("one draft overhead serves every task with a given block efficiency: leave out this task's block "
               "efficiency to have it inferred from its SpS figure, or raise --tolerance")
    else:
        why = "the surrogate does not reach it on these prompts: try more --prompts, or raise --tolerance"
    raise OuroborosError(f"{what}: the fit reproduces its {label} {r['given']:g} as {r['fitted']:.4g} "
                         f"({pct(r['error'])}), beyond --tolerance {tolerance:g} ({tolerance:.0%}): {why}; "
                         "no profile written")


# ----------------------------------------------------------------------------------------------- profiles
def draft_spread(cal: Calibration, t: Task, n_prompts: int, seed: int) -> dict[str, dict[str, float]]:
    """Per strategy that runs the draft (SpS at the setting measured; Ouroboros and cascade at their presets,
    conf/strategy/<name>.yaml), how far its token/s (and so its speedup: vanilla is fitted apart) and its eta move
    between this fit and the fits at the ends of the draft overhead's plausible range (`cal.alternatives`: each
    reproduces the same SpS figures): max |alternative / fit - 1|, on the fit's own prompts. What an inferred eta's
    uncertainty does to each of them, measured, instead of bounded by eta's own spread."""
    ot, od = cal.over_t[t.name], cal.over_d[t.name]
    out: dict[str, dict[str, float]] = {}
    st = cal.setting[t.name]
    for m in ("speculative", "ouroboros", "cascade"):
        if m == "speculative":
            params: dict[str, Any] = {"schedule": "hf"} if st == "hf" else {"gamma": int(st)}
        else:
            params = dict(load_conf("strategy", m).get("params") or {})
        mid = run(t, m, params, cal.a[t.name], n_prompts, seed)
        tps, eta = [], []
        for f, a in cal.alternatives.get(t.name, []):
            alt = run(t, m, params, a, n_prompts, seed)
            tps.append(abs(alt.tps(ot, f * od) / mid.tps(ot, od) - 1))
            eta.append(abs(alt.eta / mid.eta - 1))
        if tps:
            out[m] = {"speedup": round(max(tps), 4), "tokens_per_s": round(max(tps), 4),
                      "block_efficiency": round(max(eta), 4)}
    return out


def write_profiles(cal: Calibration, tasks: tuple[Task, ...], source: str, command: str, out_dir: Path | None,
                   n_prompts: int, seed: int, out=print, rows: list[dict[str, Any]] | None = None,
                   suffix: str = "", spread: bool = True) -> list[Path]:
    """One profile per task from a fitted calibration, with its provenance block, named <model>_<task><suffix>."""
    from simulators.sim_profiles import git_commit, pair_profiles, write_profile

    scaled = (f"draft overhead = {cal.ratio:.3f} x the task's target overhead, the ratio"
              if cal.ratio is not None else "draft overhead (shared),")
    draft = {"fit": f"{scaled} by least squares in log SpS token/s over the tasks with an SpS figure and a given "
                    "block efficiency (shared); ",
             "mean": f"{scaled} set so the block efficiencies inferred from the tasks' SpS figures pool to the "
                     "setting's mean accepted tokens; ",
             "hardware": f"{scaled} the hardware profile's estimated draft / target overhead; "}[cal.draft_from]
    commit = git_commit()
    by_task = {t.name: t for t in cal.tasks}
    paths = []
    for t0 in tasks:
        t = by_task.get(t0.name, t0)
        a, name = cal.a[t.name], f"{t.model}_{t.key}{suffix}"
        fields = {"pair": t.model, "profile": name, "prompt_len": t.prompt_len,
                  **({"answer_len": t.answer_len} if t.answer_len else {}), "corpus": t.corpus, **dict(t.text),
                  **dict(t.machine),
                  "alpha_easy": round(a, 6), "alpha_hard": round(a**4, 6),
                  **({} if measured_clock(t) else {"target_overhead_s": round(cal.over_t[t.name], 6),
                                                   "draft_overhead_s": round(cal.over_d[t.name], 6)})}
        fit: dict[str, Any] = {"pair": f"{t.model} on hardware={t.hardware}", "task": t.name,
                               "method_kind": "measured", "hardware": t.hardware, "inputs": t.inputs()}
        if t.name in cal.spread:
            fit["inferred_eta_spread"] = round(cal.spread[t.name], 3)
            if spread:
                fit["inferred_spread"] = draft_spread(cal, t, n_prompts, seed)
        fit.update({
            "inputs_source": f"{source}. No lookahead or Ouroboros figure is used.",
            "text_knobs": (f"{', '.join(k for k, _ in t.text)} from conf/sim/{text_profile(t)}.yaml (the real "
                           "Qwen2.5-Coder pair's recorded decisions, no published figure)" if t.text
                           else "the surrogate's defaults"),
            "method": "simulators.lab.calibration.paper_fit.calibrate: target overhead so vanilla token/s matches "
                      "(per task"
                      + ("; none given: the hardware profile's estimate" if "vanilla_tok_s" in dict(t.inferred) else "")
                      + "); " + draft + ("agreement so SpS token/s matches (block efficiency inferred) "
                                         if "sps_block_efficiency" in dict(t.inferred) else
                                         "agreement so SpS block efficiency matches ")
                      + "at the SpS setting measured ("
                      + ("speculative schedule=hf, transformers' heuristic starting at 5" if t.sps == "hf"
                         else f"speculative gamma={t.sps}") + ")"})
        if rows is not None:
            fit["residuals"] = {r["input"]: round(r["error"], 4) for r in rows
                                if r["task"] is not None and r["task"].name == t.name and r["error"] is not None}
        fit.update({"surrogate_prompts": n_prompts, "seed": seed, "max_new_tokens": t.max_new, "command": command,
                    "commit": commit})
        paths.append(write_profile(name, f"{t.model} on {t.hardware}, {t.name}: calibration profile (measured vanilla "
                                         "+ SpS figures)", fields, fit, out_dir))
        inferred = (f", eta {t.sps_eta:.3g} inferred (±{cal.spread[t.name]:.0%})" if t.name in cal.spread else "")
        out(f"{name}: alpha_easy {a:.4f}, target overhead {cal.over_t[t.name] * 1e3:.2f} ms, draft overhead "
            f"{cal.over_d[t.name] * 1e3:.2f} ms{inferred} -> {paths[-1]}")
        if pair_profiles(t.model).get(t.key) not in (None, name):
            out(f"note: conf/model/{t.model}.yaml names {pair_profiles(t.model)[t.key]} for {t.key}; set "
                f"sim={name} to use this one")
    return paths


def calibrate_measured(tasks: tuple[Task, ...], n_prompts: int, seed: int, source: str, command: str,
                       out_dir: Path | None = None, text: str = "none", draft_overhead: str = "scaled",
                       out=print, tolerance: float = TOLERANCE, suffix: str = "", spread: bool = True) -> list[Path]:
    tasks = tuple(replace(t, text=text_knobs(t, text)) for t in tasks)
    cal = calibrate(n_prompts, seed, "hf", tasks, draft_overhead)
    check_draft_overhead(cal, cal.tasks, draft_overhead)
    rows = residuals(cal, n_prompts, seed)
    print_residuals(cal, rows, tolerance, out)
    check_residuals(cal, rows, tolerance)
    return write_profiles(cal, tasks, source, command, out_dir, n_prompts, seed, out, rows, suffix, spread)


def check_draft_overhead(cal: Calibration, tasks: tuple[Task, ...], draft_overhead: str) -> None:
    """Refuse a fit whose draft overhead stopped at an end of its search range: the SpS token/s given are then out of
    the cost model's reach (at 0: faster than free drafting allows at their block efficiency), not matched."""
    if cal.draft_from != "fit":
        return
    grid = draft_overhead_grid(draft_overhead == "scaled")
    x = cal.ratio if cal.ratio is not None else next(iter(cal.over_d.values()))
    if x not in (grid[0], grid[-1]):
        return
    given = ", ".join(f"{t.name} {t.sps_tps:g} (vanilla {t.vanilla_tps:g}, eta {t.sps_eta:g})" for t in tasks
                      if t.sps_tps and "sps_block_efficiency" not in dict(t.inferred))
    unit = "x the target's" if cal.ratio is not None else "s"
    if x == grid[0]:
        raise OuroborosError(f"SpS token/s {given}: faster than the cost model reaches even with a draft overhead of "
                             f"0 (the fit's lower bound; the draft's spec-sheet cost and the wider verify forward "
                             "alone are slower): check the figures and the hardware profile")
    raise OuroborosError(f"SpS token/s {given}: slower than the cost model reaches with a draft overhead of "
                         f"{grid[-1]:g} {unit} (the fit's upper bound): check the figures and the hardware profile")


def paper_profiles(n_prompts: int = 16, seed: int = 0, out_dir: Path | None = None, out=print,
                   text: str = "none", draft_overhead: str = "scaled") -> list[Path]:
    """The Yi-34B/6B per-task profiles: `calibrate measured` on the paper's figures."""
    tasks, source = load_tasks(YI_FIGURES)
    return calibrate_measured(tasks, n_prompts, seed, f"{named_file(str(YI_FIGURES))}: {source}", measured_command(
        ["--from", "conf/calibration/yi34b_6b_a800x2.yaml"], n_prompts, seed, text, draft_overhead), out_dir, text,
        draft_overhead, out)


def measured_command(what: list[str], n_prompts: int, seed: int, text: str, draft_overhead: str,
                     rest: list[str] | None = None) -> str:
    """The command as typed, whole (`rest`: --out-dir, --tolerance, the machine flags)."""
    return " ".join(["python -m simulators calibrate measured", *what, "--prompts", str(n_prompts), "--seed",
                     str(seed), "--text", text]
                    + (["--draft-overhead", draft_overhead] if draft_overhead != "scaled" else []) + (rest or []))


def add_args(ap) -> None:
    from simulators.cost_model import DTYPE_BYTES
    from simulators.simconfig import PLACEMENTS

    ap.add_argument("--prompts", type=int, default=16, help="surrogate prompts per task")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default=None, help="where profiles are written (default conf/sim/)")
    ap.add_argument("--from", dest="figures", default=None, help="a figures YAML (model, hardware, source, sps, tasks)")
    ap.add_argument("--records", default=None, help="records of a real run of the pair (vanilla + speculative, hf)")
    ap.add_argument("--model", default=None, help="conf/model/<pair>.yaml (with --records or the flags below)")
    ap.add_argument("--task", default=None, help="the task's key (humaneval, mtbench, gsm8k, ...): the profile is "
                                                 "<model>_<task>")
    ap.add_argument("--hardware", default=None, help="conf/hardware/<name>.yaml the figures were measured on")
    ap.add_argument("--corpus", default=None, help="surrogate corpus for the task's text: code, pycode or prose "
                                                   "(default: code for humaneval / mbpp, else prose)")
    ap.add_argument("--vanilla-tok-s", type=float, default=None)
    ap.add_argument("--sps-tok-s", type=float, default=None)
    ap.add_argument("--sps-speedup", type=float, default=None,
                    help="SpS speedup over vanilla (instead of --sps-tok-s; alone: vanilla from the hardware roofline)")
    ap.add_argument("--sps-eta", type=float, default=None, help="SpS block efficiency (new tokens / target forward); "
                                                                "not given: inferred through the cost model")
    ap.add_argument("--sps-accepted-length", type=float, default=None, help="... or its accepted length (eta - 1)")
    ap.add_argument("--sps-gamma", type=int, default=None, help="the SpS draft length measured")
    ap.add_argument("--sps-schedule", choices=["hf", "constant"], default=None,
                    help="hf: transformers' assisted generation schedule (from 5 tokens)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="the budget of the measured runs")
    ap.add_argument("--prompt-len", type=int, default=None, help="typical prompt length (tokens)")
    ap.add_argument("--text", choices=["none", "decisions"], default="decisions",
                    help="the surrogate target's text knobs: from the real Qwen pair's decision profile of the task "
                         "(or of its corpus: prose MT-Bench, code HumanEval; the default, as `calibrate bands` "
                         "measured its bands), or the surrogate's uncalibrated defaults (none)")
    ap.add_argument("--draft-overhead", choices=DRAFT_OVERHEADS, default="scaled")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE,
                    help=f"the largest |fitted / input - 1| a profile is written with (default {TOLERANCE:g})")
    ap.add_argument("--devices", type=int, default=None, help="devices the pair ran on (as a run's sim.devices)")
    ap.add_argument("--placement", choices=PLACEMENTS, default=None,
                    help="how the pair was spread over them (as a run's sim.placement)")
    ap.add_argument("--dtype", choices=list(DTYPE_BYTES), default=None, help="weights' dtype (as a run's sim.dtype)")
    ap.add_argument("--no-spread", action="store_true",
                    help="skip measuring how far each draft strategy moves over the fits an inferred eta allows "
                         "(fit.inferred_spread; without it a run's bands of draft strategies take the eta's own "
                         "spread, a bound): `calibrate bands` uses none of it")
    ap.add_argument("--name-suffix", default="", help="profiles are named <model>_<task><suffix> (e.g. _rtx3090 "
                                                       "beside another machine's profiles of the pair)")


FLAG_KEYS = ("vanilla_tok_s", "sps_tok_s", "sps_speedup", "sps_eta", "sps_accepted_length", "sps_gamma",
             "sps_schedule", "max_new_tokens", "prompt_len")
# a task's figure keys (simulators/lab/figures.py) as the flags spell them, for the one-line errors
FLAG_NAMES = {"vanilla_tok_s": "--vanilla-tok-s", "sps_tok_s": "--sps-tok-s", "sps_speedup": "--sps-speedup",
              "sps_block_efficiency": "--sps-eta", "sps_accepted_length": "--sps-accepted-length",
              "max_new_tokens": "--max-new-tokens", "prompt_len": "--prompt-len"}


def measured_tasks(a: Any) -> tuple[tuple[Task, ...], str, list[str]]:
    """(tasks, their source, the command's own words for the provenance) from --from, --records or the flags."""
    from simulators.lab.figures import check_names, make_task

    given = [k for k in FLAG_KEYS if getattr(a, k) is not None]
    ways = [w for w, on in (("--from", a.figures), ("--records", a.records), ("the figure flags", given)) if on]
    if len(ways) != 1:
        raise OuroborosError("give the figures one way: --from FILE, --records FILE, or flags (--vanilla-tok-s, "
                             f"--sps-tok-s, --sps-eta, --sps-gamma, ...); got {', '.join(ways) or 'none'}")
    if a.figures:
        if a.model or a.task or a.hardware or a.corpus:
            raise OuroborosError("--from names its model, hardware and tasks itself")
        tasks, source = load_tasks(a.figures)
        return tasks, f"{named_file(a.figures)}: {source}", ["--from", command_path(a.figures)]
    missing = [f for f, v in (("--model", a.model), ("--task", a.task), ("--hardware", a.hardware)) if not v]
    if missing:
        raise OuroborosError(f"{', '.join(missing)} needed with {ways[0]}")
    for flag, value in (("--model", a.model), ("--task", a.task), ("--hardware", a.hardware)):
        check_name(value, flag)   # the profile's file name is <model>_<task>.yaml
    check_names(a.model, a.hardware, "calibrate measured")
    where = f"{a.model} {a.task} on {a.hardware}"
    if a.records:
        t = records_task(a.records, a.model, a.task, a.hardware, a.corpus)
        return (t,), f"records of a real run ({named_file(a.records)})", [
            "--records", command_path(a.records), "--model", a.model, "--task", a.task, "--hardware", a.hardware]
    d = {"name": a.task, "corpus": a.corpus, "prompt_len": a.prompt_len, "max_new_tokens": a.max_new_tokens,
         "vanilla_tok_s": a.vanilla_tok_s, "sps_tok_s": a.sps_tok_s, "sps_speedup": a.sps_speedup,
         "sps_block_efficiency": a.sps_eta, "sps_accepted_length": a.sps_accepted_length}
    t = make_task(a.task, d, a.model, a.hardware, sps_setting(a.sps_gamma, a.sps_schedule, where), where, FLAG_NAMES)
    words = ["--model", a.model, "--task", a.task, "--hardware", a.hardware] + [
        f"--{k.replace('_', '-')} {getattr(a, k)}" for k in FLAG_KEYS if getattr(a, k) is not None]
    return (t,), "typed as flags (the user's own measurements)", words


def repo_relative(path: str) -> str:
    """A path inside the repository as it is written from its root (provenance blocks hold no machine paths)."""
    full, root = Path(path).resolve(), conf_root().parent
    return str(full.relative_to(root)) if full.is_relative_to(root) else path


def named_file(path: str) -> str:
    """A figures or records file as a profile's provenance names it: from the repository's root when inside it, else
    by its own name and sha256 (never a machine path)."""
    full, root = Path(path).resolve(), conf_root().parent
    if full.is_relative_to(root):
        return str(full.relative_to(root))
    return f"{full.name} (sha256 {hashlib.sha256(full.read_bytes()).hexdigest()})"


def command_path(path: str) -> str:
    """A file in the stored command: from the repository's root when inside it, else its own name."""
    full, root = Path(path).resolve(), conf_root().parent
    return str(full.relative_to(root)) if full.is_relative_to(root) else full.name


def check_machine(tasks: tuple[Task, ...]) -> None:
    """Each task's pair on its machine as the fit runs it (placement, devices, memory), before any fitting; the
    advice of a pair that does not fit names calibrate's own flags."""
    from simulators.pair import pair_setup

    for t in tasks:
        try:
            pair_setup(load_conf("model", t.model), base_hardware(t.hardware), {"corpus": t.corpus,
                                                                                **dict(t.machine)})
        except OuroborosError as e:
            msg = re.sub(r"sim\.(devices|placement)=(\S+?)(?=[ )])", r"--\1 \2", str(e))
            raise OuroborosError(msg.replace("(sim.dtype)", "(--dtype)")) from None


def paper_main(a: Any) -> int:
    """`calibrate paper`: the Yi-34B/6B paper figures, as `measured --from conf/calibration/yi34b_6b_a800x2.yaml`."""
    a.figures = str(YI_FIGURES)
    return main(a)


def main(a: Any) -> int:
    from ouroboros.paths import check_out_dir

    if a.prompts < 1:
        raise OuroborosError(f"--prompts must be >= 1, got {a.prompts}")
    if a.seed < 0:
        raise OuroborosError(f"--seed must be >= 0, got {a.seed}")
    if not (math.isfinite(a.tolerance) and a.tolerance > 0):
        raise OuroborosError(f"--tolerance must be a finite number > 0 (a relative error: 0.05 = 5%), got "
                             f"{a.tolerance:g}")
    if a.devices is not None and a.devices < 1:
        raise OuroborosError(f"--devices must be >= 1, got {a.devices}")
    suffix = getattr(a, "name_suffix", "") or ""
    if suffix:
        check_name(f"x{suffix}", "--name-suffix")
    check_out_dir(a.out_dir or conf_root() / "sim", "--out-dir")   # before any fitting
    tasks, source, words = measured_tasks(a)
    machine = tuple((k, getattr(a, k)) for k in MACHINE_FLAGS if getattr(a, k) is not None)
    tasks = tuple(replace(t, machine=machine) for t in tasks)
    check_machine(tasks)
    rest = ([f"--{k} {v}" for k, v in machine] + (["--tolerance", f"{a.tolerance:g}"] if a.tolerance != TOLERANCE
                                                  else []) + (["--out-dir", repo_relative(a.out_dir)] if a.out_dir
                                                              else []) + (["--name-suffix", suffix] if suffix else [])
            + (["--no-spread"] if getattr(a, "no_spread", False) else []))
    calibrate_measured(tasks, a.prompts, a.seed, source,
                       measured_command(words, a.prompts, a.seed, a.text, a.draft_overhead, rest),
                       Path(a.out_dir) if a.out_dir else None, a.text, a.draft_overhead, tolerance=a.tolerance,
                       suffix=suffix, spread=not getattr(a, "no_spread", False))
    return 0
