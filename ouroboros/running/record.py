"""The record: what one measured point leaves behind (one JSON object per line in the records file).

`Record` is the one typed view of it. The executor builds it (`ouroboros.running.point.make_record`); sinks, analysis,
the tuner, the sweep, Spec-Bench export and the simulators read its fields instead of string keys. On disk the
layout is the JSON object `to_json` writes (keys in the order below; `baseline_record`, `sampled`, `serving`,
`decisions`, `processes`, `paired_processes`, `timed_in_processes` and `process_speedups` only when set).
`from_json` reads any record written before: a key it does not know is kept in `extra` (and written back by
`to_json`), a key an older record lacks takes its default.

The nested parts stay plain data: `totals` is `RunResult.totals()` and each of `prompts` is
`PromptResult.summary()` plus the output (ouroboros.loop.metrics defines every figure in them); `serving` is the served
point's summary (ouroboros.serving.batch); `decisions` names a simulated point's token source and error band
(simulators.trust), and a REST point's stand-in datastore if it ran on one (`rest_datastore`: simulators.stand_in).

Knows nothing of models, Hydra, sinks or how a record is measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ouroboros.loop.metrics import PromptResult, RunResult

# 2: the warm-up decode runs on a throw-away proposer (1: on the measured one, so a strategy that keeps state across
# prompts started its first prompt knowing the warm-up's tokens of that prompt's own answer)
SCHEMA_VERSION = 2

# written only when set (None): the layout records have always had
_OPTIONAL = ("baseline_record", "sampled", "serving", "decisions", "processes", "paired_processes",
             "timed_in_processes", "process_speedups")


@dataclass(frozen=True)
class Record:
    schema: int = SCHEMA_VERSION
    record_id: str = ""
    point_id: str = ""
    baseline_id: str | None = None            # the point this one's speedup is measured against
    baseline_record: str | None = None        # the record_id of that point's record whose times the speedup used
    time: float = 0.0                         # when it was recorded (Unix seconds)
    sweep: str = ""
    label: str = ""                           # display name (strategy + params that differ from the defaults)
    max_new_tokens: int | list[int] | None = None   # the budget(s) the prompts had (a list when they differ)
    strategy: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    backend: str = ""                         # "hf" (wall clock) | "sim" (modelled clock)
    hardware: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)    # the whole run config (dataclasses.asdict)
    totals: dict[str, Any] = field(default_factory=dict)    # RunResult.totals()
    speedup: float | None = None              # the paper's: baseline time / time (served: makespan ratio)
    speedup_specbench: float | None = None    # Spec-Bench's: mean per-prompt tok/s over the baseline's
    identical_to_baseline: str | None = None  # "n/m" prompts token-identical to the baseline's (greedy only)
    divergences: list[dict[str, Any]] = field(default_factory=list)
    sampled: str | None = None                # what a sampled point's outputs mean (not compared)
    prompts: list[dict[str, Any]] = field(default_factory=list)
    serving: dict[str, Any] | None = None     # served points (serve.concurrency >= 1)
    decisions: dict[str, Any] | None = None   # simulated points: token source and measured error band
    processes: dict[str, str] | None = None   # wall clock: prompt_id -> the process that timed it
    paired_processes: bool | None = None      # wall clock: every prompt timed by its baseline prompt's process
    timed_in_processes: int | None = None     # wall clock, prompts timed by two or more processes: how many
    process_speedups: dict[str, float] | None = None   # then: process -> the speedup over the prompts it timed
    extra: dict[str, Any] = field(default_factory=dict)     # keys this version does not know (kept as read)

    # ------------------------------------------------------------------------------------------- JSON
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "extra" or (f.name in _OPTIONAL and v is None):
                continue
            out[f.name] = v
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Record:
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in obj.items() if k in names}
        return cls(**known, extra={k: v for k, v in obj.items() if k not in names})

    # ------------------------------------------------------------------------------------------- views
    @property
    def clock(self) -> str:
        """'modelled' (simulator) or 'wall'. Read from the backend's name the record stores: records written before
        the `decisions` block existed have nothing else to tell a simulated run by."""
        return "modelled" if self.backend == "sim" else "wall"

    @property
    def seconds(self) -> float:
        """The point's time: a served point's makespan, else the total decode time."""
        return self.serving["makespan_s"] if self.serving else self.totals["elapsed_s"]

    @property
    def rate(self) -> float:
        """Tokens per second: a served point's throughput, else total tokens over total time."""
        return self.serving["throughput_tok_s"] if self.serving else self.totals["tokens_per_s"]

    def band(self, metric: str = "speedup") -> float | None:
        """The measured relative error band of `metric` (simulated records; None when unmeasured or real)."""
        return ((self.decisions or {}).get("band") or {}).get(metric)

    @property
    def budget(self) -> int | list[int] | None:
        """The new-token budget(s) the prompts had (records older than the field: the configured one)."""
        return self.max_new_tokens if self.max_new_tokens is not None else self.config.get("max_new_tokens")

    @property
    def model_name(self) -> str:
        m = self.config.get("model") or {}
        return str(m.get("name") or m.get("kind") or "?")

    @property
    def dataset_name(self) -> str:
        d = self.config.get("dataset") or {}
        return str(d.get("name") or d.get("kind") or "?")

    @property
    def timed_by(self) -> dict[str, int]:
        """Wall clock: process -> how many of the prompts it timed (in the order the prompts name them)."""
        out: dict[str, int] = {}
        for proc in (self.processes or {}).values():
            out[proc] = out.get(proc, 0) + 1
        return out

    def named(self, label: str, sweep: str) -> Record:
        """The same measurement under another sweep's label (a point two sweeps share)."""
        return dataclasses.replace(self, label=label, sweep=sweep)

    def result(self) -> RunResult:
        """A RunResult rebuilt from the per-prompt results (no steps): enough for `speedup` and output checks."""
        return RunResult(strategy=self.label, serving=self.serving, prompts=[
            PromptResult(prompt_id=p["prompt_id"], prompt_len=p["prompt_len"], output=list(p["output"]),
                         elapsed_s=p["elapsed_s"], prefill_s=p["prefill_s"], stop_reason=p["stop_reason"],
                         proposer_stats=dict(p.get("proposer_stats", {}))) for p in self.prompts])


def latest(records: Sequence[Record]) -> list[Record]:
    """One record per (point_id, sweep) (the latest), in first-seen order: a point two sweeps share (see
    ouroboros.running.sinks.load_sweep_records) stays in both."""
    order: dict[tuple[str, Any], Record] = {}
    for r in records:
        key = (r.point_id, r.sweep)
        prev = order.get(key)
        if prev is None or r.time >= prev.time:
            order[key] = r
    return list(order.values())
