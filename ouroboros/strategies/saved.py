"""Versioned JSON documents that outlive a run (Ouroboros' phrase pool, the suffix cache): written atomically,
read back with every failure as one OuroborosError line naming the file.

A document is {"format": F, "version": V, "meta": {...}, **body}; `meta` (e.g. {"vocab_size": V}) must equal the
reading run's on every key the reader passes. `check_save` is the check before any work: the path can be written
and holds nothing but a document of the same format (saving onto a records file, a dataset or another kind of
document would wipe it)."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from ouroboros.errors import OuroborosError
from ouroboros.paths import check_regular, check_writable

_FORMAT = re.compile(rb'\s*\{\s*"format"\s*:\s*"([^"\\]*)"')


def write_doc(path: str, fmt: str, version: int, meta: dict[str, Any], body: dict[str, Any]) -> None:
    """Write atomically (temp file + rename), making missing folders; a failure (a full disk, ...) is one
    OuroborosError line and leaves the previous document as it was, and no temp file."""
    doc = {"format": fmt, "version": version, "meta": dict(meta), **body}
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, separators=(",", ":"))
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise OuroborosError(f"cannot save {fmt} file {path!r} ({e.strerror or type(e).__name__}); the previous "
                             "file, if any, is unchanged") from None


def read_doc(path: str, what: str, fmt: str, version: int, meta: dict[str, Any]) -> dict[str, Any]:
    """The document at `path`, checked for format, version and `meta`; `what` names the kind ("phrase pool")."""
    check_regular(path, f"{what} file")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise OuroborosError(f"{what} file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise OuroborosError(f"{what} file {path} is unreadable or corrupt ({type(e).__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise OuroborosError(f"{path} is not a {what} file (format {fmt!r} expected)")
    if doc.get("version") != version:
        raise OuroborosError(f"{what} file {path} has version {doc.get('version')!r}; this build reads {version}")
    saved: dict[str, Any] = doc["meta"] if isinstance(doc.get("meta"), dict) else {}
    for k, v in meta.items():
        if saved.get(k) != v:
            raise OuroborosError(f"{what} file {path} is incompatible: {k}={saved.get(k)!r}, this run has {v!r}")
    return doc


def check_save(path: str, what: str, kind: str, fmt: str) -> None:
    """Raise OuroborosError (one line, naming the option `what`) unless `path` can be written and is new, empty or
    already a `kind` document (format `fmt`: a save path may be the file the run loads)."""
    check_writable(path, what)
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:   # not there yet (check_writable proved it can be made)
        return
    if not head.strip():
        return
    m = _FORMAT.match(head)
    if m is None or m.group(1).decode("utf-8", "replace") != fmt:
        held = f"it holds a {m.group(1).decode('utf-8', 'replace')!r} document" if m else "not a saved document"
        raise OuroborosError(f"{what}: {path!r} exists and is not a {kind} file ({held}): saving would overwrite "
                             "it; remove it or pick another path")
