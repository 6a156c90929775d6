"""What every backend shares beyond the contract: the wall clock and the command-line error convention (`cli`,
`report_error`). The protocol itself (`Backend`, `Scores`, `Counters`, `Clock`) and `OuroborosError` live in
`ouroboros/contracts.py` and are re-exported here.

Backends know nothing of strategies, verification rules, budgets or logging.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from typing import ParamSpec

from ouroboros.contracts import Backend, Clock, Counters, OuroborosError, Scores

__all__ = ["Backend", "BackendWrapper", "Clock", "Counters", "OuroborosError", "Scores", "WallClock", "cli",
           "report_error"]


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

    def __init__(self, cuda: bool = False):
        self.cuda = cuda

    def now(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()


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
