"""Output paths checked before any work: `check_writable(path, what)` proves a file can be written there by
creating it (and any missing folders above it), then removes what it created, so a run that stops later on a
bad input leaves the file system as it found it; a device or a pipe is refused (writing /dev/full never ends
well). `check_distinct` refuses two outputs of one run that are the same file (one would wipe the other).

Knows nothing of records, configs or models: callers name the option (`what`) for the one-line error. Also where
the user's cache lives (`default_cache_dir`: fetched models, recorded runs, workloads), and `slug`, a name made
safe for a file name (figures, answer files).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from ouroboros.errors import OuroborosError


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/ouroboros`, else `~/.cache/ouroboros` (the user's cache directory)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ouroboros"


def check_writable(path: str | os.PathLike, what: str) -> None:
    """Raise OuroborosError (one line, naming `what`) unless a file can be appended at `path`."""
    p = Path(path)
    if p.is_dir():
        raise OuroborosError(f"{what}: {str(path)!r} is a directory, not a file")
    check_regular(path, what)
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


def check_regular(path: str | os.PathLike, what: str, note: str = "") -> None:
    """Raise OuroborosError (one line, ending in `note`) when `path` exists and is not a regular file (a device, a
    pipe, a socket)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        kind = "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a pipe or socket"
        raise OuroborosError(f"{what}: {str(path)!r} is {kind}, not a regular file{note}")


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two paths name one file: equal once resolved (links followed, whether or not they exist yet), or
    hard links to one inode."""
    if Path(a).resolve() == Path(b).resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_distinct(outputs: Sequence[tuple[str, str | os.PathLike | None]]) -> None:
    """Raise OuroborosError (one line) when two of the named outputs (option, path; empty paths skipped) are one
    file: the later writer would wipe what the other wrote."""
    named = [(what, p) for what, p in outputs if p]
    for i, (w1, p1) in enumerate(named):
        for w2, p2 in named[i + 1:]:
            if same_file(p1, p2):
                raise OuroborosError(f"{w1} and {w2} are the same file {str(p1)!r}: each would overwrite the other; "
                                     "give them different paths")


def inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether `path` is `folder` or lies under it (resolved)."""
    p, f = Path(path).resolve(), Path(folder).resolve()
    return p == f or f in p.parents


def check_not_inputs(outputs: Iterable[str | os.PathLike], inputs: Iterable[str | os.PathLike], what: str) -> None:
    """Raise OuroborosError (one line, naming `what`) when a file about to be written is one of the input files."""
    ins = list(inputs)
    for out in outputs:
        hit = next((i for i in ins if same_file(out, i)), None)
        if hit is not None:
            raise OuroborosError(f"{what}: writing {str(out)!r} would overwrite the input {str(hit)!r}; pick another "
                                 "folder")


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


def slug(text: str) -> str:
    """`text` as a piece of a file name: runs of anything but letters, digits and `_.=-` become one `_` (at most 60
    characters)."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")[:60]
