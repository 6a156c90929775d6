"""`python -m ouroboros.sweep [sweep=<preset>] [overrides]`: measure a set of points (strategies x
hyper-parameters x datasets x ...) with the baseline each one needs for speedups, resume from the record file,
print a table at the end.

Points come from the `sweep` group (conf/sweep/*.yaml): `points` (explicit override lists, e.g. the ablation)
crossed with `grid` (Hydra sweep overrides as after -m, e.g. "strategy.params.gamma=2,4,8"). Each point is
composed by Hydra from the command line's overrides plus its own (a point's override replaces the command line's
for the same key; re-selecting a group drops the command line's overrides under that group unless it picks the
same option), then validated: every point is checked before any model loads. Hydra's `-m` works too (each job
runs its own points; the joblib launcher runs jobs in parallel; `MultirunTable` validates every job up front
and prints one table at the end).

Resume: a point whose point_id (ouroboros.running.point.point_key) already has a record is skipped; a kill at any
moment loses at most the point being measured, and a rerun measures it once (ouroboros.running.sinks.RecordFile),
keeping
the prompts it had finished unless its strategy keeps state across prompts (then it is measured whole again:
ouroboros.running.executor). A wall-clock point whose prompts were timed by two processes counts as resumed (the table
says
which process timed which); a resumed point measured against an earlier record of its baseline than the latest
shows that record's row too (`with_used_baselines`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import sys
from collections.abc import Iterable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from ouroboros.cli import entry, hydra_cli, is_late
from ouroboros.config import RunConfig, SweepConfig, apply_explicit, explicit_notices, override_key, validate
from ouroboros.errors import OuroborosError
from ouroboros.running.executor import Executor, make_executor
from ouroboros.running.interrupts import counted, interrupts_deferred
from ouroboros.running.point import Point, label_of
from ouroboros.running.record import Record
from ouroboros.running.sinks import load_records, summary_line
from ouroboros.running.table import format_table
from ouroboros.strategies import REGISTRY, NeedsDatastore, field_types, is_peer

GROUPS = ("model", "strategy", "dataset", "backend", "hardware", "logger", "sweep")


CONF = Path(__file__).resolve().parents[1] / "conf"


def sweep_jobs(parsed: list[Any]) -> list[list[str]]:
    """The cartesian product of parsed Hydra overrides, as `-m` expands them (discrete sweeps only), through
    Hydra's public Override API. Golden: a=1,2 b=3 -> [[a=1, b=3], [a=2, b=3]]."""
    lists: list[list[str]] = []
    for o in parsed:
        key = o.get_key_element()
        if o.is_sweep_override():
            if not o.is_discrete_sweep():
                raise OuroborosError(f"{key}: only comma-separated (discrete) sweeps are supported")
            lists.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            lists.append([f"{key}={o.get_value_element_as_str()}"])
    return [list(job) for job in itertools.product(*lists)]


def expand(sweep: SweepConfig) -> list[tuple[str, list[str]]]:
    """(label, overrides) per point: explicit points x the grid's cartesian product (Hydra's -m syntax)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    points = [(p.label, list(p.overrides)) for p in sweep.points] or [("", [])]
    combos: list[list[str]] = [[]]
    if sweep.grid:
        try:
            parsed = OverridesParser.create().parse_overrides(list(sweep.grid))
        except Exception as e:
            raise OuroborosError(f"sweep.grid: {' '.join(str(e).split())}") from None
        combos = sweep_jobs(parsed)
    return [(label, ovr + grid) for grid in combos for label, ovr in points]


def strategy_option_name(option: str) -> str | None:
    """The strategy a conf/strategy/ option selects ('ouroboros_humaneval' -> 'ouroboros'); None if unknown."""
    path = CONF / "strategy" / f"{option}.yaml"
    if not path.is_file():
        return None
    conf = OmegaConf.load(path)
    return str(conf.get("name")) if isinstance(conf, DictConfig) else None


def merge_overrides(base: Iterable[str], point: list[str], choices: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the overrides a point runs with, the command line's overrides it replaced). Precedence (config.py): the
    point's own keys replace the command line's; a point that re-selects a group drops the command line's
    overrides under it, except
    - a typed `strategy=<preset>` of the same strategy as the point's (`strategy=ouroboros_humaneval` at an
      ablation point's `strategy=ouroboros`): the user's preset stays, the point's params go on top;
    - typed `strategy.params.*` the point does not set and its strategy has: they stay."""
    base = list(base)
    typed = {override_key(o): o.split("=", 1)[1] for o in base if "=" in o}
    point = list(point)
    groups = {k: o.split("=", 1)[1] for o in point if (k := override_key(o)) in GROUPS}
    pick = groups.get("strategy")
    if pick is not None and "strategy" in typed and typed["strategy"] != pick \
            and strategy_option_name(typed["strategy"]) == strategy_option_name(pick):
        point = [o for o in point if override_key(o) != "strategy"]
        groups.pop("strategy")
    keys = {override_key(o) for o in point}
    reselected = {k for k, v in groups.items() if v != choices.get(k)}
    name = strategy_option_name(groups["strategy"]) if "strategy" in reselected else None
    fields = set(field_types(name)) if name in REGISTRY or (name is not None and is_peer(name)) else set()
    kept, replaced = [], []
    for o in base:
        k = override_key(o)
        head = k.split(".", 1)[0]
        if k in keys:
            replaced.append(o)
        elif head in reselected and not (k.startswith("strategy.params.") and k.split(".", 2)[2] in fields):
            if head == k:   # the typed group option itself (params of another strategy just do not apply)
                replaced.append(o)
        else:
            kept.append(o)
    return kept + point, replaced


def compose_run(overrides: list[str]) -> RunConfig:
    """Compose the root config with `overrides` (Hydra must be initialised), validate it, apply the precedence."""
    try:
        cfg = hydra.compose(config_name="config", overrides=overrides)
    except Exception as e:  # Hydra's own message, on one line
        msg = " ".join(str(e).split())
        raise OuroborosError(f"cannot compose [{' '.join(overrides)}]: {msg}") from None
    return apply_explicit(validate(cfg), overrides)


def short_override(o: str) -> str:
    """A point label's tag for a non-strategy override: serve.concurrency=8 -> C=8, serve.load_aware=true ->
    load-aware (false -> fixed), serve.rate=2 -> rate=2; anything else as typed."""
    key, _, val = o.partition("=")
    if key == "serve.concurrency":
        return f"C={val}"
    if key == "serve.load_aware":
        return "load-aware" if val.lower() == "true" else "fixed"
    if key.startswith("serve."):
        return f"{key[6:]}={val}"
    return o


def swept_params(sweep: SweepConfig) -> set[str]:
    """Strategy params the preset varies (grid or points): every label shows them, even at default values."""
    ovr = list(sweep.grid) + [o for p in sweep.points for o in p.overrides]
    return {k.split(".", 2)[2] for o in ovr if (k := override_key(o)).startswith("strategy.params.")}


def plan(base: list[str], choices: dict[str, Any], sweep: SweepConfig,
         notes: list[str] | None = None) -> list[Point]:
    """Every point of the sweep, validated, with its baseline inserted before its first use. `notes` collects
    one line per command-line override a point replaced and per setting the command line left to a default."""
    out: list[Point] = []
    seen: set[str] = set()
    typed_keys = {override_key(o) for o in base}
    preset = [d for d in sweep.base if override_key(d) not in typed_keys]   # what you type wins
    if preset and notes is not None:
        notes.append(f"sweep {sweep.name} starts every point from {' '.join(preset)} (type a key to change it)")
    base = preset + list(base)
    typed = {k.split(".", 2)[2] for o in base if (k := override_key(o)).startswith("strategy.params.")}
    swept = swept_params(sweep) | typed   # a param typed on the command line is shown too (a -m job's sweep)
    skipped: list[str] = []
    grid = expand(sweep)
    for suffix, ovr in grid:
        overrides, replaced = merge_overrides(base, ovr, choices)
        try:
            run = compose_run(overrides)
        except NeedsDatastore:
            # rest without a datastore on a real backend: a sweep of several strategies goes on without it
            # (one note); a sweep of rest alone is the error itself
            if len(grid) < 2:
                raise
            skipped.append(suffix or " ".join(short_override(o) for o in ovr))
            continue
        if notes is not None:
            notes += [f"sweep {sweep.name} sets {override_key(o)} at its points: the command line's {o} is not "
                      "used" for o in replaced]
            notes += explicit_notices(run, overrides)
        extra = " ".join(short_override(o) for o in ovr if override_key(o).split(".", 1)[0] != "strategy")
        tag = f" [{extra}]" if extra and not suffix else ""
        p = Point(run, (suffix or label_of(run, swept)) + tag)
        if p.baseline_id is not None and p.baseline_id not in seen:
            bp = p.baseline_point()
            base_extra = " ".join(short_override(o) for o in ovr if override_key(o).split(".", 1)[0] != "strategy"
                                  and override_key(o) != "serve.load_aware")   # nothing to vanilla
            bp.label += f" [{base_extra}]" if base_extra and not suffix else ""
            out.append(bp)
            seen.add(p.baseline_id)
        if p.id not in seen:
            out.append(p)
            seen.add(p.id)
    if skipped and len(skipped) == len(grid):
        raise NeedsDatastore()
    if skipped:
        msg = (f"sweep {sweep.name} runs without rest ({', '.join(skipped)}): no datastore on a real backend; add "
               "strategy=rest strategy.params.datastore=PATH (`python -m ouroboros.rest_datastore`) to run it")
        if notes is None:
            print(f"note: {msg}", file=sys.stderr)
        else:
            notes.append(msg)
    if notes is not None:
        notes[:] = list(dict.fromkeys(notes))
    return out


def run_points(points: list[Point], ex: Executor) -> list[Record]:
    """Check, then measure or resume every point; prints a line per point and how many were measured now and how
    many resumed (a point measured now on top of prompts an earlier process timed counts as resumed)."""
    records, measured, part = [], 0, 0
    ex.check(points)
    ex.interleave(points)   # real backends: every point's prompts first, prompt by prompt in turn
    bar = tqdm(points, desc="sweep", unit="point", disable=not ex.progress)
    for i, p in enumerate(bar, 1):
        rec, now = ex.run_point(p)
        if not now:
            rec = rec.named(p.label, ex.sweep)  # the same measurement, named as in this sweep
        measured += now
        part += now and bool(rec.timed_in_processes)
        if not now and ex.console:
            tqdm.write(f"[{i}/{len(points)}] {p.label}: already recorded (point {p.id}), skipped")
        elif ex.console:
            tqdm.write(summary_line(rec, i, len(points)))
        records.append(rec)
    bar.close()
    print(f"{measured - part} point(s) measured, {len(points) - measured + part} resumed from records"
          + (f" ({part} in part: prompts timed by two or more processes, see 'resumed:' below the table)"
             if part else ""))
    return records


def with_used_baselines(records: list[Record], out: str | None) -> list[Record]:
    """The table's rows: `records`, each baseline row followed by the earlier records of that point a resumed row's
    speedup was measured against (`Record.baseline_record`; the baseline was measured again since), read from
    `out`, so that the times shown give the speedups shown."""
    ids = {r.record_id for r in records}
    want = {r.baseline_record for r in records if r.baseline_record and r.baseline_record not in ids}
    if not want or not out or not os.path.exists(out):
        return records
    used = [r for r in load_records(out) if r.record_id in want]
    rows = []
    for r in records:
        rows.append(r)
        for u in (u for u in used if u.point_id == r.point_id and u.record_id not in ids):
            users = [q.label for q in records if q.baseline_record == u.record_id]
            whose = users[0] + (f" and {len(users) - 1} more" if len(users) > 1 else "")
            rows.append(u.named(f"{r.label} (record {u.record_id[:8]}: {whose}'s baseline)", r.sweep))
            ids.add(u.record_id)
    return rows


def sweep_main(cfg: DictConfig) -> list[Record]:
    sets_serve = any(override_key(o).startswith("serve.") for o in list(cfg.sweep.grid) + list(cfg.sweep.base)
                     + [o for p in cfg.sweep.points for o in p.overrides])
    hc = HydraConfig.get()
    typed_keys = {override_key(o) for o in hc.overrides.task}
    preset = [d for d in cfg.sweep.base if override_key(d) not in typed_keys]
    if preset:   # the base config as every point starts from it
        cfg = hydra.compose(config_name="config", overrides=preset + list(hc.overrides.task))
    run = validate(cfg, serving=not sets_serve)   # the points themselves are checked in full (plan)
    if {"sweep.grid", "sweep.points"} & typed_keys and "sweep.name" not in typed_keys:   # a grid of your own
        run = dataclasses.replace(run, sweep=dataclasses.replace(run.sweep, name=custom_name(run.sweep)))
    choices = dict(hc.runtime.choices)
    notes: list[str] = []
    points = plan(list(hc.overrides.task), choices, run.sweep, notes)
    multirun = hc.mode is not None and hc.mode.name == "MULTIRUN"
    for note in notes if not multirun else ():  # a -m run prints its notes once, before its first job
        if not is_late(note):
            print(f"note: {note}", file=sys.stderr)
    ex = make_executor(run, resume=run.sweep.resume, sweep=run.sweep.name)
    ex.notes = [n for n in notes if is_late(n)] if not multirun else []
    ex.on_record = None  # run_points prints the summary line
    with counted(ex):   # a Ctrl-C anywhere from here on: "interrupted: N points recorded"
        records = run_points(points, ex)
        if records:
            ex.store.save_manifest(ex.sweep, [(r.point_id, r.label) for r in records])
        if multirun:    # one table and one summary wandb run for the whole -m run: MultirunTable, at its end
            Path(hc.runtime.output_dir, "points.json").write_text(json.dumps([r.point_id for r in records]))
            return records
        print(format_table(with_used_baselines(records, run.out)))
        if run.out:
            print(f"records: {run.out}")
        if ex.mirror is None or not ex.mirror.enabled:
            return records
        with interrupts_deferred():   # the summary run is written whole or not started
            log_sweep_media(run, records, ex)
    if ex.mirror is not None:
        dirs = ex.mirror.run_dirs
        print(f"wandb ({ex.mirror.mode}) runs: {len(dirs)} under {run.logger.wandb.dir}/wandb, summary {dirs[-1:]}")
    return records


def custom_name(sweep: SweepConfig) -> str:
    """A typed grid's own sweep name ('custom-<6 hex>' of its grid and points), so its records and figures never
    join a preset's (sweep.name=... names it yourself)."""
    key = json.dumps([list(sweep.grid), [dataclasses.asdict(p) for p in sweep.points]], sort_keys=True, default=str)
    return "custom-" + hashlib.sha1(key.encode()).hexdigest()[:6]


REPORTS = "ouroboros.reports"   # the entry-point group a package declares the summary run's report writer in


def log_sweep_media(run: RunConfig, records: list[Record], ex: Executor) -> None:
    """The sweep's table and figures, as media of one summary wandb run. The sweep never imports the analysis
    package: the report writer is what an installed package declares in the entry-point group `ouroboros.reports`
    (analysis's, pyproject.toml), `writer(records, folder) -> (table rows, {figure name: its PNG there})`."""
    assert ex.mirror is not None
    writers = sorted(entry_points(group=REPORTS), key=lambda ep: ep.name)
    if not writers:
        print(f"note: no report writer is installed (entry points {REPORTS}: `pip install -e .` declares it): "
              "no summary wandb run", file=sys.stderr)
        return
    rows, images = writers[0].load()(records, Path(run.logger.wandb.dir, "media", run.sweep.name))
    ex.mirror.log_sweep(run.sweep.name, rows, {k: str(v) for k, v in images.items()})


class MultirunTable(Callback):
    """Hydra callback (conf/config.yaml): validates every `-m` job before any runs; prints one table after."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        entry(lambda: self._check(config))

    def _check(self, config: DictConfig) -> None:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
        notes: list[str] = []
        for job in sweep_jobs(parsed):
            first = compose_run(job)
            plan(job, _choices(job), first.sweep, notes)
        for note in dict.fromkeys(notes):
            print(f"note: {note}", file=sys.stderr)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        out = config.get("out")
        if not out or not os.path.exists(out):
            return
        ids: list[str] = []
        for f in sorted(Path(config.hydra.sweep.dir).glob("*/points.json"), key=lambda p: int(p.parent.name)
                        if p.parent.name.isdigit() else 0):
            ids += [i for i in json.loads(f.read_text()) if i not in ids]
        index = {r.point_id: r for r in load_records(out)}
        records = [index[i] for i in ids if i in index]
        if not records:
            return
        print(f"multirun: {len(records)} point(s)")
        print(format_table(with_used_baselines(records, out)))
        print(f"records: {out}")
        entry(lambda: self._summary_run(config, records))

    @staticmethod
    def _summary_run(config: DictConfig, records: list[Record]) -> None:
        """One summary wandb run (table + plots) for every point of the -m run."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(list(config.hydra.overrides.task))
        run = compose_run(sweep_jobs(parsed)[0])
        ex = make_executor(run, resume=True, sweep=run.sweep.name)
        if ex.mirror is None or not ex.mirror.enabled:
            return
        with interrupts_deferred():
            log_sweep_media(run, records, ex)
        print(f"wandb ({ex.mirror.mode}) summary run: {ex.mirror.run_dirs[-1:]}")


def _choices(overrides: list[str]) -> dict[str, Any]:
    cfg = hydra.compose(config_name="config", overrides=overrides, return_hydra_config=True)
    return dict(OmegaConf.to_container(cfg.hydra.runtime.choices))  # type: ignore[arg-type]


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    entry(lambda: sweep_main(cfg))


if __name__ == "__main__":
    hydra_cli(main)
    sys.exit(0)
