"""`python -m ouroboros.tune [model=...] [strategy=ouroboros] [tune.stages=[...]] [tune.out=PATH]`: the Ouroboros
paper's hyper-parameter heuristic (arXiv 2402.13720, Algorithm 1): search gamma first with the others fixed,
then W, then beta (level N) and K, each stage at the best values found so far; write the chosen settings as a
strategy YAML (conf/strategy/ format: name + params) that `strategy=...` can load.

Works on either backend; every evaluation is a sweep point (ouroboros.running.executor.Executor), so it is recorded in
the
JSONL file, mirrored, and skipped on a rerun (a killed tuning run resumes). Deviation from the paper: the score
is `tune.metric` from the records (tokens/s by default, equivalent to speedup on one prompt set).
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from ouroboros.cli import entry, explicit_run, hydra_cli
from ouroboros.config import RunConfig, StrategyConfig, check_outputs, validate
from ouroboros.errors import OuroborosError
from ouroboros.loop.metrics import PromptResult, RunResult
from ouroboros.paths import check_writable
from ouroboros.running.executor import Executor, make_executor
from ouroboros.running.interrupts import counted
from ouroboros.running.point import Point, label_of
from ouroboros.running.record import Record
from ouroboros.running.table import format_table
from ouroboros.strategies import check_type, field_types, strategy_params

TUNE_HEAD = b"# Chosen by `python -m ouroboros.tune`"   # the first line of every preset it writes


@dataclass
class Stage:
    param: str          # a field of the strategy's config dataclass
    values: list[Any]


def parse_stages(stages: list[str], strategy: str) -> tuple[list[Stage], list[str]]:
    """(stages that apply to `strategy`, the skipped ones' keys)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    fields = strategy_params(strategy)
    out, skipped = [], []
    for text in stages:
        try:
            ov = OverridesParser.create().parse_overrides([text])[0]
        except Exception as e:
            raise OuroborosError(f"tune.stages: {' '.join(str(e).split())}") from None
        key = ov.key_or_group
        if not key.startswith("strategy.params."):
            raise OuroborosError(f"tune.stages: {key!r} is not a strategy parameter (strategy.params.<name>)")
        name = key.removeprefix("strategy.params.")
        values = list(ov.sweep_iterator()) if ov.is_sweep_override() else [ov.value()]
        if name in fields:
            for v in values:
                try:
                    check_type(v, field_types(strategy)[name])
                except TypeError as e:
                    raise OuroborosError(f"tune.stages: {strategy}.{name} must be {e}, got {v!r}") from None
            out.append(Stage(name, values))
        else:
            skipped.append(name)
    if not out:
        raise OuroborosError(f"no tuning stage applies to strategy '{strategy}' (its parameters: "
                             f"{', '.join(fields) or 'none'})")
    return out, skipped


def metric_names() -> list[str]:
    """The numeric keys of RunResult.totals() (what `tune.metric` may name)."""
    probe = RunResult("probe", [PromptResult("p", 1, [0], 1.0, 0.0, "budget")]).totals()
    return [k for k, v in probe.items() if isinstance(v, (int, float))]


def check_tune(run: RunConfig) -> None:
    """Everything of `tune` that can be checked before the first point: stages, metric, output file."""
    parse_stages(list(run.tune.stages), run.strategy.name)
    if run.tune.metric not in metric_names():
        raise OuroborosError(f"tune.metric {run.tune.metric!r} is not a record total; one of "
                             f"{', '.join(metric_names())}")
    check_writable(run.tune.out, "tune.out")
    check_outputs(run, [("tune.out", run.tune.out)])   # not the records file, nor a strategy's save file
    with contextlib.suppress(OSError), open(run.tune.out, "rb") as f:   # what is there is a preset tune wrote
        head = f.read(4096).lstrip()
        if head and not head.startswith(TUNE_HEAD):
            raise OuroborosError(f"tune.out: {run.tune.out!r} exists and was not written by ouroboros.tune: writing "
                                 "the chosen settings would overwrite it; remove it or pick another path")


def with_params(run: RunConfig, params: dict[str, Any]) -> RunConfig:
    return validate(dataclasses.replace(run, strategy=StrategyConfig(run.strategy.name, dict(params))))


def tune(run: RunConfig, ex: Executor) -> tuple[dict[str, Any], list[Record]]:
    """Returns (chosen params, every record evaluated, in order)."""
    stages, skipped = parse_stages(list(run.tune.stages), run.strategy.name)
    if skipped:
        print(f"tune: '{run.strategy.name}' has no {', '.join(skipped)}: stage(s) skipped")
    params = strategy_params(run.strategy.name, run.strategy.params)
    metric = run.tune.metric
    history: list[Record] = []
    for stage in stages:
        tried = []
        for v in stage.values:
            cand = {**params, stage.param: v}
            for follower, leader in run.tune.tie.items():
                if leader == stage.param and follower in params and params[follower] == params[leader]:
                    cand[follower] = v
            try:
                point_run = with_params(run, cand)
            except OuroborosError as e:
                print(f"tune: {stage.param}={v} skipped ({e})")
                continue
            rec, _ = ex.run_point(Point(point_run, label_of(point_run)))
            history.append(rec)
            tried.append((rec.totals[metric], v, cand))
        if not tried:
            raise OuroborosError(f"tune: every value of {stage.param} was rejected")
        best = max(tried, key=lambda t: t[0])
        params = best[2]
        print(f"tune: {stage.param} = {best[1]} ({metric} {best[0]:.2f}; tried "
              f"{', '.join(f'{v}: {m:.2f}' for m, v, _ in tried)})")
    return params, history


def write_strategy_yaml(path: str | Path, run: RunConfig, params: dict[str, Any], best: Record) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    t = best.totals
    sp = best.speedup
    model = run.model.get("name") or run.model.get("kind")
    data = run.dataset.get("name") or run.dataset.get("kind")
    hw = run.kind.hardware(run)   # a modelled clock's machine (None: this one)
    head = (f"{TUNE_HEAD.decode()} (the paper's Algorithm 1) for model {model}, dataset {data}, "
            f"backend {run.kind.name}{' on ' + str(hw.get('name')) if hw is not None else ''}, "
            f"max_new_tokens {run.max_new_tokens}:\n# {t['tokens_per_s']:.2f} tok/s"
            f"{f', {sp:.2f}x vanilla' if sp is not None else ''} (point {best.point_id}).\n")
    body = OmegaConf.to_yaml({"name": run.strategy.name, "params": params})
    path.write_text(head + body)
    return path


def preset_hint(path: Path) -> str:
    """How to select a written preset by name: runs/conf (relative to where you run) is on Hydra's search path
    (conf/config.yaml), so runs/conf/strategy/<x>/<name>.yaml is strategy=<x>/<name>; the package's conf/ is
    never written."""
    parts = path.resolve().parts
    for i in range(len(parts) - 3):
        if parts[i:i + 3] == ("runs", "conf", "strategy") and Path(*parts[:i]) == Path.cwd().resolve():
            return f"select it with strategy={Path(*parts[i + 3:]).with_suffix('').as_posix()}"
    return ("to select it by name, put it under runs/conf/strategy/ (e.g. runs/conf/strategy/tuned/) and run from "
            "the folder holding runs/")


def tune_main(cfg: DictConfig) -> dict[str, Any]:
    late: list[str] = []
    run = explicit_run(cfg, late)
    check_tune(run)
    first = Point(run, label_of(run))
    ex = make_executor(run, resume=True, sweep=f"tune-{run.strategy.name}")
    ex.notes = late
    ex.check([first])   # the pair loads (and its notes print) before the first point
    with counted(ex):
        params, history = tune(run, ex)
    best = next(r for r in reversed(history) if r.params == params)
    print(format_table(list({r.point_id: r for r in history}.values())))   # a point the stages revisit: once
    path = write_strategy_yaml(run.tune.out, run, params, best)
    changed = {k: v for k, v in params.items() if strategy_params(run.strategy.name).get(k) != v}
    print(f"chosen: {changed or 'the defaults'}; written to {path}; {preset_hint(path)}")
    return params


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    entry(lambda: tune_main(cfg))


if __name__ == "__main__":
    hydra_cli(main)
