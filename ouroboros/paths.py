"""Output paths checked before any work: `check_writable(path, what)` proves a file can be written there by
creating it (and any missing folders above it), then removes what it created, so a run that stops later on a
bad input leaves the file system as it found it.

Knows nothing of records, configs or models: callers name the option (`what`) for the one-line error.
"""

from __future__ import annotations

import os
from pathlib import Path

from ouroboros.backends.base import OuroborosError


def check_writable(path: str | os.PathLike, what: str) -> None:
    """Raise OuroborosError (one line, naming `what`) unless a file can be appended at `path`."""
    p = Path(path)
    if p.is_dir():
        raise OuroborosError(f"{what}: {str(path)!r} is a directory, not a file")
    made: list[Path] = []
    parent = p.parent
    while not parent.exists():
        made.append(parent)
        parent = parent.parent
    existed = p.exists()
    try:
        if not parent.is_dir():
            raise OuroborosError(f"{what}: cannot write {str(path)!r}: {str(parent)!r} is not a directory")
        for d in reversed(made):
            d.mkdir()
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.close(fd)
    except OSError as e:
        raise OuroborosError(f"{what}: cannot write {str(path)!r} ({e.strerror or type(e).__name__})") from None
    finally:
        if not existed:
            try:
                p.unlink(missing_ok=True)
            except OSError:
                pass
        for d in made:
            try:
                d.rmdir()
            except OSError:
                pass
