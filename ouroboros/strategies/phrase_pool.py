"""The phrase pool: n-gram phrases keyed by their first token, shared by lookahead, Ouroboros' drafter and its
lengthening / harvesting (arXiv 2402.13720, Sec. 3; the official code calls it the n-gram cache).

A phrase is stored as (key, tokens): `key` is the token the phrase follows, `tokens` the 1..N-1 tokens after
it, and it carries the source that last inserted it ("lookahead" = a Jacobi window's n-grams, "verify" =
harvested from a target verification, "corrected" = a lengthening branch corrected by the target's
predictions, "prompt" = n-grams of the prompt) plus the epoch (prompt index) of that insertion. A phrase
served in a later epoch than the one that inserted it reports the source "history" (history reuse).

Caps and eviction:
- per key: at most `per_key` phrases (the paper's G); inserting a known phrase, or `touch`-ing one that was
  used, refreshes it; the least recently refreshed phrase of the key goes first (as the official code's
  per-key list does).
- global: at most `max_phrases` phrases and `max_bytes` bytes, where a phrase weighs TOKEN_BYTES per stored
  token (key included): the compact int32 size, the size a C implementation or the saved file would hold.
  Policy: global LRU over refresh time. Why: in decoding, reuse is strongly recency-driven (the phrases of the
  file or answer being written now), refresh-on-reuse already tracks that, LRU is O(1) per operation with an
  OrderedDict, and LFU would pin phrases of long-gone prompts. The paper has no global cap. (The OrderedDict is
  kept only under a cap; without one, global recency is a per-phrase refresh stamp, sorted when saving.)

Save / load: a versioned JSON document (format FORMAT, version VERSION), phrases oldest -> newest so a
reload restores the recency order. A missing, corrupt or incompatible file raises OuroborosError (one
line) unless the caller passes `on_error="empty"`, in which case the pool stays empty and the reason is
returned.

Worked example (golden): per_key=2;  add(5, [1, 2]); add(5, [3]); add(5, [1, 2]) (refresh); add(5, [4])
-> key 5 holds [4], [1, 2] (newest first): [3] was the least recently refreshed and is evicted.

This module knows nothing of models, drafts or verification; it stores and returns phrases.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, NamedTuple

from ouroboros.errors import OuroborosError
from ouroboros.strategies.saved import read_doc, write_doc

FORMAT = "ouroboros-phrase-pool"
VERSION = 1
SOURCES = ("lookahead", "verify", "corrected", "prompt")  # insertion sources; "history" is derived on lookup
HISTORY = "history"
TOKEN_BYTES = 4  # int32 per stored token, key included


class Phrase(NamedTuple):
    tokens: tuple[int, ...]
    source: str             # effective source: the inserting source, or "history" if inserted in an earlier epoch


def phrase_bytes(tokens: tuple[int, ...]) -> int:
    return TOKEN_BYTES * (1 + len(tokens))


class PhrasePool:
    def __init__(self, per_key: int = 20, max_phrases: int = 0, max_bytes: int = 0):
        """per_key >= 1; max_phrases / max_bytes = 0 means no global cap."""
        if per_key < 1:
            raise OuroborosError(f"phrase pool per_key must be >= 1, got {per_key}")
        if max_phrases < 0 or max_bytes < 0:
            raise OuroborosError("phrase pool caps must be >= 0 (0 = no cap)")
        self.per_key = per_key
        self.max_phrases = max_phrases
        self.max_bytes = max_bytes
        self.epoch = 0
        self.n_bytes = 0
        self.evicted = 0
        self._n = 0        # phrases held
        self._stamp = 0    # refresh counter: an entry's stamp orders it in the global recency order
        # key -> {tokens: entry [source, epoch, stamp]}, oldest refresh first (plain dicts keep insertion order;
        # refresh = pop + insert)
        self._by_key: dict[int, dict[tuple[int, ...], list[Any]]] = {}
        # (key, tokens) -> the same entry, global LRU order (oldest first): kept only under a global cap, where
        # eviction needs the globally oldest phrase in O(1); without one, recency is the entries' stamps.
        self._lru: OrderedDict[tuple[int, tuple[int, ...]], list[Any]] | None = (
            OrderedDict() if max_phrases or max_bytes else None)

    # ------------------------------------------------------------------ queries
    def __len__(self) -> int:
        return self._n

    def __contains__(self, item: tuple[int, tuple[int, ...]]) -> bool:
        bucket = self._by_key.get(item[0])
        return bucket is not None and item[1] in bucket

    def lookup(self, key: int, k: int) -> list[Phrase]:
        """Up to k phrases that follow `key`, most recently refreshed first. Does not refresh."""
        bucket = self._by_key.get(key)
        if not bucket or k <= 0:
            return []
        out: list[Phrase] = []
        epoch, new = self.epoch, tuple.__new__
        for toks, ent in reversed(bucket.items()):
            out.append(new(Phrase, (toks, ent[0] if ent[1] == epoch else HISTORY)))  # Phrase(toks, src), C-level
            if len(out) == k:
                break
        return out

    def _entries(self) -> list[tuple[int, tuple[int, ...], list[Any]]]:
        """(key, tokens, entry), oldest -> newest refresh."""
        out = [(k, t, e) for k, bucket in self._by_key.items() for t, e in bucket.items()]
        out.sort(key=lambda x: x[2][2])
        return out

    def items(self) -> list[tuple[int, tuple[int, ...], str]]:
        """(key, tokens, effective source), oldest -> newest refresh."""
        return [(k, t, e[0] if e[1] == self.epoch else HISTORY) for k, t, e in self._entries()]

    def size_by_source(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for bucket in self._by_key.values():
            for s, e, _ in bucket.values():
                src = s if e == self.epoch else HISTORY
                out[src] = out.get(src, 0) + 1
        return out

    # ------------------------------------------------------------------ updates
    def new_epoch(self) -> None:
        """A new prompt starts: everything inserted so far is served as "history" from now on."""
        self.epoch += 1

    def clear(self) -> None:
        self._by_key.clear()
        if self._lru is not None:
            self._lru.clear()
        self.n_bytes = 0
        self._n = 0

    def add(self, key: int, tokens, source: str) -> bool:
        """Insert (or refresh) a phrase. Returns True when it was new. Empty phrases are ignored."""
        toks = tuple(tokens)
        if not toks:
            return False
        lru = self._lru
        bucket = self._by_key.get(key)
        self._stamp += 1
        if bucket is None:
            bucket = self._by_key[key] = {}
        else:
            ent = bucket.get(toks)
            if ent is not None:  # known: refresh
                ent[0], ent[1], ent[2] = source, self.epoch, self._stamp
                del bucket[toks]
                bucket[toks] = ent
                if lru is not None:
                    lru.move_to_end((key, toks))
                return False
        bucket[toks] = ent = [source, self.epoch, self._stamp]
        self._n += 1
        self.n_bytes += TOKEN_BYTES * (1 + len(toks))  # phrase_bytes(toks)
        if lru is not None:
            lru[(key, toks)] = ent
        if len(bucket) > self.per_key:  # evict the key's least recently refreshed phrase (= _drop, inlined)
            old = next(iter(bucket))
            del bucket[old]
            self._n -= 1
            self.n_bytes -= TOKEN_BYTES * (1 + len(old))
            self.evicted += 1
            if lru is not None:
                del lru[(key, old)]
                self._enforce_global()
        elif lru is not None:
            self._enforce_global()
        return True

    def touch(self, key: int, tokens) -> None:
        """Refresh a phrase that was just reused (no-op if it is gone)."""
        toks = tuple(tokens)
        bucket = self._by_key.get(key)
        if bucket is not None and toks in bucket:
            self._stamp += 1
            bucket[toks] = ent = bucket.pop(toks)
            ent[2] = self._stamp
            if self._lru is not None:
                self._lru.move_to_end((key, toks))

    def remove(self, key: int, tokens) -> bool:
        toks = tuple(tokens)
        if (key, toks) not in self:
            return False
        self._drop(key, toks, evicted=False)
        return True

    def _drop(self, key: int, toks: tuple[int, ...], evicted: bool = True) -> None:
        bucket = self._by_key[key]
        del bucket[toks]
        if not bucket:
            del self._by_key[key]
        if self._lru is not None:
            del self._lru[(key, toks)]
        self._n -= 1
        self.n_bytes -= phrase_bytes(toks)
        self.evicted += evicted

    def _enforce_global(self) -> None:
        lru, mp, mb = self._lru, self.max_phrases, self.max_bytes
        assert lru is not None
        while (mp and self._n > mp) or (mb and self.n_bytes > mb):
            key, toks = next(iter(lru))
            self._drop(key, toks)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str, meta: dict[str, Any] | None = None) -> None:
        """Write atomically (temp file + rename). `meta` (e.g. {"vocab_size": V}) is checked on load."""
        write_doc(path, FORMAT, VERSION, meta or {}, {"phrases": [[k, list(t), e[0]] for k, t, e in self._entries()]})

    def load(self, path: str, meta: dict[str, Any] | None = None, on_error: str = "raise") -> str | None:
        """Add the phrases of a saved pool (as history: epoch -1), keeping this pool's caps. Returns None on
        success, or the reason the pool stayed unchanged when on_error="empty"; raises OuroborosError
        otherwise. `meta` entries must equal the saved ones (e.g. the vocabulary size)."""
        if on_error not in ("raise", "empty"):
            raise OuroborosError(f"phrase pool on_error must be 'raise' or 'empty', got {on_error!r}")
        try:
            entries = _read(path, meta or {})
        except OuroborosError as e:
            if on_error == "raise":
                raise
            return str(e)
        for key, toks, src in entries:
            self.add(key, toks, src)
            ent = self._by_key.get(key, {}).get(toks)
            if ent is not None:  # (a cap smaller than one phrase evicts it at once)
                ent[1] = -1
        return None


def read_pool(path: str) -> int:
    """Parse a saved pool (no vocabulary check); its number of phrases. OuroborosError (one line) if bad."""
    return len(_read(path, {}))


def _read(path: str, meta: dict[str, Any]) -> list[tuple[int, tuple[int, ...], str]]:
    """Parse and validate a saved pool; every failure is one OuroborosError line naming the file."""
    doc = read_doc(path, "phrase pool", FORMAT, VERSION, meta)
    vocab = meta.get("vocab_size")
    out = []
    phrases = doc.get("phrases")
    if not isinstance(phrases, list):
        raise OuroborosError(f"phrase pool file {path} is corrupt: no phrase list")
    for i, ent in enumerate(phrases):
        ok = (isinstance(ent, list) and len(ent) == 3 and isinstance(ent[0], int) and isinstance(ent[1], list)
              and len(ent[1]) > 0 and all(isinstance(t, int) for t in ent[1]) and ent[2] in SOURCES)
        if ok and vocab is not None:
            ok = 0 <= ent[0] < vocab and all(0 <= t < vocab for t in ent[1])
        if not ok:
            raise OuroborosError(f"phrase pool file {path} is corrupt: bad entry #{i}")
        out.append((ent[0], tuple(ent[1]), ent[2]))
    return out
