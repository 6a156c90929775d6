"""Output paths checked before any work: `check_writable(path, what)` proves a file can be written there by
creating it (and any missing folders above it), then removes what it created, so a run that stops later on a
bad input leaves the file system as it found it.

Knows nothing of records, configs or models: callers name the option (`what`) for the one-line error. Also where
the user's cache lives (`default_cache_dir`: fetched models, recorded runs, workloads).
"""

from __future__ import annotations

import os
from pathlib import Path

from ouroboros.backends.base import OuroborosError


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/ouroboros`, else `~/.cache/ouroboros` (the user's cache directory)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ouroboros"


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


def check_out_dir(path: str | os.PathLike, what: str) -> None:
    """Raise OuroborosError (one line, naming `what`) unless `path` is, or can be made, a folder files can be written
    in; proved by making it (and any missing folders above it) and a probe file, then removing what it made."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OuroborosError(f"{what}: {str(path)!r} is a file, not a folder")
    made: list[Path] = []
    parent = p
    while not parent.exists():
        made.append(parent)
        parent = parent.parent
    try:
        if not parent.is_dir():
            raise OuroborosError(f"{what}: cannot make {str(path)!r}: {str(parent)!r} is not a folder")
        for d in reversed(made):
            d.mkdir()
        probe = p / ".ouroboros-write-probe"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.close(fd)
        probe.unlink()
    except OSError as e:
        raise OuroborosError(f"{what}: cannot write in {str(path)!r} ({e.strerror or type(e).__name__})") from None
    finally:
        for d in made:
            try:
                d.rmdir()
            except OSError:
                pass
