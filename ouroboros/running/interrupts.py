"""Stopping a measurement cleanly: Ctrl-C or SIGTERM becomes `Interrupted(records appended)`, and the few writes
that must land whole (a record and its wandb run) hold the signal until they are done.

Knows nothing of what is measured; the command line (ouroboros.cli) turns `Interrupted` into its message.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Protocol


class Counts(Protocol):
    recorded: int     # records appended so far


class Interrupted(Exception):
    """Ctrl-C or SIGTERM stopped the measurement after `recorded` records were appended."""

    def __init__(self, recorded: int):
        super().__init__(recorded)
        self.recorded = recorded


@contextlib.contextmanager
def counted(ex: Counts) -> Iterator[None]:
    """Turn a Ctrl-C (KeyboardInterrupt) into `Interrupted(records appended by ex)`."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(ex.recorded) from None


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT / SIGTERM until the block ends, then raise KeyboardInterrupt (main thread only; elsewhere the
    signals cannot be caught anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if got:
        raise KeyboardInterrupt
