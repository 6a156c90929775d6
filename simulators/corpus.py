"""The surrogates' text: an embedded corpus (Python standard-library source for "code" / "pycode", the interpreter's
help topics for "prose"; no download) and the back-off n-gram table the surrogate target writes from (its tokenizers,
its own pieces or the pair's real one, are simulators/tokens.py's). Knows nothing of models, clocks or strategies.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections import Counter
from dataclasses import dataclass
from operator import itemgetter

from ouroboros.errors import OuroborosError
from simulators.simconfig import CORPORA
from simulators.tokens import PIECE_STYLES, PieceTokenizer, RealTokenizer

# Standard-library modules whose source makes the "code" corpus (about 0.5 MB; stable, plain Python).
CODE_MODULES = ("argparse", "bisect", "calendar", "configparser", "contextlib", "copy", "csv", "dataclasses",
                "difflib", "fractions", "functools", "heapq", "ipaddress", "json.decoder", "json.encoder",
                "operator", "pprint", "queue", "shlex", "statistics", "string", "textwrap")
# The "pycode" corpus (about 0.55 MB): modules of standard-library PACKAGES only, so it shares no file with a
# datastore of the top-level modules (the REST datastore of docs/simulator-fidelity.md): a surrogate writing
# "code" must not be reciting the retrieval corpus it is checked against.
PACKAGE_MODULES = ("json", "logging", "concurrent.futures._base", "concurrent.futures.thread", "email.message",
                   "email.utils", "email.feedparser", "http.cookies", "urllib.parse", "unittest.case",
                   "tomllib._parser", "zoneinfo._zoneinfo", "wsgiref.handlers", "html.parser", "collections",
                   "asyncio.tasks", "asyncio.queues", "importlib.metadata")


# REST's stand-in datastore (simulators/stand_in.py) holds text the surrogate target does not write, as a real
# datastore is not the target's own text: a code corpus gets the other one's modules (a "pycode" target against the
# top-level modules is the pairing of docs/simulator-fidelity.md), and "prose", which no other prose text of the
# standard library matches, the docstrings of both code corpora's modules (English, apart from the help topics).
STAND_INS = {"code": "pycode", "pycode": "code", "prose": "docstrings"}
STAND_IN_WORDS = {"code": "stdlib top-level modules' source", "pycode": "stdlib package modules' source",
                  "docstrings": "docstrings of the stdlib modules of the code and pycode corpora"}


def module_sources(names: tuple[str, ...]) -> list[str]:
    parts = []
    for name in names:
        path = inspect.getsourcefile(importlib.import_module(name))
        if path:
            with open(path, encoding="utf-8") as f:
                parts.append(f.read())
    return parts


def module_docstrings(name: str) -> str:
    """A module's docstring and those of its public classes, functions and methods (defined there), in name order."""
    mod = importlib.import_module(name)
    docs = [inspect.getdoc(mod)]
    for attr, obj in sorted(vars(mod).items()):
        if attr.startswith("_") or getattr(obj, "__module__", None) != name:
            continue
        docs.append(inspect.getdoc(obj))
        if inspect.isclass(obj):
            docs += [inspect.getdoc(f) for m, f in sorted(vars(obj).items()) if not m.startswith("_") and callable(f)]
    return "\n\n".join(d for d in docs if d)


@functools.cache
def stand_in_docs(kind: str) -> tuple[str, list[str]]:
    """(what it is, its documents): the text of REST's stand-in datastore beside the surrogate corpus `kind`
    (`STAND_INS`), one document per module."""
    other = STAND_INS.get(kind)
    if other is None:
        raise OuroborosError(f"unknown surrogate corpus {kind!r}; known: {', '.join(CORPORA)}")
    if other == "docstrings":
        docs = [d for d in map(module_docstrings, CODE_MODULES + PACKAGE_MODULES) if d]
    else:
        docs = module_sources(CODE_MODULES if other == "code" else PACKAGE_MODULES)
    return f"{other} ({STAND_IN_WORDS[other]}, {len(docs)} modules)", docs


@functools.cache
def corpus_text(kind: str) -> str:
    if kind in ("code", "pycode"):
        return "\n\n".join(module_sources(CODE_MODULES if kind == "code" else PACKAGE_MODULES))
    if kind == "prose":
        from pydoc_data.topics import topics

        return "\n\n".join(topics[k] for k in sorted(topics))[:600_000]
    raise OuroborosError(f"unknown surrogate corpus {kind!r}; known: {', '.join(CORPORA)}")


@dataclass
class Corpus:
    kind: str
    tokenizer: PieceTokenizer | RealTokenizer
    ids: list[int]


@functools.cache
def load_corpus(kind: str, vocab_size: int, style: str = "words", tokenizer_dir: str | None = None) -> Corpus:
    """The corpus `kind` in the surrogate's pieces (`style` words / bpe: `vocab_size` pieces of it), or with
    style "real" in the real ids of the tokenizer in `tokenizer_dir` (vocab_size is then unused)."""
    if style not in (*PIECE_STYLES, "real"):
        raise OuroborosError(f"surrogate pieces must be one of {', '.join(PIECE_STYLES)}, real; got {style!r}")
    text = corpus_text(kind)
    if style == "real":
        if not tokenizer_dir:
            raise OuroborosError("sim.pieces=real needs the pair's tokenizer (a fetched pair, or sim.tokenizer=<dir>)")
        real = RealTokenizer(tokenizer_dir)
        return Corpus(kind, real, real.encode(text))
    tok = PieceTokenizer(text, vocab_size, style)
    return Corpus(kind, tok, tok.encode(text))


@functools.cache
def prompt_starts(kind: str, vocab_size: int, max_len: int, style: str = "words",
                  tokenizer_dir: str | None = None) -> list[int]:
    """Where prompts may start in a corpus: at each `def` (code), else every 97 tokens."""
    corpus = load_corpus(kind, vocab_size, style, tokenizer_dir)
    ids, tok = corpus.ids, corpus.tokenizer
    defs = {i for i in (tok.piece_id("def"), tok.piece_id(" def")) if i is not None}
    starts = [i for i in range(len(ids) - max_len) if ids[i] in defs]
    return starts or list(range(0, len(ids) - max_len, 97))


@functools.cache
def ngram_table(kind: str, vocab_size: int, order: int, top: int, style: str = "words",
                tokenizer_dir: str | None = None) -> dict[tuple[int, ...], tuple[int, ...]]:
    """context (1..order tokens) -> its `top` most frequent next tokens (ties: first seen in the corpus first)."""
    table: dict[tuple[int, ...], tuple[int, ...]] = {}
    for n in range(1, order + 1):   # contexts of different lengths: no level overwrites another
        table.update(_ngram_level(kind, vocab_size, n, top, style, tokenizer_dir))
    return table


@functools.cache
def _ngram_level(kind: str, vocab_size: int, n: int, top: int, style: str,
                 tokenizer_dir: str | None) -> dict[tuple[int, ...], tuple[int, ...]]:
    """`ngram_table`'s contexts of exactly n tokens (cached apart: tables of different orders share them)."""
    ids = load_corpus(kind, vocab_size, style, tokenizer_dir).ids
    counts = Counter(zip(*(ids[i:] for i in range(n + 1)), strict=False))  # (n + 1)-gram -> count
    lists: dict[tuple[int, ...], list[int]] = {}
    for g, _ in sorted(counts.items(), key=itemgetter(1), reverse=True):  # ties: first seen first
        lst = lists.setdefault(g[:-1], [])
        if len(lst) < top:
            lst.append(g[-1])
    return {k: tuple(v) for k, v in lists.items()}
