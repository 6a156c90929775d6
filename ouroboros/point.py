"""A point: one strategy setting measured on one session (its `RunConfig` and display label), the checks it must
pass before anything is measured, and the `Record` its result becomes (`make_record`).

Every number comes from ouroboros.metrics (RunResult.totals(), PromptResult.summary(), speedup()); this module
only arranges them. Knows nothing of the command line, of sinks or of how points are scheduled.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from ouroboros.config import RunConfig, point_id, point_key
from ouroboros.divergence import divergences
from ouroboros.metrics import RunResult, speedup, speedup_mean_speed, step_dict
from ouroboros.record import SCHEMA_VERSION, Record
from ouroboros.session import Session, effective_budgets, versions
from ouroboros.strategies import strategy_params


@dataclass
class Point:
    run: RunConfig
    label: str

    @property
    def id(self) -> str:
        return point_id(point_key(self.run))

    @property
    def baseline_id(self) -> str | None:
        b = self.run.baseline
        return point_id(point_key(self.run, strategy=b)) if b else None

    def baseline_point(self) -> Point:
        assert self.run.baseline
        b = dataclasses.replace(self.run, strategy=dataclasses.replace(self.run.strategy, name=self.run.baseline,
                                                                       params={}))
        return Point(b, self.run.baseline)

    def budgets(self, sess: Session) -> list[int]:
        """Each prompt's new-token budget: the prompt's own (a dataset may set one), else the run's."""
        return [p.max_new_tokens or self.run.max_new_tokens for p in sess.prompts]


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
    return Record(
        schema=SCHEMA_VERSION, record_id=uuid.uuid4().hex, point_id=point_id(point_key(run)), baseline_id=baseline_id,
        baseline_record=baseline_record, time=time.time(), sweep=sweep, label=label,
        max_new_tokens=budgets[0] if len(budgets) == 1 else budgets,   # the budget(s) the prompts had
        strategy=run.strategy.name, params=point_key(run)["strategy"]["params"], backend=session.backend,
        hardware=session.hardware, versions=versions(), config=dataclasses.asdict(run), totals=result.totals(),
        speedup=serving_speedup(baseline, result) if baseline is not None else None,
        speedup_specbench=speedup_mean_speed(baseline, result) if baseline is not None else None,
        identical_to_baseline=same, divergences=[dataclasses.asdict(d) for d in diverged], sampled=sampled or None,
        prompts=prompts, serving=result.serving,
        decisions=run.kind.decisions(run, len({p.prompt_id.rsplit("@r", 1)[0] for p in result.prompts}),
                                     max(budgets)))


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


def budget_note(point: Point, sess: Session, budgets: list[int]) -> str | None:
    """A note when the model context leaves some prompt less room than its budget (decoding stops there)."""
    short = [(p, b, sess.context - len(p.ids)) for p, b in zip(sess.prompts, budgets, strict=True)
             if b > sess.context - len(p.ids)]
    if not short:
        return None
    room = min(r for _, _, r in short)
    return (f"max_new_tokens={max(b for _, b, _ in short)} does not fit the model context of {sess.context} tokens "
            f"for {len(short)} of {len(sess.prompts)} prompt(s): they stop when the context is full (as few as "
            f"{room} new tokens); the table shows the budgets in effect")
