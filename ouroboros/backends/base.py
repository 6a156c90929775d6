"""What every backend shares beyond the contract: the wall clock, the command-line error convention (`cli`,
`report_error`), the bookkeeping of a backend that computes its own forwards (`SequenceBackend`: hf and sim) and the
base of backends that wrap another (`BackendWrapper`). The protocol itself (`Backend`, `Scores`, `Counters`, `Clock`)
and `OuroborosError` live in `ouroboros/contracts.py` and are re-exported here.

Backends know nothing of strategies, verification rules, budgets or logging.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import ParamSpec

from ouroboros.contracts import Backend, Clock, Counters, OuroborosError, Scores

__all__ = ["Backend", "BackendWrapper", "Clock", "Counters", "OuroborosError", "Scores", "SequenceBackend",
           "WallClock", "cli", "report_error"]


_P = ParamSpec("_P")


def report_error(e: OuroborosError) -> int:
    """Print `error: <message>` to stderr; return the exit code (2) entry points use for a bad input."""
    print(f"error: {e}", file=sys.stderr)
    return 2


def cli(main: Callable[_P, int]) -> Callable[_P, int]:
    """Decorate a command-line `main(argv=None) -> int`: an `OuroborosError` it raises is printed as one
    `error: <message>` line on stderr and main returns 2; otherwise main's own return value is returned."""

    @functools.wraps(main)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except OuroborosError as e:
            return report_error(e)

    return wrapper


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
