"""`python -m ouroboros.run [model=...] [strategy=...] [strategy.params.gamma=...]`: one point (one strategy)
plus its vanilla baseline, both measured in this process; prints a table, appends JSONL records, mirrors them to
wandb (offline by default). It never resumes: a rerun measures both again and appends new records (stopped, it says
so; `python -m ouroboros.sweep sweep=single` with the same overrides resumes from the records instead).

An entry point only: it parses (ouroboros.cli) and hands over. The walk of one run goes downhill from here:
cli (validated config) -> executor (checks, baseline, claims) -> session (backends, prompts) -> harness and the
decode loop -> point.make_record (the typed Record) -> store / wandb mirror -> table (ouroboros.running.table).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from ouroboros.cli import entry, explicit_run, hydra_cli
from ouroboros.config import RunConfig
from ouroboros.running.executor import make_executor
from ouroboros.running.interrupts import counted
from ouroboros.running.point import Point, label_of
from ouroboros.running.record import Record
from ouroboros.running.table import format_table

# what the interrupt message says a rerun does (ouroboros.cli.entry): run measures afresh, the sweep resumes
RERUN = "a rerun of ouroboros.run measures its points again (ouroboros.sweep sweep=single resumes from the records)"


def run_one(run: RunConfig, notes: list[str] | None = None) -> list[Record]:
    """The baseline and the strategy, both measured now (no resume): one table, records appended. `notes` are
    printed once the points have passed their checks."""
    point = Point(run, label_of(run))
    points = [point.baseline_point(), point] if run.baseline and run.baseline != run.strategy.name else [point]
    ex = make_executor(run, resume=False, sweep="run")
    ex.notes = list(notes or [])
    recs = []
    ex.check(points)
    with counted(ex):
        ex.interleave(points)
        recs += [ex.run_point(p)[0] for p in points]
    print(format_table(recs))
    if run.out:
        print(f"records appended to {run.out}")
    return recs


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    late: list[str] = []
    entry(lambda: run_one(explicit_run(cfg, late), late), rerun=RERUN)


if __name__ == "__main__":
    hydra_cli(main)
