"""Load-aware drafting: a wrapper that sizes each step's draft for the batch it runs in (`LoadAware`), with running
acceptance and shape estimates shareable by every slot of a serve (`DepthStats`).

Knows nothing of the scheduler (it reads the batch size and the step counter through callables), of engines or of
which strategy it wraps; it needs the batched cost models of the pair (`BatchCost`: the simulator's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from ouroboros.loop.contracts import DecodeState, Scores
from ouroboros.loop.decode import max_candidate_depth
from ouroboros.loop.draft import Draft


class BatchCost(Protocol):
    def uniform_batch_s(self, batch: int, k: int, ctx: int) -> float: ...   # seconds of b rows of k tokens


@runtime_checkable
class CostModelled(Protocol):
    """A backend whose clock is a batched cost model (the simulator's): what load-aware drafting sizes drafts by."""

    cost: BatchCost


@dataclass
class LoadAware:
    """Wraps any drafting proposer: before each step, caps the draft depth at the d that maximises expected new
    tokens per second of batched forwards at the current batch size B:

        E[tokens | d] = 1 + sum_{i<=d} p_1 ... p_i    (p_i: acceptance at depth i given depth i - 1 was accepted,
                                                       this request's running estimate: acceptance is bursty, so
                                                       p_i grows with i and a single geometric rate undervalues
                                                       deep drafts)
        cost(d) = T(B rows of 1 + r d tokens) + f d * D(B rows of w tokens)

    with T, D the target's and the draft's batched cost models (D = None when the strategy has no draft model) and
    the strategy's own shape, measured as it runs: r = draft nodes per unit of depth (1 for a chain; more for trees
    and probe windows), f = draft forwards per unit of depth (1 for SpS; below 1 where the drafter emits several
    tokens per forward, as Ouroboros' does), w = tokens per draft forward. d = 0 is a plain vanilla step. Every
    `explore_every`-th step drafts one deeper than chosen, so the next depth's acceptance stays measured and the cap
    can grow; where the cap is 0 that step drafts one token (a probe: a step that drafts nothing measures nothing,
    and a cap that fell to 0 on a few early rejections would never come back). One deeper, not uncapped: a batch's
    draft phase lasts as long as its deepest row's, so one row drafting deep holds up every row. Lossless by
    construction: it only lowers `max_depth()`, which every proposer honours (tests/test_batch.py checks it)."""

    inner: Any
    load: Callable[[], int]                 # the current batch size
    target_cost: BatchCost
    draft_cost: BatchCost | None = None
    max_draft: int = 16
    decay: float = 0.98                     # the running estimates' memory per observation
    prior: float = 0.7                      # acceptance at depth 1 before any is observed (`prior_weight` steps)
    prior_weight: float = 2.0
    explore_every: int = 4                  # every n-th batched step, every row drafts one deeper than chosen
    tick: Callable[[], int] | None = None   # the batch's step counter (all rows explore on the same steps)
    stats_: DepthStats | None = None        # estimates shared by every slot of a serve (None: this wrapper's own)
    chosen: list[int] = field(default_factory=list)
    _steps: int = 0
    _offered: int = 0

    def __post_init__(self) -> None:
        if self.stats_ is None:
            self.stats_ = DepthStats(self.max_draft, self.draft_cost is not None)
        st = self.stats_
        self._reached, self._accepted, self._shape = st.reached, st.accepted, st.shape
        self._mark: tuple[int, int] | None = None

    def __getattr__(self, name: str) -> Any:   # counters, needs_draft_model, tree_models, checkpoint
        return getattr(self.inner, name)

    def begin(self, prompt: list[int]) -> None:
        self.chosen = []
        self.inner.begin(prompt)

    def stats(self) -> dict[str, float]:
        """The inner proposer's stats + the chosen depth caps (`load_aware.depth_sum` / `load_aware.steps`)."""
        return {**self.inner.stats(), "load_aware.depth_sum": float(sum(self.chosen)),
                "load_aware.steps": float(len(self.chosen)), "load_aware.off_steps": float(self.chosen.count(0))}

    def acceptances(self, d: int) -> list[float]:
        """p_1 .. p_d. Each depth's prior is the estimate one depth up (`prior` for depth 1): a depth seldom
        offered inherits the trend, so deeper drafts keep being tried where the shallower ones pay."""
        out, q = [], self.prior
        for i in range(1, d + 1):
            q = (self._accepted[i] + q * self.prior_weight) / (self._reached[i] + self.prior_weight)
            out.append(q)
        return out

    def shape(self) -> tuple[float, float, float]:
        """(r, f, w): target nodes per depth, draft forwards per depth, tokens per draft forward."""
        depth, nodes, fwd, toks = self._shape
        return nodes / depth, fwd / depth, (toks / fwd if fwd > 0 else 1.0)

    def best_depth(self, batch: int, ctx: int) -> int:
        best, best_rate = 0, 0.0
        ps = self.acceptances(self.max_draft)
        r, f, w = self.shape()
        e, run = 1.0, 1.0
        for d in range(self.max_draft + 1):
            if d:
                run *= ps[d - 1]
                e += run
            t = self.target_cost.uniform_batch_s(batch, 1 + max(1, round(r * d)) if d else 1, ctx)
            if d and self.draft_cost is not None and f > 0:
                t += f * d * self.draft_cost.uniform_batch_s(batch, max(1, round(w)), ctx)
            rate = e / t
            if rate > best_rate:
                best, best_rate = d, rate
        return best

    def propose(self, state: DecodeState) -> Draft:
        d = self.best_depth(max(self.load(), 1), len(state.tokens))
        self._steps += 1
        if (self.tick() if self.tick is not None else self._steps) % self.explore_every == 0:
            d += 1   # every n-th step one deeper; with drafting off, a depth-1 probe, so a cap that fell to 0 on a
            #          few early rejections can come back (a step that drafts nothing measures nothing)
        self.chosen.append(d)
        if d < state.max_depth():
            state = replace(state, remaining=d + 1)
        c = self.inner.counters
        mark = (c.forwards, c.tokens)
        draft = self.inner.propose(state)
        self._offered = min(max_candidate_depth(draft), self.max_draft)
        self._nodes, self._mark = len(draft), mark
        return draft

    def observe(self, verdict: Any, scores: Scores, state: DecodeState) -> None:
        self.inner.observe(verdict, scores, state)
        c = self.inner.counters
        if self._offered and self._mark is not None:   # this step's shape (draft work in observe included)
            g = self.decay
            sh = self._shape
            for i, v in enumerate((self._offered, self._nodes, c.forwards - self._mark[0], c.tokens - self._mark[1])):
                sh[i] = sh[i] * g + v
        m = len(verdict.path)
        for i in range(1, min(self._offered, m + 1) + 1):   # depths reached: 1 .. min(offered, accepted + 1)
            self._reached[i] = self._reached[i] * self.decay + 1
            self._accepted[i] = self._accepted[i] * self.decay + (1 if m >= i else 0)


class DepthStats:
    """`LoadAware`'s running estimates, shareable by every slot of a serve: acceptance is a property of the pair
    and the task far more than of one request, and rows that agree on a depth keep a batch's draft phase short
    (it lasts as long as its deepest row's)."""

    def __init__(self, max_draft: int, has_draft: bool):
        n = max_draft + 1
        self.reached = [0.0] * n     # [i]: decayed steps that offered depth i with depth i - 1 accepted
        self.accepted = [0.0] * n    # [i]: ... and depth i accepted too
        # decayed sums over drafting steps: depth, target nodes, draft forwards, draft tokens (prior: one step of
        # a chain drafted one token per draft forward)
        self.shape = [1.0, 1.0, 1.0 if has_draft else 0.0, 1.0]
