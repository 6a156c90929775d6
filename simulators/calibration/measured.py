"""`python -m simulators calibrate measured`: a calibration profile for any pair, from what its user can measure.

Per task, the pair's vanilla token/s, speculative (SpS) token/s and SpS block efficiency (or accepted length;
eta = A + 1) with the SpS gamma or schedule it ran with, on a conf/hardware profile:
    --from FIGURES.yaml                   several tasks (conf/calibration/yi34b_6b_a800x2.yaml is the paper's Yi pair)
    --model M --task T --hardware H --vanilla-tok-s ... --sps-tok-s ... --sps-eta ... --sps-gamma 4 ...
    --records runs/records.jsonl --model M --task T --hardware H   a real run's vanilla + speculative points
It fits what `python -m simulators check paper` fits (simulators/calibration/paper_fit.py): per task the target's
per-forward overhead on the hardware's spec-sheet roofline so vanilla token/s matches, the draft's as r x that (one r,
least squares in log SpS token/s over the tasks given), and the surrogate draft's agreement so SpS block efficiency
matches at the SpS setting used. Nothing else: no lookahead or Ouroboros figure. One profile per task,
conf/sim/<model>_<task>.yaml (the model YAML's `sim_profiles:` or that name makes it the default for the task).
`calibrate paper` is this command on the paper's figures (the Yi-34B/6B profiles).
Impossible figures (simulators/figures.py) and an unwritable --out-dir are one `error:` line before any fitting; a fit
whose draft overhead stops at an end of its range (the SpS token/s out of the cost model's reach) writes nothing.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ouroboros.backends.base import OuroborosError
from simulators.calibration.paper_fit import (
    DRAFT_OVERHEADS,
    TEXT_PROFILES,
    Calibration,
    calibrate,
    draft_overhead_grid,
    text_knobs,
)
from simulators.figures import YI_FIGURES, Task, load_tasks, records_task, sps_setting
from simulators.profiles import check_name, conf_root


# ----------------------------------------------------------------------------------------------- profiles
def write_profiles(cal: Calibration, tasks: tuple[Task, ...], source: str, command: str, out_dir: Path | None,
                   n_prompts: int, seed: int, out=print) -> list[Path]:
    """One profile per task from a fitted calibration, with its provenance block."""
    from simulators.sim_profiles import git_commit, pair_profiles, write_profile

    draft = (f"draft overhead = {cal.ratio:.3f} x the task's target overhead, the ratio by least squares in log SpS "
             "token/s over the tasks with an SpS figure (shared); " if cal.ratio is not None else
             "draft overhead by least squares in log SpS token/s over the tasks with one (shared); ")
    commit = git_commit()
    paths = []
    for t in tasks:
        a, name = cal.a[t.name], f"{t.model}_{t.key}"
        fields = {"pair": t.model, "profile": name, "corpus": t.corpus, **dict(t.text), "alpha_easy": round(a, 6),
                  "alpha_hard": round(a**4, 6), "target_overhead_s": round(cal.over_t[t.name], 6),
                  "draft_overhead_s": round(cal.over_d[t.name], 6)}
        fit = {"pair": f"{t.model} on hardware={t.hardware}", "task": t.name, "method_kind": "measured",
               "hardware": t.hardware, "inputs": t.inputs(),
               "inputs_source": f"{source}. No lookahead or Ouroboros figure is used.",
               "text_knobs": (f"{', '.join(k for k, _ in t.text)} from conf/sim/{TEXT_PROFILES[t.name]}.yaml (the "
                              "real Qwen2.5-Coder pair's recorded decisions, no published figure)" if t.text
                              else "the surrogate's defaults"),
               "method": "simulators.calibration.paper_fit.calibrate: target overhead so vanilla token/s matches (per "
                         "task); "
                         + draft + "agreement so SpS block efficiency matches at the SpS setting measured ("
                         + ("speculative schedule=hf, transformers' heuristic starting at 5" if t.sps == "hf"
                            else f"speculative gamma={t.sps}") + ")",
               "surrogate_prompts": n_prompts, "seed": seed, "max_new_tokens": t.max_new, "command": command,
               "commit": commit}
        paths.append(write_profile(name, f"{t.model} on {t.hardware}, {t.name}: calibration profile (measured vanilla "
                                         "+ SpS figures)", fields, fit, out_dir))
        out(f"{name}: alpha_easy {a:.4f}, target overhead {cal.over_t[t.name] * 1e3:.2f} ms, draft overhead "
            f"{cal.over_d[t.name] * 1e3:.2f} ms -> {paths[-1]}")
        if pair_profiles(t.model).get(t.key) not in (None, name):
            out(f"note: conf/model/{t.model}.yaml names {pair_profiles(t.model)[t.key]} for {t.key}; set "
                f"sim={name} to use this one")
    return paths


def calibrate_measured(tasks: tuple[Task, ...], n_prompts: int, seed: int, source: str, command: str,
                       out_dir: Path | None = None, text: str = "none", draft_overhead: str = "scaled",
                       out=print) -> list[Path]:
    tasks = tuple(replace(t, text=text_knobs(t, text)) for t in tasks)
    cal = calibrate(n_prompts, seed, "hf", tasks, draft_overhead)
    check_draft_overhead(cal, tasks, draft_overhead)
    return write_profiles(cal, tasks, source, command, out_dir, n_prompts, seed, out)


def check_draft_overhead(cal: Calibration, tasks: tuple[Task, ...], draft_overhead: str) -> None:
    """Refuse a fit whose draft overhead stopped at an end of its search range: the SpS token/s given are then out of
    the cost model's reach (at 0: faster than free drafting allows at their block efficiency), not matched."""
    grid = draft_overhead_grid(draft_overhead == "scaled")
    x = cal.ratio if cal.ratio is not None else next(iter(cal.over_d.values()))
    if x not in (grid[0], grid[-1]):
        return
    given = ", ".join(f"{t.name} {t.sps_tps:g} (vanilla {t.vanilla_tps:g}, eta {t.sps_eta:g})" for t in tasks
                      if t.sps_tps)
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
    return calibrate_measured(tasks, n_prompts, seed, f"{repo_relative(str(YI_FIGURES))}: {source}", measured_command(
        ["--from", "conf/calibration/yi34b_6b_a800x2.yaml"], n_prompts, seed, text, draft_overhead), out_dir, text,
        draft_overhead, out)


def measured_command(what: list[str], n_prompts: int, seed: int, text: str, draft_overhead: str) -> str:
    return " ".join(["python -m simulators calibrate measured", *what, "--prompts", str(n_prompts), "--seed",
                     str(seed)] + (["--text", text] if text != "none" else [])
                    + (["--draft-overhead", draft_overhead] if draft_overhead != "scaled" else []))


def add_args(ap) -> None:
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
    ap.add_argument("--sps-eta", type=float, default=None, help="SpS block efficiency (new tokens / target forward)")
    ap.add_argument("--sps-accepted-length", type=float, default=None, help="... or its accepted length (eta - 1)")
    ap.add_argument("--sps-gamma", type=int, default=None, help="the SpS draft length measured")
    ap.add_argument("--sps-schedule", choices=["hf", "constant"], default=None,
                    help="hf: transformers' assisted generation schedule (from 5 tokens)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="the budget of the measured runs")
    ap.add_argument("--prompt-len", type=int, default=None, help="typical prompt length (tokens)")
    ap.add_argument("--text", choices=["none", "decisions"], default="none",
                    help="the surrogate target's text knobs: the defaults, or the Qwen pair's decision profiles")
    ap.add_argument("--draft-overhead", choices=DRAFT_OVERHEADS, default="scaled")


FLAG_KEYS = ("vanilla_tok_s", "sps_tok_s", "sps_eta", "sps_accepted_length", "sps_gamma", "sps_schedule",
             "max_new_tokens", "prompt_len")
# a task's figure keys (simulators/figures.py) as the flags spell them, for the one-line errors
FLAG_NAMES = {"vanilla_tok_s": "--vanilla-tok-s", "sps_tok_s": "--sps-tok-s", "sps_block_efficiency": "--sps-eta",
              "sps_accepted_length": "--sps-accepted-length", "max_new_tokens": "--max-new-tokens",
              "prompt_len": "--prompt-len"}


def measured_tasks(a: Any) -> tuple[tuple[Task, ...], str, list[str]]:
    """(tasks, their source, the command's own words for the provenance) from --from, --records or the flags."""
    from simulators.figures import check_names, make_task

    given = [k for k in FLAG_KEYS if getattr(a, k) is not None]
    ways = [w for w, on in (("--from", a.figures), ("--records", a.records), ("the figure flags", given)) if on]
    if len(ways) != 1:
        raise OuroborosError("give the figures one way: --from FILE, --records FILE, or flags (--vanilla-tok-s, "
                             f"--sps-tok-s, --sps-eta, --sps-gamma, ...); got {', '.join(ways) or 'none'}")
    if a.figures:
        if a.model or a.task or a.hardware or a.corpus:
            raise OuroborosError("--from names its model, hardware and tasks itself")
        tasks, source = load_tasks(a.figures)
        return tasks, f"{repo_relative(a.figures)}: {source}", ["--from", repo_relative(a.figures)]
    missing = [f for f, v in (("--model", a.model), ("--task", a.task), ("--hardware", a.hardware)) if not v]
    if missing:
        raise OuroborosError(f"{', '.join(missing)} needed with {ways[0]}")
    for flag, value in (("--model", a.model), ("--task", a.task), ("--hardware", a.hardware)):
        check_name(value, flag)   # the profile's file name is <model>_<task>.yaml
    check_names(a.model, a.hardware, "calibrate measured")
    where = f"{a.model} {a.task} on {a.hardware}"
    if a.records:
        t = records_task(a.records, a.model, a.task, a.hardware, a.corpus)
        return (t,), f"records of a real run ({a.records})", ["--records", a.records, "--model", a.model, "--task",
                                                               a.task, "--hardware", a.hardware]
    d = {"name": a.task, "corpus": a.corpus, "prompt_len": a.prompt_len, "max_new_tokens": a.max_new_tokens,
         "vanilla_tok_s": a.vanilla_tok_s, "sps_tok_s": a.sps_tok_s, "sps_block_efficiency": a.sps_eta,
         "sps_accepted_length": a.sps_accepted_length}
    t = make_task(a.task, d, a.model, a.hardware, sps_setting(a.sps_gamma, a.sps_schedule, where), where, FLAG_NAMES)
    words = ["--model", a.model, "--task", a.task, "--hardware", a.hardware] + [
        f"--{k.replace('_', '-')} {getattr(a, k)}" for k in FLAG_KEYS if getattr(a, k) is not None]
    return (t,), "typed as flags (the user's own measurements)", words


def repo_relative(path: str) -> str:
    """A path inside the repository as it is written from its root (provenance blocks hold no machine paths)."""
    full, root = Path(path).resolve(), conf_root().parent
    return str(full.relative_to(root)) if full.is_relative_to(root) else path


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
    check_out_dir(a.out_dir or conf_root() / "sim", "--out-dir")   # before any fitting
    tasks, source, words = measured_tasks(a)
    calibrate_measured(tasks, a.prompts, a.seed, source,
                       measured_command(words, a.prompts, a.seed, a.text, a.draft_overhead),
                       Path(a.out_dir) if a.out_dir else None, a.text, a.draft_overhead)
    return 0
