"""`python -m simulators.calibrate measured`: a calibration profile for any pair, from what its user can measure;
`python -m simulators.calibrate bands`: the error bands every simulated number is shown with.

measured: per task, the pair's vanilla token/s, speculative (SpS) token/s and SpS block efficiency (or accepted
  length; eta = A + 1) with the SpS gamma or schedule it ran with, on a conf/hardware profile:
      --from FIGURES.yaml                   several tasks (conf/calibration/yi34b_6b_a800x2.yaml is the paper's Yi pair)
      --model M --task T --hardware H --vanilla-tok-s ... --sps-tok-s ... --sps-eta ... --sps-gamma 4 ...
      --records runs/records.jsonl --model M --task T --hardware H   a real run's vanilla + speculative points
  It fits what `simulators.validate paper` fits (its module doc): per task the target's per-forward overhead on the
  hardware's spec-sheet roofline so vanilla token/s matches, the draft's as r x that (one r, least squares in log SpS
  token/s over the tasks given), and the surrogate draft's agreement so SpS block efficiency matches at the SpS
  setting used. Nothing else: no lookahead or Ouroboros figure. One profile per task, conf/sim/<model>_<task>.yaml
  (the model YAML's `sim_profiles:` or that name makes it the default for the task). The Yi-34B/6B profiles are this
  command on the paper's figures.

bands: how far each kind of decision source's numbers are off, measured on figures none of them was fitted to
  (the Yi-34B/6B paper figures), written to conf/calibration/bands.yaml:
  - `profile_measured`: leave-one-task-out over the five Yi tasks: the held-out task's profile is calibrated on its
    own vanilla and SpS figures with the draft-overhead ratio r fitted on the other four; its SpS token/s and its
    lookahead and Ouroboros token/s, speedup and block efficiency are then predicted;
  - `prior`: the uncalibrated prior (conf/sim/default.yaml, the hardware's estimated overheads) on the same pair and
    tasks, every published figure predicted.
  Per strategy and metric, the band is the 80th percentile of |relative error| over the cells (the central 80% of
  errors, symmetric); the cells, their count and the share inside the band (coverage) are stored beside it.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from ouroboros.argparser import ArgumentParser
from ouroboros.backends.base import OuroborosError
from simulators.figures import YI_FIGURES, Task, load_tasks, records_task, sps_setting
from simulators.profiles import conf_root
from simulators.trust import BAND_LEVEL
from simulators.validate import (
    DRAFT_OVERHEADS,
    METHODS,
    TEXT_PROFILES,
    Calibration,
    calibrate,
    fit_draft_overhead,
    method_runs,
    task_prompts,
    text_knobs,
)

BANDS_PATH = conf_root() / "calibration" / "bands.yaml"


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
               "method": "simulators.validate calibrate: target overhead so vanilla token/s matches (per task); "
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
    return write_profiles(cal, tasks, source, command, out_dir, n_prompts, seed, out)


def paper_profiles(n_prompts: int = 16, seed: int = 0, out_dir: Path | None = None, out=print,
                   text: str = "none", draft_overhead: str = "scaled") -> list[Path]:
    """The Yi-34B/6B per-task profiles: `calibrate measured` on the paper's figures."""
    tasks, source = load_tasks(YI_FIGURES)
    return calibrate_measured(tasks, n_prompts, seed, f"{repo_relative(str(YI_FIGURES))}: {source}", measured_command(
        ["--from", "conf/calibration/yi34b_6b_a800x2.yaml"], n_prompts, seed, text, draft_overhead), out_dir, text,
        draft_overhead, out)


def measured_command(what: list[str], n_prompts: int, seed: int, text: str, draft_overhead: str) -> str:
    return " ".join(["python -m simulators.calibrate measured", *what, "--prompts", str(n_prompts), "--seed",
                     str(seed)] + (["--text", text] if text != "none" else [])
                    + (["--draft-overhead", draft_overhead] if draft_overhead != "scaled" else []))


def measured_args(ap: ArgumentParser) -> None:
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
    check_names(a.model, a.hardware, "calibrate measured")
    where = f"{a.model} {a.task} on {a.hardware}"
    if a.records:
        t = records_task(a.records, a.model, a.task, a.hardware, a.corpus)
        return (t,), f"records of a real run ({a.records})", ["--records", a.records, "--model", a.model, "--task",
                                                               a.task, "--hardware", a.hardware]
    d = {"name": a.task, "corpus": a.corpus, "prompt_len": a.prompt_len, "max_new_tokens": a.max_new_tokens,
         "vanilla_tok_s": a.vanilla_tok_s, "sps_tok_s": a.sps_tok_s, "sps_block_efficiency": a.sps_eta,
         "sps_accepted_length": a.sps_accepted_length}
    t = make_task(a.task, d, a.model, a.hardware, sps_setting(a.sps_gamma, a.sps_schedule, where), where)
    words = ["--model", a.model, "--task", a.task, "--hardware", a.hardware] + [
        f"--{k.replace('_', '-')} {getattr(a, k)}" for k in FLAG_KEYS if getattr(a, k) is not None]
    return (t,), "typed as flags (the user's own measurements)", words


def repo_relative(path: str) -> str:
    """A path inside the repository as it is written from its root (provenance blocks hold no machine paths)."""
    full, root = Path(path).resolve(), conf_root().parent
    return str(full.relative_to(root)) if full.is_relative_to(root) else path


def measured_main(a: Any) -> int:
    if a.prompts < 1:
        raise OuroborosError(f"--prompts must be >= 1, got {a.prompts}")
    tasks, source, words = measured_tasks(a)
    calibrate_measured(tasks, a.prompts, a.seed, source,
                       measured_command(words, a.prompts, a.seed, a.text, a.draft_overhead),
                       Path(a.out_dir) if a.out_dir else None, a.text, a.draft_overhead)
    return 0


# ----------------------------------------------------------------------------------------------- bands
def rel(pred: float, pub: float | None) -> float | None:
    return None if not pub else pred / pub - 1


def task_cells(t: Task, runs: dict[str, Any], tps: dict[str, float], source: str, fitted: set[tuple[str, str]]
               ) -> list[dict[str, Any]]:
    """Relative errors of one task's predictions against its figures, skipping the figures fitted to."""
    cells = []
    for m in METHODS:
        pub = t.pub_tps(m)
        pub_x = None if pub is None else pub / t.vanilla_tps
        for metric, pred, ref in (("tokens_per_s", tps[m], pub), ("block_efficiency", runs[m].eta, t.pub_eta(m)),
                                  ("speedup", tps[m] / tps["vanilla"], pub_x)):
            if m == "vanilla" and metric != "tokens_per_s" or (m, metric) in fitted:
                continue
            e = rel(pred, ref)
            if e is not None:
                cells.append({"source": source, "task": t.name, "strategy": m, "metric": metric,
                              "error": round(e, 4)})
    return cells


def loto_cells(n_prompts: int, seed: int, out=print) -> list[dict[str, Any]]:
    """profile_measured: each Yi task held out in turn (see the module doc)."""
    tasks, _ = load_tasks(YI_FIGURES)
    cal = calibrate(n_prompts, seed, "hf", tasks)
    cells = []
    for t in tasks:
        others = tuple(u for u in tasks if u.name != t.name)
        r = fit_draft_overhead(cal.plans, cal.over_t, others, scaled=True)
        ot, od = cal.over_t[t.name], r * cal.over_t[t.name]
        runs = {"vanilla": cal.vanilla[t.name], **method_runs(t, cal.a[t.name], "hf", n_prompts, seed)}
        tps = {m: runs[m].tps(ot, od) for m in METHODS}
        out(f"  profile (vanilla + SpS), {t.name} held out: r = {r:.3f} from the other four")
        cells += task_cells(t, runs, tps, "profile_measured",
                            {("speculative", "block_efficiency"), ("vanilla", "tokens_per_s")})
    return cells


def prior_cells(n_prompts: int, seed: int, out=print) -> list[dict[str, Any]]:
    """prior: conf/sim/default.yaml on the Yi pair and the A800 profile as they are (estimated overheads)."""
    from ouroboros.decode import decode
    from ouroboros.strategies import build_proposer, get_spec
    from simulators.pair import make_pair
    from simulators.profiles import load_conf
    from simulators.validate import Run

    def on(t: Task, strategy: str, params: dict[str, Any], a: float, n: int, s: int) -> Run:
        pair = make_pair(load_conf("model", t.model), load_conf("hardware", t.hardware), {}, seed=s)
        needs = get_spec(strategy).needs_draft_model
        params = {"gamma": 5, **params} if params.get("schedule") == "hf" else params
        prop = build_proposer(strategy, params, pair.target, pair.draft if needs else None)
        new = steps = 0
        for p in task_prompts(pair, t, n, s):
            res = decode(pair.target, prop, p, t.max_new, pair.eos_ids)
            new, steps = new + res.new_tokens, steps + len(res.steps)
        tb, db = pair.target, pair.draft
        return Run(new, steps, tb.busy_s, db.busy_s, 0, 0)   # type: ignore[attr-defined]

    tasks, _ = load_tasks(YI_FIGURES)
    cells = []
    for t in tasks:
        runs = {"vanilla": on(t, "vanilla", {}, 0.0, n_prompts, seed), **method_runs(t, 0.0, "hf", n_prompts, seed,
                                                                                     on=on)}
        tps = {m: runs[m].tps(0.0, 0.0) for m in METHODS}
        out(f"  prior, {t.name}: vanilla {tps['vanilla']:.2f} tok/s (published {t.vanilla_tps})")
        cells += task_cells(t, runs, tps, "prior", set())
    return cells


def recorded_cells(specs: list[str], out=print) -> list[dict[str, Any]]:
    """profile_recorded: each `TASK=DIR:PROFILE` is a folder of real runs recorded by `simulators.realcheck` on
    prompts the profile was never fitted to; every recording process (sub-folder) is one cell per strategy: the
    surrogate's block efficiency under the profile against the real pair's on the same prompts."""
    from simulators.decisions import compare, folders, id_mapper, load_real
    from simulators.sim_profiles import load_profile

    cells = []
    for spec in specs:
        task, _, rest = spec.partition("=")
        root, _, profile = rest.rpartition(":")
        if not (task and root and profile):
            raise OuroborosError(f"--recorded takes TASK=DIR:PROFILE, got {spec!r}")
        opts = load_profile(profile)
        model = str(opts.get("pair") or "qwen_coder")
        opts.pop("fit", None)
        mapper = id_mapper(model)
        for d in folders(root):
            real = load_real(d, model)
            seen = {r.prompt_id for run in real.values() for r in run.results}
            for row in compare(real, opts, mapper, "all"):
                e = rel(row["sim"]["eta"], row["real"]["eta"])
                name = real[row["run"]].name
                out(f"  {profile} on {os.path.basename(d)} ({row['prompts']} prompts): {row['run']} eta real "
                    f"{row['real']['eta']:.2f}, simulated {row['sim']['eta']:.2f} ({e:+.1%})")
                if e is not None and name != "vanilla":
                    cells.append({"source": "profile_recorded", "task": f"{task} ({os.path.basename(d)})",
                                  "strategy": name, "metric": "block_efficiency", "error": round(e, 4),
                                  "run": row["run"], "prompts": sorted(seen)})
    return cells


def quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)


def summarise(cells: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """strategy -> {metric: band, cells, coverage, median bias} over the cells of one source."""
    out: dict[str, dict[str, Any]] = {}
    for m in dict.fromkeys([*METHODS, *(c["strategy"] for c in cells)]):
        entry: dict[str, Any] = {}
        for metric in ("block_efficiency", "tokens_per_s", "speedup"):
            errs = [c["error"] for c in cells if c["strategy"] == m and c["metric"] == metric]
            if m == "vanilla" and metric != "tokens_per_s":
                entry[metric] = 0.0     # 1 by definition, whatever the source
                continue
            if not errs:
                continue
            b = quantile([abs(e) for e in errs], BAND_LEVEL)
            entry[metric] = round(b, 4)
            entry.setdefault("cells", {})[metric] = len(errs)
            entry.setdefault("coverage", {})[metric] = round(sum(abs(e) <= b + 1e-12 for e in errs) / len(errs), 3)
            entry.setdefault("bias", {})[metric] = round(statistics.median(errs), 4)
        out[m] = entry
    return out


def bands_main(a: Any, out=print) -> int:
    from simulators.sim_profiles import git_commit

    out("measuring the bands on the Yi-34B/6B paper figures (conf/calibration/yi34b_6b_a800x2.yaml):")
    loto = loto_cells(a.prompts, a.seed, out)
    prior = prior_cells(a.prompts, a.seed, out)
    recorded = recorded_cells(a.recorded, out) if a.recorded else []
    cmd = f"python -m simulators.calibrate bands --prompts {a.prompts} --seed {a.seed}" + "".join(
        f" --recorded {spec.split('=', 1)[0]}=<recorded runs>:{spec.rpartition(':')[2]}" for spec in a.recorded)
    doc = {
        "level": BAND_LEVEL,
        "profile_measured": {
            "what": "a profile from the pair's own vanilla + SpS figures (calibrate measured)",
            "held_out": "leave-one-task-out over Yi-34B/6B's five paper tasks",
            "command": cmd, "commit": git_commit(), "strategies": summarise(loto), "cells": loto},
        "prior": {
            "what": "the uncalibrated prior (conf/sim/default.yaml, the hardware's estimated overheads)",
            "held_out": "every Yi-34B/6B paper figure; the decisions are not fitted to any, but the a800x2 profile's "
                        "per-forward overheads were fitted to these vanilla and SpS token/s, so the token/s bands "
                        "understate the prior's clock error on an uncalibrated machine",
            "command": cmd, "commit": git_commit(), "strategies": summarise(prior), "cells": prior},
        "profile_recorded": {
            "what": "a profile fitted to the pair's recorded real decisions (calibrate decisions)",
            "held_out": ("real runs of prompts no profile was fitted to (" + "; ".join(
                f"{sp.split('=', 1)[0]} with {sp.rpartition(':')[2]}" for sp in a.recorded) + "; traces kept in the "
                "cache, not in git; one cell per recording process of 4 prompts); block efficiency only, the clock "
                "is not part of it"
                         if a.recorded else "not measured: needs recorded real runs of held-out prompts "
                         "(simulators.realcheck); python -m simulators.validate decisions reports their errors"),
            "command": cmd if a.recorded else None, "commit": git_commit() if a.recorded else None,
            "strategies": summarise(recorded) if a.recorded else {}, "cells": recorded},
    }
    path = Path(a.out) if a.out else BANDS_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("# Written by `python -m simulators.calibrate bands` (simulators/measured.py): per kind of decision "
                "source and\n# strategy, the half-width of the central 80% of relative errors measured on figures "
                "the source was not\n# fitted to. Read by simulators/trust.py: every simulated record, table and "
                "figure shows them.\n")
        yaml.safe_dump(doc, f, sort_keys=False, width=120)
    out(band_table(doc))
    out(f"bands written to {path}")
    return 0


def band_table(doc: dict[str, Any]) -> str:
    lines = [f"{'source':<18}{'strategy':<13}{'eta':>8}{'tok/s':>8}{'speedup':>9}{'cells':>7}{'coverage':>10}"]
    for src in ("profile_measured", "prior", "profile_recorded"):
        for m, e in (doc[src].get("strategies") or {}).items():
            def f(k: str, e: dict[str, Any] = e) -> str:
                return "-" if e.get(k) is None else f"±{e[k]:.0%}"
            n = max((e.get("cells") or {}).values(), default=0)
            cov = min((e.get("coverage") or {}).values(), default=None)
            lines.append(f"{src:<18}{m:<13}{f('block_efficiency'):>8}{f('tokens_per_s'):>8}{f('speedup'):>9}{n:>7}"
                         f"{'-' if cov is None else f'{cov:.0%}':>10}")
    return "\n".join(lines)


def main_sub(what: str, argv: list[str]) -> int:
    ap = ArgumentParser(prog=f"python -m simulators.calibrate {what}")
    ap.add_argument("--prompts", type=int, default=16, help="surrogate prompts per task")
    ap.add_argument("--seed", type=int, default=0)
    if what == "bands":
        ap.add_argument("--out", default=None, help="where the bands go (default conf/calibration/bands.yaml)")
        ap.add_argument("--recorded", action="append", default=[], metavar="TASK=DIR:PROFILE",
                        help="real runs recorded by simulators.realcheck on prompts PROFILE was not fitted to "
                             "(repeatable): the profile_recorded band")
        a = ap.parse_args(argv)
        if a.prompts < 1:
            raise OuroborosError(f"--prompts must be >= 1, got {a.prompts}")
        return bands_main(a)
    ap.add_argument("--out-dir", default=None, help="where profiles are written (default conf/sim/)")
    measured_args(ap)
    a = ap.parse_args(argv)
    if what == "paper":   # the Yi-34B/6B paper figures: `measured --from conf/calibration/yi34b_6b_a800x2.yaml`
        a.figures = str(YI_FIGURES)
    return measured_main(a)
