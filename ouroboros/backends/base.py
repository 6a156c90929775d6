"""What every backend shares beyond the contract: the wall clock, the bookkeeping of a backend that computes its own
forwards (`SequenceBackend`: hf and sim), the base of backends that wrap another (`BackendWrapper`), and the one
boundary between the core and a backend kind (`BackendKind`, the pair it opens: `OpenPair`). The protocol itself
(`Backend`, `Scores`, `Counters`, `Clock`) lives in `ouroboros/loop/contracts.py` and is re-exported here; the error
type
and the command-line error convention (`OuroborosError`, `cli`, `report_error`) in `ouroboros/errors.py`.

Backends know nothing of strategies, verification rules, budgets or logging.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

from ouroboros.errors import OuroborosError
from ouroboros.loop.contracts import Backend, Clock, Counters, Scores

__all__ = ["Backend", "BackendKind", "BackendWrapper", "Clock", "Counters", "OpenPair", "Scores", "SequenceBackend",
           "WallClock"]


class WallClock:
    """perf_counter, synchronising CUDA first when a CUDA device is in use (so queued kernels are counted)."""

    simulated = False

    def __init__(self, cuda: bool = False):
        self.cuda = cuda

    def now(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()


class SequenceBackend:
    """Base of the backends that compute their own forwards (hf, sim): the bookkeeping the contract's cache
    convention asks of both. It keeps the committed sequence (`tokens`), how many of them are cached (`cache_len`;
    the rest are pending), what the last `score` fed (`_scored_pending` pending tokens, then `_scored_nodes` draft
    nodes; -1: nothing awaits commit), the counters, and the order prefill -> (score -> commit)* with rollback and
    append between steps. A subclass computes: `_restart` and `_prefill_forward` (a new prompt), `score` (which
    calls `_pending` first and `_count_score` after), `_keep` (commit: the accepted nodes' state moves into place),
    `_forget` (state past the sequence or the cache is dropped) and `_push` (tokens appended uncomputed)."""

    def __init__(self, name: str, max_context: int):
        self.name = name
        self.max_context = int(max_context)
        self.tokens: list[int] = []
        self.cache_len = 0
        self.counters = Counters()
        self._scored_pending = 0   # pending tokens fed in the last score() (draft nodes follow them)
        self._scored_nodes = -1    # nodes scored in the last score(); -1 = nothing awaits commit

    # ------------------------------------------------------------------ what a subclass computes
    def _restart(self, prompt: list[int]) -> None:
        """A new sequence starts: the state of `prompt` with nothing cached (before its prefill forward)."""

    def _prefill_forward(self, k: int) -> None:
        """Compute (or charge) the cache of the first k prompt tokens."""

    def _keep(self, path: list[int], base: int, new_tokens: list[int]) -> None:
        """commit: the accepted nodes `path` (their state starts at position `base`) become the next positions."""

    def _forget(self) -> None:
        """State past the committed sequence or past `cache_len` is dropped (after commit and rollback)."""

    def _push(self, tokens: list[int]) -> None:
        """append: `tokens` join the sequence uncomputed (before `tokens` grows)."""

    # ------------------------------------------------------------------ the bookkeeping
    def prefill(self, prompt: list[int]) -> None:
        if len(prompt) == 0:
            raise OuroborosError("empty prompt: give at least one token")
        if len(prompt) >= self.max_context:
            raise OuroborosError(
                f"prompt of {len(prompt)} tokens does not fit {self.name}'s context of {self.max_context}")
        self.tokens = list(prompt)
        self.cache_len = 0
        self._scored_nodes = -1
        self._restart(self.tokens)
        if len(prompt) > 1:  # the last prompt token stays pending: the first score() feeds it
            self._prefill_forward(len(prompt) - 1)
            self.cache_len = len(prompt) - 1
            self.counters.prefill_tokens += len(prompt) - 1

    def _pending(self) -> int:
        """How many pending tokens the next score() feeds before its draft nodes (checks the order first)."""
        if self._scored_nodes >= 0:
            raise RuntimeError("score() called twice without commit()")
        n_p = len(self.tokens) - self.cache_len
        if n_p <= 0:
            raise RuntimeError("no pending token to score from (call prefill first)")
        return n_p

    def _count_score(self, n_pending: int, n_nodes: int) -> None:
        """A forward scored `n_pending` pending tokens and `n_nodes` draft nodes: it awaits commit."""
        self._scored_pending, self._scored_nodes = n_pending, n_nodes
        self.counters.forwards += 1
        self.counters.tokens += n_pending + n_nodes

    def commit(self, path: list[int], new_tokens: list[int]) -> None:
        """Keep pending + the accepted nodes `path` (ascending node indices), then append `new_tokens` (the path's
        tokens, possibly + the bonus token, which stays pending)."""
        if self._scored_nodes < 0:
            raise RuntimeError("commit() without a preceding score()")
        base = self.cache_len + self._scored_pending  # where the draft nodes' state starts
        self._keep(path, base, new_tokens)
        self.tokens.extend(new_tokens)
        self.cache_len = min(base + len(path), len(self.tokens) - 1)
        self._scored_nodes = -1
        self._forget()

    def rollback(self, n: int) -> None:
        if n < 0 or n > len(self.tokens) - 1:
            raise ValueError(f"cannot roll back {n} of {len(self.tokens)} tokens")
        if n:
            del self.tokens[len(self.tokens) - n:]
            self.cache_len = min(self.cache_len, len(self.tokens) - 1)
            self._forget()

    def append(self, tokens: list[int]) -> None:
        self._push(tokens)
        self.tokens.extend(tokens)


class BackendWrapper:
    """Base of backends that wrap another (`inner`) and change some of what it does (a recorder of its
    decisions, a simulated clock over a real model, a batch row): the committed sequence, cache length,
    counters and capability are the inner backend's, and commit / rollback / append go straight to it."""

    def __init__(self, inner: Backend):
        self.inner = inner
        self.vocab_size = inner.vocab_size
        self.max_context = inner.max_context

    @property
    def tokens(self) -> list[int]:
        return self.inner.tokens

    @property
    def cache_len(self) -> int:
        return self.inner.cache_len

    @property
    def counters(self) -> Counters:
        return self.inner.counters

    def tree_refusal(self) -> str | None:
        return self.inner.tree_refusal()

    def commit(self, path: list[int], new_tokens: list[int]) -> None:
        self.inner.commit(path, new_tokens)

    def rollback(self, n: int) -> None:
        self.inner.rollback(n)

    def append(self, tokens: list[int]) -> None:
        self.inner.append(tokens)


class OpenPair(NamedTuple):
    """A pair as its kind opened it (`BackendKind.open_pair`): the backends, the tokenizer that decodes outputs (None:
    ids only), the end-of-sequence ids, and what the kind adds to the session: its own prompts for
    `dataset=synthetic` (`synthetic_prompts(n, seed)`: random ids mean nothing to a surrogate LM), `route(prompts)`
    (the prompts the session decodes, handed to the pair before it runs; returns its `note:` lines) and `margin`
    (the target's top-2 logit margin after a prefix, which a record's divergences cite)."""

    target: Backend
    draft: Backend | None
    tokenizer: Any
    eos_ids: tuple[int, ...]
    synthetic_prompts: Callable[[int, int], list[Any]] | None = None
    route: Callable[[list[Any]], list[str]] | None = None
    margin: Callable[[list[int]], float] | None = None


class BackendKind:
    """One backend kind a run names (`backend=<name>`): everything the core asks of it, so the core never branches
    on a kind's name and never imports a kind's modules. hf (`HF`, ouroboros/backends/hf.py) is the core's own; any
    other is a plugin declared under the `ouroboros.backends` entry points (the simulator's: simulators/plugin.py
    `SIM`), found by ouroboros/backends/registry.py. `run` is a `ouroboros.config.RunConfig`; a check raises
    `OuroborosError` with one line. The defaults suit a kind with nothing to add."""

    name: str = ""
    simulated = False           # a modelled clock (open-loop arrivals, load-aware drafts); False: the wall clock
    runs_peers = False          # transformers' own generate (the peer strategies) runs on its models
    model_tokenizer = False     # prompts are read with the model's own tokenizer (so a model without one reads none)
    batched_prefill = False     # serving: a joining prompt may ride in the next batched forward (the default there)
    stand_in = False            # a REST run naming no datastore retrieves from the kind's own (`stand_in_datastore`)
    config_groups: tuple[str, ...] = ()   # the run's groups besides model and backend that its numbers depend on
    model_kinds: tuple[str, ...] = ()     # model kinds only this kind runs (another kind refuses them) ...
    model_noun = ""                       # ... and what such a model is, in words

    def claims(self, model: dict[str, Any]) -> bool:
        """backend=auto: whether this model spec is one this kind runs (asked of plugins; hf runs the rest)."""
        return model.get("kind") in self.model_kinds

    def setup(self, run: Any) -> None:
        """Everything loading would refuse, checked without loading: the kind's own settings, the pair's fit."""

    def check_sampling(self, run: Any) -> None:
        """Sampling (temperature > 0) needs real next-token distributions."""

    def check_serve(self, run: Any) -> None:
        """serve.concurrency >= 1: what this kind cannot serve."""

    def check_strategy(self, run: Any) -> None:
        """Before the point is measured: its strategy can run on what decides the kind's tokens."""

    def check_serving(self, run: Any, session: Any, budgets: list[int]) -> None:
        """A served point (serve.concurrency >= 1) on the loaded session, before anything is measured."""

    def default_profile(self, run: Any, typed: set[str]) -> Any:
        """`run` with the kind's defaults for what the command line (`typed` keys) left open."""
        return run

    def notes(self, run: Any, typed: set[str]) -> list[str]:
        """The `note:` lines on settings that decide the numbers although the command line did not pick them."""
        return []

    def open_pair(self, run: Any, stand_in: bool = False) -> OpenPair:
        """Load the pair (`stand_in`: it serves a REST run on the kind's stand-in datastore)."""
        raise NotImplementedError

    def stand_in_datastore(self, run: Any) -> str:
        """The datastore file a REST run naming none retrieves from (kinds with `stand_in`)."""
        raise NotImplementedError

    def hardware(self, run: Any) -> dict[str, Any] | None:
        """What the clock measures, for the record: a modelled machine's profile; None: this machine."""
        return None

    def decisions(self, run: Any, prompts: int | None, budget: int | None = None) -> dict[str, Any] | None:
        """A record's `decisions` block (where its tokens come from, how far its numbers can be trusted) on a run of
        `prompts` prompts with `budget` new tokens in effect (None: the run's max_new_tokens); None: real models
        decide them."""
        return None

    def engine(self, backend: Backend, prefill: str) -> Any:
        """The batched-serving engine (ouroboros/serving/scheduler.py `Engine`) of a pair whose target is
        `backend`."""
        raise NotImplementedError
