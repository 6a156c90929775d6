"""A point: one strategy setting measured on one session (its `RunConfig` and display label), what identifies its
measurement (`point_key`, `point_id`: resume and the records key on it; `code_version`: the code that measures it,
which a resume checks too), and the `Record` its result becomes (`make_record`).

Every number comes from ouroboros.loop.metrics (RunResult.totals(), PromptResult.summary(), speedup()); this module
only arranges them. Knows nothing of the command line, of sinks or of how points are scheduled.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sys
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ouroboros.config import CONF_DIR, RunConfig
from ouroboros.loop.metrics import RunResult, speedup, speedup_mean_speed, step_dict
from ouroboros.running.divergence import divergences
from ouroboros.running.record import SCHEMA_VERSION, Record
from ouroboros.running.session import Session, effective_budgets, versions
from ouroboros.strategies import strategy_params

KIND_GROUPS = ("hardware", "sim")   # groups only some backend kinds read (`BackendKind.config_groups`); null elsewhere


def point_key(run: RunConfig, strategy: str | None = None) -> dict[str, Any]:
    """What identifies a measurement: everything that can change its numbers (not logger / sweep / out).
    `strategy` swaps in another strategy at its defaults (the baseline of this point)."""
    name = strategy or run.strategy.name
    params = strategy_params(name, None if strategy else run.strategy.params)
    kind = run.kind
    backend = {**dataclasses.asdict(run.backend), "kind": kind.name}
    # skip_too_long only when on, order only when not the source's: points measured before the options existed
    # keep their ids
    dataset = {k: v for k, v in run.dataset.items()
               if not (k == "skip_too_long" and not v) and not (k == "order" and v == "source")}
    return {"model": run.model, "dataset": dataset, "backend": backend,
            **{g: getattr(run, g) if g in kind.config_groups else None for g in KIND_GROUPS},
            "max_new_tokens": run.max_new_tokens, "seed": run.seed, "warmup": run.warmup,
            "strategy": {"name": name, "params": params},
            # only when sampling, so greedy points keep the ids of records written before sampling existed
            **({"sampling": dataclasses.asdict(run.sampling)} if not run.sampling.greedy else {}),
            # only when serving, so one-at-a-time points keep their ids; load-aware means nothing to vanilla
            **({"serve": {**dataclasses.asdict(run.serve), "load_aware": run.serve.load_aware and name != "vanilla",
                          "shared_pool": run.serve.shared_pool and name != "vanilla"}}
               if run.serve.concurrency else {})}


def point_id(key: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


CODE_FILES = ("*.py", "*.cpp", "*.h")   # a package's source, as the code fingerprint reads it


def code_version(run: RunConfig) -> str:
    """What a point's figures depend on beyond its config (`point_key`): the source of the core and of the run's
    backend kind's package; on a modelled clock conf/ too (profiles, hardware and bands are read from files the key
    names only by name; such points take seconds to measure again); on the wall clock the torch and transformers
    versions (their kernels change the numbers). 16 hex digits of a sha256; a resume reuses only records and prompt
    lines of the same code (ouroboros.running.store)."""
    packages = tuple(sorted({__name__.partition(".")[0], type(run.kind).__module__.partition(".")[0]}))
    return _code_hash(packages, run.kind.simulated)


@functools.cache
def _code_hash(packages: tuple[str, ...], simulated: bool) -> str:
    roots: list[tuple[str, Path, tuple[str, ...]]] = []
    for name in packages:
        roots += [(name, Path(loc), CODE_FILES) for loc in getattr(sys.modules[name], "__path__", [])]
    if simulated:
        roots.append(("conf", Path(CONF_DIR), ("*.yaml",)))
    h = hashlib.sha256()
    for name, root, patterns in roots:
        for f in sorted({f for pat in patterns for f in root.rglob(pat) if "__pycache__" not in f.parts}):
            h.update(f"{name}/{f.relative_to(root).as_posix()}\0".encode())
            h.update(f.read_bytes())
    if not simulated:
        v = versions()
        h.update(f"torch {v['torch']} transformers {v['transformers']}".encode())
    return h.hexdigest()[:16]


@dataclass
class Point:
    run: RunConfig
    label: str
    id: str = field(init=False)                     # point_id of the measurement (resume and records key on it)
    baseline_id: str | None = field(init=False)     # ... of its baseline's (None: no baseline)
    code: str = field(init=False)                   # code_version: the code that measures it (and its baseline)

    def __post_init__(self) -> None:
        self.id = point_id(point_key(self.run))
        self.code = code_version(self.run)
        b = self.run.baseline
        self.baseline_id = point_id(point_key(self.run, strategy=b)) if b else None

    def baseline_point(self) -> Point:
        assert self.run.baseline
        b = dataclasses.replace(self.run, strategy=dataclasses.replace(self.run.strategy, name=self.run.baseline,
                                                                       params={}))
        return Point(b, self.run.baseline)


def label_of(run: RunConfig, always: Collection[str] = ()) -> str:
    """Display name: the strategy and the params that differ from its dataclass defaults, plus those in `always`
    (a sweep's swept params, shown even at their default values)."""
    base = strategy_params(run.strategy.name)
    shown = {k: v for k, v in strategy_params(run.strategy.name, run.strategy.params).items()
             if base.get(k) != v or k in always}
    return run.strategy.name + "".join(f" {k}={v}" for k, v in shown.items())


def request_id(prompt_id: str, round_: int) -> str:
    """A served request's id: the prompt's, with `@r<k>` when the requests cycle through the prompts again."""
    return prompt_id if round_ == 0 else f"{prompt_id}@r{round_}"


def make_record(run: RunConfig, result: RunResult, session: Session, *, label: str, baseline: RunResult | None,
                baseline_id: str | None, sweep: str, step_records: bool, baseline_record: str | None = None) -> Record:
    """The record of `result` (measured for `run` on `session`), against `baseline` when it has one (the result of
    the record `baseline_record` of point `baseline_id`)."""
    prompts = []
    categories = {q.id: q.category for q in session.prompts}
    prompt_ids = {q.id: q.ids for q in session.prompts}
    for p in result.prompts:
        base_id = p.prompt_id.rsplit("@r", 1)[0]
        categories.setdefault(p.prompt_id, categories.get(base_id, ""))
        prompt_ids.setdefault(p.prompt_id, prompt_ids.get(base_id, []))
    for p in result.prompts:
        s = p.summary()
        s["output"] = p.output
        s["accept_lengths"] = [r.new_tokens for r in p.steps]  # tokens per target forward (Spec-Bench's)
        s["category"] = categories.get(p.prompt_id, "")
        if session.tokenizer is not None:
            s["text"] = decode_text(session.tokenizer, p.output)
        if step_records:
            s["steps"] = [step_dict(r) for r in p.steps]
        prompts.append(s)
    budgets = sorted(set(effective_budgets(session, [p.max_new_tokens or run.max_new_tokens
                                                     for p in session.prompts])))
    same, diverged = None, []
    sampled = None if run.sampling.greedy else sampled_text(run)
    if baseline is not None and sampled is None:   # sampled outputs are not compared (sampled_text)
        n_same = sum(a.output == b.output for a, b in zip(baseline.prompts, result.prompts, strict=True))
        same = f"{n_same}/{len(result.prompts)}"
        diverged = divergences(baseline, result, prompt_ids, session.margin)
    paired = baseline if baseline is not None and not unpaired_clock(run, result) else None
    return Record(
        schema=SCHEMA_VERSION, record_id=uuid.uuid4().hex, point_id=point_id(point_key(run)), baseline_id=baseline_id,
        baseline_record=baseline_record, time=time.time(), sweep=sweep, label=label,
        max_new_tokens=budgets[0] if len(budgets) == 1 else budgets,   # the budget(s) the prompts had
        strategy=run.strategy.name, params=point_key(run)["strategy"]["params"], backend=session.backend,
        hardware=session.hardware, versions={**versions(), "code": code_version(run)}, config=dataclasses.asdict(run),
        totals=result.totals(),
        speedup=serving_speedup(paired, result) if paired is not None else None,
        speedup_specbench=speedup_mean_speed(paired, result) if paired is not None else None,
        identical_to_baseline=same, divergences=[dataclasses.asdict(d) for d in diverged], sampled=sampled or None,
        prompts=prompts, serving=result.serving,
        decisions=run.kind.decisions(run, len({p.prompt_id.rsplit("@r", 1)[0] for p in result.prompts}),
                                     max(budgets)))


def unpaired_clock(run: RunConfig, result: RunResult) -> bool:
    """A vLLM peer is timed by its own worker process: its time pairs with our baseline's only where the prompts
    alternated between the two processes (interleaved, not served); otherwise the record has no speedup."""
    from ouroboros.running.peer_configs import PEERS

    spec = PEERS.get(run.strategy.name)
    return spec is not None and spec.engine == "vllm" and (result.serving is not None or run.interleave is False)


def sampled_text(run: RunConfig) -> str:
    """What a sampled point's outputs mean for losslessness: exact sampling draws from the target's distribution,
    but not the same tokens as an independently sampled baseline, so outputs are not compared."""
    sp = run.sampling
    knobs = ", ".join([f"T={sp.temperature:g}"] + ([f"top_p={sp.top_p:g}"] if sp.top_p < 1 else [])
                      + ([f"top_k={sp.top_k}"] if sp.top_k else []))
    return (f"sampled ({knobs}): exactness is distribution-tested (tests/test_sampling.py); outputs are not "
            "compared with the baseline's")


def serving_speedup(baseline: RunResult, result: RunResult) -> float:
    """The paper's speedup (total time over total time); for served points, the baseline's makespan over this
    point's at the same load (same requests): the throughput ratio."""
    if result.serving is not None and baseline.serving is not None:
        return baseline.serving["makespan_s"] / result.serving["makespan_s"]
    return speedup(baseline, result)


def decode_text(tokenizer: Any, ids: list[int]) -> str:
    try:
        return tokenizer.decode(ids, skip_special_tokens=True)   # transformers tokenizers
    except TypeError:
        return tokenizer.decode(ids)                            # the simulator's surrogate tokenizer
