"""The bands of `profile_measured` and `prior`, measured across pairs on the path users run (`calibrate bands`).

Settings: every figures file under conf/calibration/ that holds held-out figures (`held_out:` per task, or
`held_out_overall:`): the Yi-34B/6B paper figures and the four Spec-Bench leaderboard settings. A file without any
(the main job's pair: its other figures are kept aside to check the predictions) is no setting. For each setting,
exactly as a user would:
1. `python -m simulators calibrate measured --from <figures> --out-dir runs/conf/sim --name-suffix _<setting>
   --prompts <n> --no-spread` in a scratch folder: one profile per task from the setting's own vanilla and SpS
   figures only (the surrogate target's text knobs from the real Qwen pair's recorded decisions on the task's kind,
   `--text decisions`, its default);
2. per task, `python -m ouroboros.sweep sweep=single model=<pair> hardware=<hw> backend=sim sim=<profile>
   max_new_tokens=<the task's budget> dataset.num_prompts=<n> seed=<seed + 1> sim.prompt_len=<the task's>
   'sweep.points=[...]'` (the simulator's own prompts at the task's length, other prompts than the fit's, their
   answers ending near the task's `answer_len` where the figures file gives one: sim.answer_len), once on
   the task's profile (`profile_measured`) and once on the uncalibrated prior (`sim=default sim.corpus=<the
   task's>`: `prior`), with SpS at the setting measured and every held-out strategy at its published settings.
A cell is one published figure against the sweep's number for it: speedup in the figures' own definition
(`speedup_metric: per_prompt_mean` is Spec-Bench's mean per-question token/s over vanilla's, the sweep's `SB spd`;
otherwise total time over total time), token/s where the figures give it, block efficiency where they give it,
and a setting's overall mean accepted tokens (new tokens over target forwards, pooled over its tasks).
`profile_measured` cells are the held-out strategies' and SpS's own (its figure was fitted: its cell is how far the
sweep reproduces it); `prior` cells are every figure (vanilla token/s too).

Leave one setting out: for each setting, the band of each (strategy, metric) is the central 80% of |error| over the
OTHER settings' cells (the largest where fewer than 3); its coverage is the share of the held-out setting's cells
inside it. The coverage reported per strategy pools every setting's turn; the band written is over all cells.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from ouroboros.errors import OuroborosError
from simulators.architectures import conf_root
from simulators.pair import prompts_for

SPEEDUP_METRICS = ("time_ratio", "per_prompt_mean")
STRATEGY_PARAMS = {   # the held-out figures' own settings, as our strategies name them
    "ouroboros": ("gamma", "W", "N", "G", "K"),
    "lookahead": ("W", "N", "G"),
    "pld": ("max_ngram", "num_pred_tokens"),
    "rest": ("max_suffix", "num_nodes", "depth"),
    "cascade": ("gamma", "vertical", "horizontal"),
    "suffix": ("num_speculative_tokens", "suffix_decoding_max_spec_factor"),
    "recycling": ("k",),
}


def settings(names: list[str] | None = None) -> list[Path]:
    """The figures files that hold held-out figures (`names`: only these stems; an unknown or figure-less one is one
    line)."""
    found = {}
    for p in sorted((conf_root() / "calibration").glob("*.yaml")):
        with open(p, encoding="utf-8") as f:
            doc = yaml.safe_load(f) or {}
        if isinstance(doc, dict) and isinstance(doc.get("tasks"), dict):
            held = doc.get("held_out_overall") or any((t or {}).get("held_out") for t in doc["tasks"].values())
            found[p.stem] = (p, bool(held))
    if names:
        for n in names:
            if n not in found:
                raise OuroborosError(f"--settings: no figures file conf/calibration/{n}.yaml; known: "
                                     f"{', '.join(found)}")
            if not found[n][1]:
                raise OuroborosError(f"--settings: conf/calibration/{n}.yaml holds no held-out figure, so it "
                                     "measures no band")
        return [found[n][0] for n in names]
    return [p for p, held in found.values() if held]


def task_points(doc: dict[str, Any], task: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(label, overrides) per point: SpS at the setting measured, then each held-out strategy at its settings (the
    task's own, else the file's `held_out_params`; Ouroboros and lookahead take G = W where G is not given)."""
    sps = doc.get("sps") or {}
    spec = ["strategy=speculative", f"strategy.params.gamma={sps.get('gamma') or 5}",
            f"strategy.params.schedule={'hf' if (sps.get('schedule') or 'hf') == 'hf' else 'constant'}"]
    points = [("speculative", spec)]
    shared = doc.get("held_out_params") or {}
    held = task.get("held_out") or {}
    for m in dict.fromkeys([*held, *(doc.get("held_out_overall") or {})]):
        if m not in STRATEGY_PARAMS:
            raise OuroborosError(f"held-out strategy {m!r} has no known settings; known: {', '.join(STRATEGY_PARAMS)}")
        params = {**(shared.get(m) or {}), **{k: v for k, v in (held.get(m) or {}).items()
                                               if k in STRATEGY_PARAMS[m]}}
        if m == "lookahead" and "W" not in params and held.get("ouroboros"):   # the paper's lookahead: W and N of
            o = held["ouroboros"]                                                # the task's Ouroboros settings
            params = {"W": o.get("W"), "N": o.get("N"), **params}
        if "W" in params and "G" not in params and m in ("ouroboros", "lookahead"):
            params["G"] = params["W"]
        points.append((m, [f"strategy={m}", *(f"strategy.params.{k}={v}" for k, v in params.items()
                                              if v is not None)]))
    return points


def sweep_overrides(points: list[tuple[str, list[str]]]) -> str:
    inner = ",".join("{label:" + label + ",overrides:[" + ",".join(f'"{o}"' for o in ovr) + "]}"
                     for label, ovr in points)
    return f"sweep.points=[{inner}]"


def run(cmd: list[str], cwd: Path, out) -> None:
    out("  $ " + " ".join(c if " " not in c and "[" not in c else f"'{c}'" for c in cmd[1:]))
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or p.stdout.strip().splitlines() or ["(no output)"])[-1]
        raise OuroborosError(f"{' '.join(cmd[1:4])} failed in {cwd}: {last}")


def records(path: Path) -> dict[str, dict[str, Any]]:
    """label -> the latest record of that point (simulated sweeps' records)."""
    out: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r.get("totals") and "point_id" in r:
            out[str(r["label"]).split(" [")[0]] = r
    return out


def rel(pred: float | None, pub: float | None) -> float | None:
    """pred / pub - 1 (None without both)."""
    return None if pred is None or not pub else pred / pub - 1


def task_cells(doc: dict[str, Any], key: str, task: dict[str, Any], recs: dict[str, dict[str, Any]], source: str,
               setting: str) -> list[dict[str, Any]]:
    """One cell per published figure of the task the sweep predicts (see the module doc)."""
    metric = doc.get("speedup_metric") or "time_ratio"
    spd = "speedup_specbench" if metric == "per_prompt_mean" else "speedup"
    van = task.get("vanilla_tok_s")
    cells = []

    def cell(m: str, what: str, pred: float | None, pub: float | None, **extra: Any) -> None:
        e = rel(pred, pub)
        if e is not None:
            cells.append({"source": source, "setting": setting, "task": key, "strategy": m, "metric": what,
                          "error": round(e, 4), "predicted": round(float(pred or 0), 4), "published": pub, **extra})

    if source == "prior" and van and "vanilla" in recs:
        cell("vanilla", "tokens_per_s", recs["vanilla"]["totals"]["tokens_per_s"], van)
    sp = recs.get("speculative")
    if sp is not None:   # profile_measured: fitted figures, reproduced on the sweep's path
        fitted = {"fitted": True} if source == "profile_measured" else {}
        pub_x = task.get("sps_speedup") or (task["sps_tok_s"] / van if task.get("sps_tok_s") and van else None)
        cell("speculative", "speedup", sp[spd], pub_x, **fitted)
        if task.get("sps_tok_s") and van:
            cell("speculative", "tokens_per_s", sp["totals"]["tokens_per_s"], task["sps_tok_s"], **fitted)
        eta = task.get("sps_block_efficiency") or (1 + task["sps_accepted_length"]
                                                   if task.get("sps_accepted_length") else None)
        if eta:
            cell("speculative", "block_efficiency", sp["totals"]["block_efficiency"], eta, **fitted)
    for m, fig in (task.get("held_out") or {}).items():
        r = recs.get(m)
        if r is None:
            continue
        pub_x = fig.get("speedup") or (fig["tok_s"] / van if fig.get("tok_s") and van else None)
        cell(m, "speedup", r[spd], pub_x)
        if fig.get("tok_s") and van:
            cell(m, "tokens_per_s", r["totals"]["tokens_per_s"], fig["tok_s"])
        if fig.get("block_efficiency"):
            cell(m, "block_efficiency", r["totals"]["block_efficiency"], fig["block_efficiency"])
    return cells


def overall_cells(doc: dict[str, Any], runs: dict[str, dict[str, dict[str, Any]]], source: str, setting: str
                  ) -> list[dict[str, Any]]:
    """A setting's overall mean accepted tokens (new tokens / target forwards over all its tasks) per strategy."""
    cells = []
    want = {**{m: v for m, v in (doc.get("held_out_overall") or {}).items()},
            **({"speculative": {"mean_accepted_tokens": (doc.get("sps") or {}).get("mean_accepted_tokens")}}
               if (doc.get("sps") or {}).get("mean_accepted_tokens") else {})}
    for m, fig in want.items():
        pub = (fig or {}).get("mean_accepted_tokens")
        tot = [recs[m]["totals"] for recs in runs.values() if m in recs]
        if not pub or len(tot) < len(runs):
            continue
        pred = sum(t["new_tokens"] for t in tot) / sum(t["target_forwards"] for t in tot)
        cells.append({"source": source, "setting": setting, "task": "all tasks", "strategy": m,
                      "metric": "block_efficiency", "error": round(pred / pub - 1, 4), "predicted": round(pred, 4),
                      "published": pub, **({"fitted": True} if m == "speculative" and source == "profile_measured"
                                           else {})})
    return cells


def setting_cells(path: Path, work: Path, n_prompts: int, seed: int, out=print) -> list[dict[str, Any]]:
    """Calibrate one setting from its own SpS figures and sweep every task on its profile and on the prior."""
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    metric = doc.get("speedup_metric") or "time_ratio"
    if metric not in SPEEDUP_METRICS:
        raise OuroborosError(f"{path.name}: speedup_metric must be one of {', '.join(SPEEDUP_METRICS)}, got {metric!r}")
    stem, model, hw = path.stem, str(doc["model"]), str(doc["hardware"])
    wd = work / stem
    (wd / "runs" / "conf" / "sim").mkdir(parents=True, exist_ok=True)
    py = sys.executable
    out(f"{stem}: calibrate on its own vanilla + SpS figures")
    run([py, "-m", "simulators", "calibrate", "measured", "--from", str(path.resolve()), "--out-dir", "runs/conf/sim",
         "--prompts", str(n_prompts), "--seed", str(seed), "--name-suffix", f"_{stem}", "--no-spread"], wd, out)
    cells: list[dict[str, Any]] = []
    by_source: dict[str, dict[str, dict[str, dict[str, Any]]]] = {"profile_measured": {}, "prior": {}}
    for key, task in doc["tasks"].items():
        task = task or {}
        pts = task_points(doc, task)
        base = ["sweep=single", f"model={model}", f"hardware={hw}", "backend=sim", "logger=quiet",
                f"max_new_tokens={task['max_new_tokens']}",
                f"dataset.num_prompts={prompts_for(n_prompts, task.get('answer_len'), int(task['max_new_tokens']))}",
                f"seed={seed + 1}",
                sweep_overrides(pts)]
        length = f"sim.prompt_len={task['prompt_len']}"
        prior = ["sim=default", length, f"sim.corpus={task.get('corpus') or 'prose'}"]
        if task.get("answer_len"):   # a profile holds its own
            prior.append(f"sim.answer_len={task['answer_len']}")
        for source, sim in (("profile_measured", [f"sim={model}_{key}_{stem}", length]),   # its text, as fitted
                            ("prior", prior)):
            rec_path = wd / f"{key}_{source}.jsonl"
            rec_path.unlink(missing_ok=True)
            run([py, "-m", "ouroboros.sweep", *base, *sim, f"out={rec_path.name}"], wd, out)
            recs = records(rec_path)
            by_source[source][key] = recs
            new = task_cells(doc, key, task, recs, source, stem)
            for c in new:
                out(f"    {source:<17} {key:<15} {c['strategy']:<12} {c['metric']:<17} predicted "
                    f"{c['predicted']:.3f}, published {c['published']:g} ({c['error']:+.1%})"
                    + (" [fitted]" if c.get("fitted") else ""))
            cells += new
    for source, runs in by_source.items():
        new = overall_cells(doc, runs, source, stem)
        for c in new:
            out(f"    {source:<17} {'all tasks':<15} {c['strategy']:<12} mean accepted tokens predicted "
                f"{c['predicted']:.3f}, published {c['published']:g} ({c['error']:+.1%})")
        cells += new
    return cells


def across_cells(names: list[str] | None, n_prompts: int, seed: int, out=print, work: Path | None = None
                 ) -> list[dict[str, Any]]:
    files = settings(names)
    if not files:
        raise OuroborosError("no figures file under conf/calibration/ holds held-out figures")
    cells: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bands-") as tmp:
        for p in files:
            cells += setting_cells(p, work or Path(tmp), n_prompts, seed, out)
    return cells


def quantile(xs: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = int(pos)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (pos - lo)


def band_of(errs: list[float], level: float, min_cells: int) -> float | None:
    if not errs:
        return None
    a = [abs(e) for e in errs]
    return quantile(a, level) if len(a) >= min_cells else max(a)


def leave_one_out(cells: list[dict[str, Any]], level: float, min_cells: int) -> dict[str, dict[str, Any]]:
    """strategy -> metric -> {cells, inside, coverage, no_other, by_setting}: each setting's cells against the band of
    the other settings' cells (see the module doc). A setting whose (strategy, metric) no other setting measures has
    no band to be held by: its cells are counted in `no_other`, not in the coverage (None when no cell had one)."""
    out: dict[str, dict[str, Any]] = {}
    keys = dict.fromkeys((c["strategy"], c["metric"]) for c in cells)
    for m, metric in keys:
        mine = [c for c in cells if (c["strategy"], c["metric"]) == (m, metric)]
        inside = alone = 0
        per: dict[str, Any] = {}
        for s in dict.fromkeys(c["setting"] for c in mine):
            b = band_of([c["error"] for c in mine if c["setting"] != s], level, min_cells)
            held = [c for c in mine if c["setting"] == s]
            got = sum(b is not None and abs(c["error"]) <= b + 1e-12 for c in held)
            inside += got
            alone += len(held) if b is None else 0
            per[s] = {"band": None if b is None else round(b, 4), "cells": len(held), "inside": got}
        held_by = len(mine) - alone
        out.setdefault(m, {})[metric] = {"cells": len(mine), "inside": inside, "no_other": alone,
                                         "coverage": round(inside / held_by, 3) if held_by else None,
                                         "by_setting": per}
    return out
