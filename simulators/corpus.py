"""The surrogates' text: an embedded corpus (Python standard-library source for "code" / "pycode", the interpreter's
help topics for "prose"; no download), the surrogate's tokenizers (its own pieces, or the pair's real one) and the
back-off n-gram table the surrogate target writes from. Knows nothing of models, clocks or strategies.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from collections import Counter
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from ouroboros.errors import OuroborosError
from simulators.simconfig import CORPORA

EOS_ID = 0
_PIECE = re.compile(r"[A-Za-z_]+|[0-9]+| +|\n|.", re.DOTALL)
# pieces="bpe": words carry their leading space, as GPT-2-style pre-tokenizers (and Qwen's) split text; an indent
# run keeps all but its last space, which joins the next word (" return"), so code and prose get about as many
# tokens per character as a real tokenizer gives (sim.pieces; simulators/tokens.py measures the real ratio).
_PIECE_BPE = re.compile(r" ?[A-Za-z_]+| ?[0-9]+| ?[^\sA-Za-z_0-9]| +(?!\S)| +|\n|.", re.DOTALL)
PIECE_STYLES = {"words": _PIECE, "bpe": _PIECE_BPE}

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


class PieceTokenizer:
    """Words, digit runs, space runs and single characters; the `vocab_size` most frequent pieces of the
    corpus get ids (id 0 = EOS), any other text falls back to its characters (non-ASCII -> '?'). No chat
    template: real datasets (humaneval, mtbench, specbench, jsonl) on the `sim` backend are their plain text."""

    real_ids = False   # ids are the surrogate's own (RealTokenizer: the pair's real ids)
    eos_id = EOS_ID

    def __init__(self, text: str, vocab_size: int, style: str = "words"):
        chars = [chr(c) for c in range(32, 127)] + ["\n", "\t"]
        if vocab_size < len(chars) + 2:
            raise OuroborosError(f"surrogate vocab must be >= {len(chars) + 2}, got {vocab_size}")
        if style not in PIECE_STYLES:
            raise OuroborosError(f"surrogate pieces must be one of {', '.join(PIECE_STYLES)}, got {style!r}")
        self.piece_re = PIECE_STYLES[style]
        counts = Counter(p for p in self.piece_re.findall(text) if len(p) > 1)
        top = [p for p, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: vocab_size - 1 - len(chars)]]
        self.pieces = ["<|eos|>"] + chars + top
        self.ids = {p: i for i, p in enumerate(self.pieces)}
        self.vocab_size = self.plain_vocab = len(self.pieces)

    def piece_id(self, piece: str) -> int | None:
        return self.ids.get(piece)

    def encode(self, text: str) -> list[int]:
        out, ids, q = [], self.ids, self.ids["?"]
        for p in self.piece_re.findall(text):
            i = ids.get(p)
            if i is not None:
                out.append(i)
            else:
                out.extend(ids.get(c, q) for c in p)
        return out

    def decode(self, ids: list[int]) -> str:
        return "".join(self.pieces[i] if 0 < i < len(self.pieces) else "" for i in ids)

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        """As a transformers tokenizer is called (the dataset loaders tokenize real prompts this way on `sim`);
        there are no special tokens to add."""
        return {"input_ids": self.encode(text)}


class RealTokenizer:
    """The pair's own tokenizer as the surrogate's (`sim.pieces=real`): the surrogate target then reads and writes
    REAL token ids, so real prompts, REST datastores and the real pair's traces need no mapping, and which tokens
    a datastore or a prompt shares with the surrogate's text is what the real tokenizer makes of them. Ids below
    `plain_vocab` are ordinary tokens; the added special tokens above it are never produced (EOS = the
    tokenizer's own)."""

    real_ids = True

    def __init__(self, path: str):
        from transformers import AutoTokenizer

        try:
            self.tok = AutoTokenizer.from_pretrained(path)
        except (OSError, ValueError) as e:
            raise OuroborosError(f"sim.pieces=real: cannot load the tokenizer in {path!r}: "
                                 f"{str(e).splitlines()[0]}") from None
        self.vocab_size = len(self.tok)
        added = list(getattr(self.tok, "added_tokens_decoder", {}) or {})
        self.plain_vocab = min(added) if added else self.vocab_size
        eos = self.tok.eos_token_id
        self.eos_id = int(eos) if eos is not None else self.plain_vocab
        self.chat_template = getattr(self.tok, "chat_template", None)

    def piece_id(self, piece: str) -> int | None:
        ids = self.encode(piece)
        return ids[0] if len(ids) == 1 else None

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int], **kw: Any) -> str:
        return str(self.tok.decode(ids))

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)}

    def apply_chat_template(self, messages: Any, **kw: Any) -> Any:
        return self.tok.apply_chat_template(messages, **kw)


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
    ids = load_corpus(kind, vocab_size, style, tokenizer_dir).ids
    table: dict[tuple[int, ...], tuple[int, ...]] = {}
    for n in range(1, order + 1):
        counts = Counter(zip(*(ids[i:] for i in range(n + 1)), strict=False))  # (n + 1)-gram -> count
        lists: dict[tuple[int, ...], list[int]] = {}
        for g, _ in sorted(counts.items(), key=itemgetter(1), reverse=True):  # ties: first seen first
            lst = lists.setdefault(g[:-1], [])
            if len(lst) < top:
                lst.append(g[-1])
        table.update((k, tuple(v)) for k, v in lists.items())
    return table
