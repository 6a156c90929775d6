"""Where a run's output first differs from its baseline's, and how close the target was to a tie there.

A lossless strategy is token-identical to vanilla in exact arithmetic; in bf16 a k-token forward and a 1-token
forward round differently, so a near-tie of the target's top-2 logits can flip. Each divergence records the
first differing position and the target's top-1 minus top-2 logit after prompt + baseline output[:position]
(a margin near 0 is a numerical tie; a large one is a bug). The margin comes from a callable the backend gives
(`HFBackend.top2_margin`); none on the simulator, whose tokens are exact.

Golden: baseline [5, 6, 7], other [5, 6, 9] -> position 2, tokens 7 / 9; [5, 6] vs [5, 6, 1] -> position 2,
tokens -1 / 1 (one output ended).

Knows nothing of strategies, records or models beyond that callable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ouroboros.loop.metrics import RunResult


@dataclass
class Divergence:
    prompt_id: str
    position: int          # first output index where the run differs from the baseline
    baseline_token: int    # -1: the baseline's output ended there
    other_token: int       # -1: this run's output ended there
    margin: float | None   # target's top-1 minus top-2 logit after prompt + baseline[:position] (None: not known)


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """First index where a and b differ (or where the shorter one ends); None when equal."""
    if list(a) == list(b):
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def divergences(base: RunResult, other: RunResult, prompt_ids: Mapping[str, Sequence[int]],
                margin: Callable[[list[int]], float] | None = None) -> list[Divergence]:
    """One Divergence per prompt whose outputs differ (prompts matched by id; `prompt_ids`: id -> prompt tokens)."""
    out = []
    by_id = {p.prompt_id: p for p in base.prompts}
    for o in other.prompts:
        b = by_id.get(o.prompt_id)
        pos = None if b is None else first_difference(b.output, o.output)
        if b is None or pos is None:
            continue
        m = margin(list(prompt_ids[o.prompt_id]) + b.output[:pos]) if margin is not None else None
        out.append(Divergence(o.prompt_id, pos, b.output[pos] if pos < len(b.output) else -1,
                              o.output[pos] if pos < len(o.output) else -1, m))
    return out
