"""Versioned JSON documents that outlive a run (Ouroboros' phrase pool, the suffix cache): written atomically,
read back with every failure as one OuroborosError line naming the file.

A document is {"format": F, "version": V, "meta": {...}, **body}; `meta` (e.g. {"vocab_size": V}) must equal the
reading run's on every key the reader passes."""

from __future__ import annotations

import json
import os
from typing import Any

from ouroboros.backends.base import OuroborosError


def write_doc(path: str, fmt: str, version: int, meta: dict[str, Any], body: dict[str, Any]) -> None:
    """Write atomically (temp file + rename)."""
    doc = {"format": fmt, "version": version, "meta": dict(meta), **body}
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.replace(tmp, path)


def read_doc(path: str, what: str, fmt: str, version: int, meta: dict[str, Any]) -> dict[str, Any]:
    """The document at `path`, checked for format, version and `meta`; `what` names the kind ("phrase pool")."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise OuroborosError(f"{what} file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
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
