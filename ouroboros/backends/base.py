"""The backend protocol every scorer implements (`hf`: real transformers models; `sim`: the simulator).

A backend owns one model's committed sequence and its KV state. Convention: the cache holds every committed
token but the last one(s) ("pending"); `score(draft)` feeds the pending tokens followed by the draft nodes in
ONE forward, so its first prediction is the next token after the committed sequence (the tree's root) and
prediction i + 1 is the next token after draft node i. `commit` keeps the accepted nodes' state, drops the
rest, and appends the new tokens; `rollback` forgets the last n committed tokens; `append` commits tokens
without computing them (they become pending). `tree_refusal()` is None when the backend scores any tree
exactly, else the reason it scores chains only.

Backends know nothing of strategies, verification rules, budgets or logging.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, runtime_checkable

from ouroboros.draft import Draft


class OuroborosError(ValueError):
    """A bad input or configuration. Entry points print its message as one line and exit non-zero."""


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
    def now(self) -> float: ...


class WallClock:
    """perf_counter, synchronising CUDA first when a CUDA device is in use (so queued kernels are counted)."""

    def __init__(self, cuda: bool = False):
        self.cuda = cuda

    def now(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()


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
