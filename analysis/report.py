"""Tables and the report from JSONL records (typed `Record`s: ouroboros.running.sinks.load_records). Never re-measures:
every number is read from a record, re-aggregated only through ouroboros.loop.metrics (speedup, combine_summaries).

`write_report(records, out)` writes:
  table.md / table.csv     one row per point (latest record per point_id): tok/s, speedup, eta, A, #Match
  tasks.md / tasks.csv     per point x prompt category: the same, over that category's prompts
  speedup_vs_<param>.*     curves (gamma, K, W, N, G, max_new_tokens) where a sweep varies that parameter
  bars_<sweep>.*           speedup per point of each sweep (the ablation, the strategy comparison, ...)
  speedup_vs_concurrency.*, latency_vs_throughput.*   served (load) sweeps
  pool_<point>.*           phrase-pool size and hit rates over a run, per prompt

Knows nothing of models or Hydra.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ouroboros.loop.metrics import RunResult, combine_summaries, speedup
from ouroboros.running.record import Record, latest
from ouroboros.running.sinks import band_text

COLUMNS = ("point", "sweep", "model", "dataset", "backend", "prompts", "new_tokens", "seconds", "tokens_per_s",
           "speedup", "speedup_specbench", "block_efficiency", "accepted_length", "match_per_forward", "identical")


def hardware_name(rec: Record) -> str:
    """'a800x2 pipeline x2' (simulated: profile, placement, devices) or the CPU / GPU the wall clock ran on."""
    hw = rec.hardware or {}
    if rec.backend == "sim":
        return f"{hw.get('name')} {hw.get('placement')} x{hw.get('devices')}"
    return ", ".join(hw.get("gpus") or []) or str(hw.get("cpu") or hw.get("machine") or "")


def budget(rec: Record) -> str:
    """The new-token budget of the record's prompts ('512', or '64-512' when it differs by prompt)."""
    b = rec.budget
    return f"{min(b)}-{max(b)}" if isinstance(b, list) else str(b)


def table_rows(records: Sequence[Record]) -> list[dict[str, Any]]:
    rows = []
    for r in latest(records):
        t = r.totals
        sv = r.serving   # served points: makespan and throughput (ouroboros/serving/batch.py)
        rows.append({"point": r.label, "sweep": r.sweep, "model": r.model_name,
                     "dataset": r.dataset_name, "backend": r.backend, "hardware": hardware_name(r),
                     "max_new_tokens": budget(r), "prompts": t["prompts"],
                     "new_tokens": t["new_tokens"], "seconds": round(r.seconds, 4),
                     "tokens_per_s": round(r.rate, 2),
                     "concurrency": sv["concurrency"] if sv else None,
                     "latency_p50_s": round(sv["latency_s_p50"], 4) if sv else None,
                     "latency_p99_s": round(sv["latency_s_p99"], 4) if sv else None,
                     "speedup": None if r.speedup is None else round(r.speedup, 3),
                     "speedup_specbench": None if r.speedup_specbench is None else round(r.speedup_specbench, 3),
                     "block_efficiency": round(t["block_efficiency"], 3),
                     "accepted_length": round(t["accepted_length"], 3),
                     "match_per_forward": round(t["match_per_forward"], 3),
                     "identical": r.identical_to_baseline or ("sampled" if r.sampled else None),
                     "decisions": (r.decisions or {}).get("label", "real" if r.backend != "sim"
                                                          else "unstated (an older record)"),
                     "band_speedup": band_text(r, "speedup"), "band_eta": band_text(r, "block_efficiency")})
    return rows


def same_process(base: Record, rec: Record, ids: set[str]) -> bool:
    """Whether the baseline record's prompts `ids` were timed by the processes that timed `rec`'s (wall-clock
    records name them; a baseline measured again later may hold other processes' times: then no ratio)."""
    a, b = base.processes, rec.processes
    if a is None and b is None:
        return True     # simulated records (and records older than the process ids)
    return a is not None and b is not None and all(a.get(k) == b.get(k) for k in ids)


def _subset(rec: Record, ids: set[str]) -> RunResult:
    rr = rec.result()
    return RunResult(rr.strategy, [p for p in rr.prompts if p.prompt_id in ids])


def task_rows(records: Sequence[Record]) -> list[dict[str, Any]]:
    """Per point and prompt category; speedup against the point's baseline record on the same prompts."""
    recs = latest(records)
    by_id = {r.point_id: r for r in recs}
    rows = []
    for r in recs:
        cats: dict[str, list[dict]] = {}
        for p in r.prompts:
            cats.setdefault(p.get("category") or "-", []).append(p)
        base = by_id.get(r.baseline_id or "")
        for cat, ps in sorted(cats.items()):
            t = combine_summaries(ps)
            ids = {p["prompt_id"] for p in ps}
            sp = (speedup(_subset(base, ids), _subset(r, ids)) if base is not None and same_process(base, r, ids)
                  else None)
            rows.append({"point": r.label, "category": cat, "model": r.model_name, "dataset": r.dataset_name,
                         "prompts": t["prompts"], "new_tokens": t["new_tokens"],
                         "tokens_per_s": round(t["tokens_per_s"], 2),
                         "speedup": None if sp is None else round(sp, 3),
                         "block_efficiency": round(t["block_efficiency"], 3),
                         "accepted_length": round(t["accepted_length"], 3)})
    return rows


def to_markdown(rows: Sequence[dict]) -> str:
    if not rows:
        return ""
    cols = list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in rows:
        lines.append("| " + " | ".join("-" if row[c] is None else str(row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def to_csv(rows: Sequence[dict]) -> str:
    if not rows:
        return ""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def sweep_media(records: Sequence[Record], out: str | Path) -> tuple[list[dict[str, Any]], dict[str, Path]]:
    """A sweep's summary wandb run: its table rows and its figures, written as PNGs under `out` (ouroboros.sweep
    finds this through the entry point pyproject.toml declares in the group `ouroboros.reports`)."""
    images = write_report(records, out, formats=("png",))
    return table_rows(records), images


def write_report(records: Sequence[Record], out: str | Path,
                 formats: Sequence[str] = ("png", "svg")) -> dict[str, Path]:
    """Write tables and figures under `out`; returns {figure name: PNG path} (for wandb media)."""
    from analysis import plots

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows, tasks = table_rows(records), task_rows(records)
    (out / "table.md").write_text(to_markdown(rows))
    (out / "table.csv").write_text(to_csv(rows))
    (out / "tasks.md").write_text(to_markdown(tasks))
    (out / "tasks.csv").write_text(to_csv(tasks))
    written: dict[str, Path] = {}
    for name, fig in plots.iter_figures(latest(records)):   # one figure open at a time: each closed once saved
        try:
            for fmt in formats:
                path = out / f"{name}.{fmt}"
                fig.savefig(path, dpi=150, bbox_inches="tight")
                if fmt == "png":
                    written[name] = path
        finally:
            plots.close(fig)
    return written
