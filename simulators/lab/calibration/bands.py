"""`python -m simulators calibrate bands`: the error bands every simulated number is shown with.

How far each kind of decision source's numbers are off, measured on figures none of them was fitted to, written to
conf/calibration/bands.yaml (read by simulators/trust.py):
- `profile_measured` and `prior`: across pairs, on the path users run (simulators/lab/calibration/across.py): every
  figures file under conf/calibration/ with held-out figures (Yi-34B/6B's paper figures, Spec-Bench's four
  leaderboard settings) is calibrated from its own vanilla + SpS figures and swept with `python -m ouroboros.sweep`
  on the simulator's own prompts at each task's length; each published figure of another strategy is one cell. The
  coverage stored is leave-one-setting-out: each setting's cells against the band of the other settings' cells;
- `profile_recorded` (with --recorded or --records): a decision profile's block efficiency on real runs it was not
  fitted to (recorded traces, or a real sweep's prompts that no deciding profile lists among its fit prompts: the
  odd positions of the sweep it was fitted on, every prompt of a fresh one),
  and with --speedups its speedups: a real interleaved sweep of held-out prompts against simulated sweeps of the
  same prompts on a clock calibrated on the machine that ran it (`calibrate clock --records` on other prompts).
Per strategy and metric, the band is the 80th percentile of |relative error| over the cells (the central 80% of
errors, symmetric; with fewer than 3 cells, the largest); the cells, their count and the share inside the band
(coverage) are stored beside it. A strategy a source has no cell for is listed under `not_measured` with the reason.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

import yaml

from ouroboros.errors import OuroborosError
from ouroboros.paths import check_writable
from simulators.architectures import conf_root
from simulators.lab.calibration.across import across_cells, leave_one_out, quantile, rel, settings
from simulators.trust import BAND_LEVEL

BANDS_PATH = conf_root() / "calibration" / "bands.yaml"
RECORDS_FROM = ("sweep records", "speedup records")   # cells measured from records files (--keep-records keeps them)
MIN_QUANTILE_CELLS = 3   # leave one out: a band of fewer other cells is their largest |error|, not a quantile
# below this many cells a source gives no band at all: one or two errors are not a measured spread (a single cell is
# inside its own "band" by construction); the reason lists what was measured
MIN_BAND_CELLS = 3


def profile_spec(spec: str, flag: str, where: str) -> tuple[str, str, str, dict[str, Any], str]:
    """`TASK=<where>:PROFILE` -> (task, where, profile, the profile's sim options with its `fit:` block, pair)."""
    from simulators.sim_profiles import load_profile

    task, _, rest = spec.partition("=")
    place, _, profile = rest.rpartition(":")
    if not (task and place and profile):
        raise OuroborosError(f"{flag} takes TASK={where}:PROFILE, got {spec!r}")
    opts = load_profile(profile)
    return task, place, profile, opts, str(opts.get("pair") or "qwen_coder")


def recorded_cells(specs: list[str], out=print) -> list[dict[str, Any]]:
    """profile_recorded: each `TASK=DIR:PROFILE` is a folder of real runs recorded by `python -m simulators check
    clock` on prompts the profile was never fitted to; every recording process (sub-folder) is one cell per
    strategy: the surrogate's block efficiency under the profile against the real pair's on the same prompts."""
    from simulators.lab.decisions.stats import compare, folders, id_mapper, load_real

    cells = []
    for spec in specs:
        task, root, profile, opts, model = profile_spec(spec, "--recorded", "DIR")
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


def records_cells(specs: list[str], out=print, by_category: bool = False) -> list[dict[str, Any]]:
    """profile_recorded from real sweeps: each `TASK=FILE:PROFILE` is a sweep's records file whose even-position
    prompts PROFILE was fitted to (`calibrate decisions --records`); every sweep of a point (a group of prompts) gives
    one cell per strategy: the surrogate's block efficiency under the profile against the real pair's on that
    group's held-out prompts: every prompt no deciding profile lists among its fit prompts (`fit_prompt_ids`; the
    fitted file's odd positions, a fresh file's every prompt), the odd positions less those where it lists none.
    `by_category`: each prompt decided as a run on PROFILE decides it, by its category's profile where the model
    YAML's sim_category_profiles names one for TASK (those profiles must list their fit prompts)."""
    from simulators.architectures import load_conf
    from simulators.lab.decisions.stats import id_mapper, load_sweep, sim_pooled, split, stats
    from simulators.sim_profiles import load_profile
    from simulators.trust import category_profiles

    cells = []
    for spec in specs:
        task, path, profile, opts, model = profile_spec(spec, "--records", "FILE")
        fit = (opts.pop("fit", None) or {}).get("inputs", {})
        if fit.get("fit_prompts") != "even positions":
            raise OuroborosError(f"--records {spec!r}: {profile} was not fitted on a records file's even positions "
                                 f"(its fit: {fit.get('fit_prompts')!r}), so no prompt of the file is known to be "
                                 "held out")
        listed = fit.get("fit_prompt_ids") is not None
        seen = set(fit.get("fit_prompt_ids") or [])
        routes = category_profiles(load_conf("model", model), {"kind": task}) if by_category else None
        for name in sorted(set((routes or {}).values())):
            ids = ((load_profile(name).get("fit") or {}).get("inputs") or {}).get("fit_prompt_ids")
            if ids is None:
                raise OuroborosError(f"--records {spec!r} --by-category: {name} does not list its fit prompts "
                                     "(fit.inputs.fit_prompt_ids), so no prompt is known to be held out from it")
            seen |= set(ids)
        if routes:
            opts["by_category"] = routes
            profile += " + per category " + ", ".join(sorted(set(routes.values())))
        mapper = id_mapper(model)
        for label, run in load_sweep(path, model, task).items():
            cand = range(len(run.results)) if listed else split(len(run.results))[1]
            held = [i for i in cand if run.results[i].prompt_id not in seen]
            for g in sorted(set(run.groups)):
                pos = [i for i in held if run.groups[i] == g]
                if not pos:
                    continue
                r = stats([run.results[i] for i in pos])["eta"]
                s = stats(sim_pooled(run, pos, opts, mapper))["eta"]
                e = rel(s, r)
                ids = [run.results[i].prompt_id for i in pos]
                out(f"  {profile} on {task} {ids[0]}..{ids[-1]} ({len(pos)} prompts): {label} eta real {r:.2f}, "
                    f"simulated {s:.2f} ({e:+.1%})")
                if e is not None:
                    cells.append({"source": "profile_recorded", "task": f"{task} ({ids[0]}..{ids[-1]})",
                                  "strategy": run.name, "metric": "block_efficiency", "error": round(e, 4),
                                  "run": label, "prompts": ids, "profile": profile, "from": "sweep records"})
    return cells


def speedup_cells(specs: list[str], out=print) -> list[dict[str, Any]]:
    """profile_recorded speedups: each `TASK=REAL:SIM[,SIM...]` is a real interleaved sweep's records of prompts no
    profile was fitted to and simulated sweeps of the same prompts and points (seeds pooled) on a clock calibrated
    on that machine; one cell per strategy: the modelled speedup over vanilla against the measured one. Everything
    is read and checked before any cell is made (one line per bad input)."""
    from ouroboros.running.sinks import read_lines
    from simulators.sim_profiles import load_profile

    def points(path: str, flag: str) -> dict[str, dict[str, Any]]:
        if not os.path.isfile(path):
            raise OuroborosError(f"--speedups {flag}: no such file {path}")
        pts = {str(r["label"]): r for r in read_lines(path) if r.get("totals") and "point_id" in r}
        if "vanilla" not in pts:
            raise OuroborosError(f"--speedups {flag}: {path} holds no vanilla point to divide by (sweep=compare)")
        return pts

    def speedup(runs: list[dict[str, dict[str, Any]]], label: str) -> float:
        def tps(lb: str) -> float:
            return sum(r[lb]["totals"]["new_tokens"] for r in runs) / sum(r[lb]["totals"]["elapsed_s"] for r in runs)
        return tps(label) / tps("vanilla")

    cells = []
    for spec in specs:
        task, _, rest = spec.partition("=")
        real_path, _, sim_paths = rest.partition(":")
        if not (task and real_path and sim_paths):
            raise OuroborosError(f"--speedups takes TASK=REAL:SIM[,SIM...], got {spec!r}")
        real = points(real_path, spec)
        sims = [points(sp, spec) for sp in sim_paths.split(",")]
        if any(r.get("backend") == "sim" for r in real.values()):
            raise OuroborosError(f"--speedups {spec!r}: {real_path} holds simulated points; REAL is a real sweep's")
        ids = [str(x) for x in (real["vanilla"].get("config") or {}).get("dataset", {}).get("ids") or []]
        profiles: set[str] = set()
        for sp, pts in zip(sim_paths.split(","), sims, strict=True):
            for lb, r in pts.items():
                d = r.get("decisions") or {}
                if r.get("backend") != "sim" or d.get("kind") != "profile" or d.get("method") != "recorded":
                    raise OuroborosError(f"--speedups {spec!r}: {sp} point {lb} is not a simulated run decided by a "
                                         "profile of recorded decisions")
                if sorted(str(x) for x in (r.get("config") or {}).get("dataset", {}).get("ids") or []) != sorted(ids) \
                        or r.get("max_new_tokens") != real[lb if lb in real else "vanilla"].get("max_new_tokens"):
                    raise OuroborosError(f"--speedups {spec!r}: {sp} point {lb} ran other prompts or another "
                                         "max_new_tokens than the real sweep")
                profiles |= {str(d.get("name")), *(str(v) for v in (d.get("by_category") or {}).values())}
        if not ids:
            raise OuroborosError(f"--speedups {spec!r}: the real sweep names no dataset.ids (held-out prompts must be "
                                 "named)")
        unlisted = []
        for name in sorted(profiles):
            listed = ((load_profile(name).get("fit") or {}).get("inputs") or {}).get("fit_prompt_ids")
            if listed is None:
                unlisted.append(name)
            fitted = set(listed or [])
            if fitted & set(ids):
                raise OuroborosError(f"--speedups {spec!r}: {name} was fitted to prompt(s) "
                                     f"{', '.join(sorted(fitted & set(ids)))}, so they are not held out")
        if unlisted:
            out(f"note: --speedups {task}: {', '.join(unlisted)} list(s) no fit prompts (fit.inputs.fit_prompt_ids), "
                "so that these prompts are held out from them is not checked here; the cells say so")
        label = next(iter(sims[0].values()))["decisions"].get("label") or ", ".join(sorted(profiles))
        hw = sorted({str((r.get("hardware") or {}).get("name")) for pts in sims for r in pts.values()})
        for lb, r in real.items():
            if lb == "vanilla" or not all(lb in pts for pts in sims):
                continue
            got, want = speedup(sims, lb), speedup([real], lb)
            e = rel(got, want)
            out(f"  {label} on {task} {ids[0]}..{ids[-1]} ({len(ids)} prompts), hardware {', '.join(hw)}: {lb} "
                f"speedup real {want:.2f}x, modelled {got:.2f}x ({e:+.1%})")
            if e is not None:
                cells.append({"source": "profile_recorded", "task": f"{task} ({ids[0]}..{ids[-1]})",
                              "strategy": str(r.get("strategy") or lb), "metric": "speedup", "error": round(e, 4),
                              "run": lb, "prompts": ids, "profile": label, "hardware": hw,
                              "from": "speedup records", **({"held_out_unchecked": unlisted} if unlisted else {})})
    return cells


def kept_cells(path: Path, traces: bool = True, records: bool = False) -> list[dict[str, Any]]:
    """The profile_recorded cells of a bands file that came from recorded traces (`traces`) and / or from sweep
    records (`records`: sweeps whose records files are no longer at hand), each saying which measurement it was kept
    from."""
    if not path.is_file():
        flag = "--keep-recorded" if traces else "--keep-records"
        raise OuroborosError(f"{flag}: no bands file at {path} to keep cells from")
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f) or {}
    src = doc.get("profile_recorded") or {}
    where = src.get("kept_from") or f"{src.get('command')} at {src.get('commit')}"
    return [{**c, "kept_from": c.get("kept_from") or where} for c in src.get("cells") or []
            if (records if c.get("from") in RECORDS_FROM else traces)]


def replaced(kept: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The kept cells a new measurement does not take over: a new cell of the same strategy and metric holding any of
    a kept cell's prompts replaces it (the same prompts measured again, in the same groups or in others)."""
    again: dict[tuple[str, str | None], set[str]] = {}
    for c in new:
        again.setdefault((c["strategy"], c.get("metric")), set()).update(c.get("prompts") or ())
    return [c for c in kept if not c.get("prompts")
            or not again.get((c["strategy"], c.get("metric")), set()) & set(c["prompts"])]


def held_across(files: list[Path], what: str) -> str:
    return (f"leave one setting out over {len(files)} pair x hardware settings (" + ", ".join(p.stem for p in files)
            + f"): {what}, each predicted by `python -m ouroboros.sweep` on the simulator's own prompts at the task's "
            "length and budget")


# Why a strategy has no cell for a source measured across published settings: no setting publishes a figure of it
NOT_PUBLISHED = ("no published setting (Yi-34B/6B's paper, Spec-Bench's leaderboard) gives a figure of it on a pair "
                 "calibrated from vanilla + SpS figures; its band on the real Qwen pair's recorded profiles is the "
                 "profile_recorded one")


def not_measured(cells: list[dict[str, Any]]) -> dict[str, str]:
    """Why a strategy has no speedup band: no cell of it, or fewer than MIN_BAND_CELLS (which ones)."""
    from ouroboros.strategies import REGISTRY

    have = {c["strategy"] for c in cells}
    out = {m: NOT_PUBLISHED for m in REGISTRY if m not in have and m != "vanilla"}
    for m in REGISTRY:
        few = [c for c in cells if c["strategy"] == m and c["metric"] == "speedup"]
        if m != "vanilla" and 0 < len(few) < MIN_BAND_CELLS:
            out[m] = (f"measured on {len(few)} cell{'s' * (len(few) > 1)} only ("
                      + "; ".join(f"{c['setting']} {c['task']}: {c['error']:+.0%}" for c in few)
                      + f"), fewer than the {MIN_BAND_CELLS} a band needs")
    return out


def summarise(cells: list[dict[str, Any]], files: list[Path] | None = None) -> dict[str, dict[str, Any]]:
    """strategy -> {metric: band, cells, coverage, median bias} over the cells of one source; with `files` (cells
    measured across settings) also the leave-one-setting-out coverage per metric (`loso_coverage`)."""
    out: dict[str, dict[str, Any]] = {}
    loso = leave_one_out(cells, BAND_LEVEL, MIN_QUANTILE_CELLS) if files else {}
    for m in dict.fromkeys(["vanilla", *(c["strategy"] for c in cells)]):
        entry: dict[str, Any] = {}
        for metric in ("block_efficiency", "tokens_per_s", "speedup"):
            errs = [c["error"] for c in cells if c["strategy"] == m and c["metric"] == metric]
            if m == "vanilla" and metric != "tokens_per_s":
                entry[metric] = 0.0     # 1 by definition, whatever the source
                continue
            if not errs:
                continue
            if len(errs) < MIN_BAND_CELLS:
                entry.setdefault("too_few_cells", {})[metric] = [round(e, 4) for e in errs]
                continue
            b = quantile([abs(e) for e in errs], BAND_LEVEL)
            entry[metric] = round(b, 4)
            entry.setdefault("cells", {})[metric] = len(errs)
            entry.setdefault("coverage", {})[metric] = round(sum(abs(e) <= b + 1e-12 for e in errs) / len(errs), 3)
            entry.setdefault("bias", {})[metric] = round(statistics.median(errs), 4)
            if loso.get(m, {}).get(metric, {}).get("coverage") is not None:
                entry.setdefault("loso_coverage", {})[metric] = loso[m][metric]["coverage"]
        if any(k in entry for k in ("block_efficiency", "tokens_per_s", "speedup")):
            out[m] = entry   # (one with too few cells of every metric: not_measured says why)
    return out


def add_args(ap) -> None:
    ap.add_argument("--prompts", type=int, default=8, help="the simulator's own prompts per task in each sweep "
                                                             "and in each calibration")
    ap.add_argument("--settings", default=None, help="comma-separated figures files (conf/calibration/<name>.yaml) "
                                                     "to measure across (default: every one with held-out figures)")
    ap.add_argument("--work-dir", default=None, help="keep each setting's profiles and sweep records here (default: "
                                                     "a temporary folder, removed)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="where the bands go (default conf/calibration/bands.yaml)")
    ap.add_argument("--recorded", action="append", default=[], metavar="TASK=DIR:PROFILE",
                    help="real runs recorded by `python -m simulators check clock` on prompts PROFILE was not fitted "
                         "to (repeatable): the profile_recorded band")
    ap.add_argument("--records", action="append", default=[], metavar="TASK=FILE:PROFILE",
                    help="or a real sweep's records file whose even-position prompts PROFILE was fitted to "
                         "(`calibrate decisions --records`), or one of prompts it never saw (repeatable): its "
                         "prompts that no deciding profile lists among its fit prompts give the profile_recorded "
                         "band")
    ap.add_argument("--speedups", action="append", default=[], metavar="TASK=REAL:SIM[,SIM...]",
                    help="a real interleaved sweep's records of held-out prompts and simulated sweeps of the same "
                         "prompts and points (seeds, pooled) on a clock calibrated on that machine (repeatable): "
                         "the profile_recorded speedup band")
    ap.add_argument("--by-category", action="store_true",
                    help="--records: decide each prompt by its category's profile where the model YAML names one "
                         "for the task (sim_category_profiles), as a run on PROFILE does")
    ap.add_argument("--keep-recorded", action="store_true",
                    help="keep the profile_recorded cells the bands file already holds from recorded traces "
                         "(--recorded runs of an earlier measurement whose traces are not at hand), beside new ones")
    ap.add_argument("--keep-records", action="store_true",
                    help="keep the profile_recorded cells the bands file already holds from sweep records (--records "
                         "files no longer at hand), beside new ones; a new cell of the same strategy holding any of "
                         "a kept cell's prompts replaces it")


def main(a: Any, out=print) -> int:
    if a.prompts < 1:
        raise OuroborosError(f"--prompts must be >= 1, got {a.prompts}")
    from simulators.sim_profiles import git_commit

    path = Path(a.out) if a.out else BANDS_PATH
    keep = (getattr(a, "keep_recorded", False), getattr(a, "keep_records", False))
    kept = kept_cells(path, *keep) if any(keep) else []   # before any work: a bad path is one line
    check_writable(path, "--out")
    speedups = speedup_cells(a.speedups, out) if getattr(a, "speedups", None) else []   # read and checked first
    names = [n for n in (getattr(a, "settings", None) or "").split(",") if n] or None
    files = settings(names)   # before any work: an unknown setting is one line
    if getattr(a, "work_dir", None):
        check_writable(Path(a.work_dir) / "x", "--work-dir")
    out("measuring the bands across " + ", ".join(p.stem for p in files) + " (each calibrated from its own vanilla + "
        "SpS figures, then swept as a user would):")
    crossed = across_cells(names, a.prompts, a.seed, out, Path(a.work_dir) if getattr(a, "work_dir", None) else None)
    measured = [c for c in crossed if c["source"] == "profile_measured"]
    prior = [c for c in crossed if c["source"] == "prior"]
    recorded = (recorded_cells(a.recorded, out) if a.recorded else []) + \
        (records_cells(a.records, out, getattr(a, "by_category", False)) if a.records else []) + speedups
    kept = replaced(kept, recorded)
    recorded += kept
    cmd = f"python -m simulators calibrate bands --prompts {a.prompts} --seed {a.seed}" + (
        f" --settings {','.join(names)}" if names else "") + "".join(
        f" --recorded {spec.split('=', 1)[0]}=<recorded runs>:{spec.rpartition(':')[2]}" for spec in a.recorded) + \
        "".join(f" --records {spec.split('=', 1)[0]}=<sweep records>:{spec.rpartition(':')[2]}" for spec in a.records)
    cmd += "".join(f" --speedups {spec.split('=', 1)[0]}=<real sweep records>:<simulated sweeps' records>"
                   for spec in getattr(a, "speedups", None) or [])
    if getattr(a, "by_category", False):
        cmd += " --by-category"
    cmd += "".join(flag for flag, on in zip((" --keep-recorded", " --keep-records"), keep, strict=True)
                   if on and kept)
    held = [f"{sp.split('=', 1)[0]} with {sp.rpartition(':')[2]}" for sp in a.recorded]
    held += [f"{sp.split('=', 1)[0]} with {sp.rpartition(':')[2]} (a real sweep's prompts none of its profiles "
             "was fitted to)"
             for sp in a.records]
    held += [f"{sp.split('=', 1)[0]}: a real interleaved sweep of held-out prompts against simulated sweeps of them "
             "(seeds pooled) on a clock fitted to other prompts' recordings on the same machine (calibrate clock "
             "--records)" for sp in getattr(a, "speedups", None) or []]
    traced = [c for c in kept if c.get("from") not in RECORDS_FROM]
    swept = [c for c in kept if c.get("from") in RECORDS_FROM]
    if traced:
        held.append(f"the traced cells of {traced[0]['kept_from']}, kept")
    for where in dict.fromkeys(c["kept_from"] for c in swept):
        held.append(f"the sweep-record cells of {where}, kept ({len([c for c in swept if c['kept_from'] == where])})")
    parts = (["traces kept in the cache, not in git; one cell per recording process of 4 prompts"]
             if a.recorded or traced else []) + (
        ["sweep records not in git; one cell per sweep of a point, its prompts no profile was fitted to"]
        if a.records or any(c.get("from") == "sweep records" for c in swept) else [])
    timed = [c for c in recorded if c["metric"] == "speedup"]
    machines = ", ".join(sorted({h for c in timed for h in c.get("hardware") or []}))
    clock_note = (f"); speedup cells only where a held-out sweep was simulated on a clock calibrated on the machine "
                  f"that ran it ({machines}); block efficiency otherwise" if timed
                  else "); block efficiency only, the clock is not part of it")
    sources = "; ".join(parts)
    doc = {
        "level": BAND_LEVEL,
        "profile_measured": {
            "what": "a profile from the pair's own vanilla + SpS figures (calibrate measured)",
            "held_out": held_across(files, "the other strategies' published figures (SpS's own: how far the "
                                    "sweep reproduces the figure it was fitted to)"),
            "command": cmd, "commit": git_commit(), "strategies": summarise(measured, files),
            "not_measured": not_measured(measured), "cells": measured},
        "prior": {
            "what": "the uncalibrated prior (conf/sim/default.yaml, the hardware's estimated overheads)",
            "held_out": held_across(files, "every published figure (the a800x2 profile's per-forward overheads were "
                                    "fitted to Yi's vanilla and SpS token/s, so its token/s cells understate the "
                                    "prior's clock error on an uncalibrated machine)"),
            "command": cmd, "commit": git_commit(), "strategies": summarise(prior, files),
            "not_measured": not_measured(prior), "cells": prior},
        "profile_recorded": {
            "what": "a profile fitted to the pair's recorded real decisions (calibrate decisions)",
            "held_out": ("real runs of prompts no profile was fitted to (" + "; ".join(held) + "; " + sources
                         + clock_note
                         if recorded else "not measured: needs recorded real runs of held-out prompts "
                         "(python -m simulators check clock); python -m simulators check decisions reports their "
                         "errors"),
            "command": cmd if recorded else None, "commit": git_commit() if recorded else None,
            "strategies": summarise(recorded) if recorded else {}, "cells": recorded},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("# GENERATED (do not edit by hand): written by "
                "`python -m simulators calibrate bands` (simulators/lab/calibration/bands.py): per kind "
                "of decision source and\n# strategy, the half-width of the central 80% of relative errors measured on "
                "figures "
                "the source was not\n# fitted to. Read by simulators/trust.py: every simulated record, table and "
                "figure shows them.\n")
        yaml.safe_dump(doc, f, sort_keys=False, width=120)
    out(band_table(doc))
    out(f"bands written to {path}")
    return 0


def band_table(doc: dict[str, Any]) -> str:
    lines = [f"{'source':<18}{'strategy':<13}{'eta':>8}{'tok/s':>8}{'speedup':>9}{'cells (eta/tok/s/spd)':>22}"
             f"{'coverage':>10}{'loso':>7}  (coverage, loso: the lowest over the strategy's metrics)"]
    for src in ("profile_measured", "prior", "profile_recorded"):
        for m, e in (doc[src].get("strategies") or {}).items():
            def f(k: str, e: dict[str, Any] = e) -> str:
                return "-" if e.get(k) is None else f"±{e[k]:.0%}"
            n = "/".join(str((e.get("cells") or {}).get(k, "-")) for k in ("block_efficiency", "tokens_per_s",
                                                                         "speedup"))
            cov = min((e.get("coverage") or {}).values(), default=None)
            loso = min((e.get("loso_coverage") or {}).values(), default=None)
            lines.append(f"{src:<18}{m:<13}{f('block_efficiency'):>8}{f('tokens_per_s'):>8}{f('speedup'):>9}{n:>22}"
                         f"{'-' if cov is None else f'{cov:.0%}':>10}{'-' if loso is None else f'{loso:.0%}':>7}")
        for m, why in (doc[src].get("not_measured") or {}).items():
            lines.append(f"{src:<18}{m:<13}{'?':>8}{'?':>8}{'?':>9}  {why[:60]}...")
    return "\n".join(lines)
