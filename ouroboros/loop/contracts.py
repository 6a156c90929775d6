"""The core contracts, at the bottom of the import graph: what a scorer (`Backend`), a strategy (`Proposer`), a
verification rule (`Verifier`) and the loop's per-step view (`DecodeState`) must provide, the data they pass
(`Scores`, `Counters`); the one error type of bad inputs (`OuroborosError`) is ouroboros/errors.py's.

It imports only `draft`, `verify` (plain data) and `errors`, so every other module may import it: the loop, the
backends, the strategies and the simulator all meet here and never need each other's modules to agree.
Knows nothing of models, tensors, Hydra or sinks.

Backend convention: the backend owns one model's committed sequence and its KV state; the cache holds every
committed token but the last one(s) ("pending"); `score(draft)` feeds the pending tokens followed by the draft
nodes in ONE forward, so its first prediction is the next token after the committed sequence (the tree's root)
and prediction i + 1 is the next token after draft node i. `commit` keeps the accepted nodes' state, drops the
rest, and appends the new tokens; `rollback` forgets the last n committed tokens; `append` commits tokens
without computing them (they become pending). `tree_refusal()` is None when the backend scores any tree
exactly, else the reason it scores chains only. A `Servable` backend can also be copied empty (`fresh()`: one per
batch slot) and names its backend kind (ouroboros/backends/registry.py), whose engine runs its batched forwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ouroboros.loop.draft import Draft
from ouroboros.loop.verify import Verdict


@dataclass
class Scores:
    preds: list[int]            # argmax next token at [root, node 0, ..., node n-1]
    logits: Any = None          # torch.Tensor [n + 1, V] (or None when the backend cannot / need not give it)


@dataclass
class Counters:
    forwards: int = 0           # model forwards (prefill excluded)
    tokens: int = 0             # tokens fed through those forwards (pending + draft nodes)
    prefill_tokens: int = 0


class Clock(Protocol):
    """Seconds for the loop's timings. `simulated`: modelled seconds, which move only when a forward (or an idle
    wait) is charged to the clock, so a run may wait for an arrival time that has not come (open-loop serving);
    False: the wall clock."""

    @property
    def simulated(self) -> bool: ...
    def now(self) -> float: ...


@runtime_checkable
class Backend(Protocol):
    @property
    def vocab_size(self) -> int: ...
    @property
    def max_context(self) -> int: ...
    @property
    def tokens(self) -> list[int]: ...          # committed sequence (prompt + generated)
    @property
    def cache_len(self) -> int: ...             # committed tokens whose state is cached; the rest are pending
    @property
    def counters(self) -> Counters: ...
    @property
    def clock(self) -> Clock: ...

    def tree_refusal(self) -> str | None: ...    # None, or why this model cannot score a token tree
    def prefill(self, prompt: list[int]) -> None: ...
    def score(self, draft: Draft, want_logits: bool = False) -> Scores: ...
    def commit(self, path: list[int], new_tokens: list[int]) -> None: ...
    def rollback(self, n: int) -> None: ...
    def append(self, tokens: list[int]) -> None: ...


@runtime_checkable
class Servable(Backend, Protocol):
    """A backend batched serving can run on (ouroboros/serving/batch.py): `fresh()` is a new, empty backend on the same
    model and settings (its own tokens, cache and, when simulated, clock): one per batch slot. `kind` is the name of
    its backend kind ("hf", "sim"; ouroboros/backends/registry.py `get`), which builds its batched-serving engine."""

    @property
    def kind(self) -> str: ...
    def fresh(self) -> Servable: ...


@dataclass
class DecodeState:
    tokens: list[int]    # committed sequence, prompt + generated (the target backend's list: read only)
    prompt_len: int
    remaining: int       # tokens still allowed by max_new_tokens (and the context)
    room: int            # free positions left in the target's context
    # The run's sampling verifier (None when greedy). Proposers that draw random drafts take their draws from
    # its stream (`sampler.generator(device)`), so draft and verification randomness come from one seeded run.
    sampler: Any = None
    # False in an inner drafting loop that keeps no step records: verification may skip #Match (n_match = -1).
    record: bool = True

    def max_depth(self) -> int:
        """Deepest useful draft: the bonus token needs one more slot, the context must hold the tree."""
        return max(0, min(self.remaining - 1, self.room - 1))


class Proposer(Protocol):
    """A strategy. `begin(prompt)`: a new prompt starts; `propose(state) -> Draft`: this step's token tree (may
    be empty; no deeper than `state.max_depth()`); `observe(verdict, scores, state)`: what the target decided;
    `stats()`: cumulative strategy-specific counters for this prompt; `checkpoint()`: save what must outlive the
    run (Ouroboros' pool_save); `counters`: forwards / tokens of the proposer's own model(s)."""

    counters: Counters
    needs_draft_model: bool          # the registry hands it the draft backend
    tree_models: tuple[str, ...]     # which backends ("target", "draft") it may give a token tree to score
    reads_logits: bool               # observe() reads the target's logits (the loop asks the target for them)

    def begin(self, prompt: list[int]) -> None: ...
    def propose(self, state: DecodeState) -> Draft: ...
    def observe(self, verdict: Verdict, scores: Scores, state: DecodeState) -> None: ...
    def stats(self) -> dict[str, float]: ...  # flat per-prompt counters (strategies/stats.py); no side effects
    def checkpoint(self) -> None: ...          # persist what must outlive the run; the harness calls it per prompt


@runtime_checkable
class SharesPool(Protocol):
    """A proposer with a phrase pool that other proposers may share (serve.shared_pool: one pool for every batch
    slot). `pool` is its pool; `use_pool(pool)` points it, and whatever drafts with it inside, at `pool` instead."""

    pool: Any

    def use_pool(self, pool: Any) -> None: ...


@runtime_checkable
class ChargesHost(Protocol):
    """A backend whose modelled clock charges a strategy's host (Python) time per step, as measured on a real
    backend (the simulator's, simulators/host.py); a wall clock needs none: it sees that time. `host_timed(strategy,
    proposer)`: the proposer the loop runs (charged per step where a measurement exists); `host_note(strategies,
    served)`: one line saying which strategies are charged and which not (`served`: those run under
    serve.concurrency)."""

    def host_timed(self, strategy: str, proposer: Proposer) -> Proposer: ...
    def host_note(self, strategies: list[str], served: list[str]) -> str: ...


class Verifier(Protocol):
    """A verification rule: `(draft, scores, state) -> Verdict` (the accepted root-to-leaf path + bonus token)."""

    needs_logits: bool               # the backend must return logits (sampling), not only argmaxes
    samples: bool                    # draws at random: proposers drawing random drafts share its stream

    def begin(self, key: str) -> None: ...   # a new prompt (a sampling verifier reseeds its stream per prompt)
    def __call__(self, draft: Draft, scores: Scores, state: DecodeState) -> Verdict: ...
