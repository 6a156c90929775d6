"""REST datastore (He et al. 2024, "REST: Retrieval-Based Speculative Decoding"): a token corpus indexed by a
suffix array, queried with the longest suffix of the current context; the continuations of its occurrences
are merged into a token tree (a count trie; the most frequent nodes are kept).

Index: the suffix array of the REVERSED corpus (documents joined with the separator -1). A context suffix
read backwards is a prefix of a reversed suffix, so extending the match by one more context token only
narrows the current suffix-array range (one binary search per token): the longest match costs
O(max_suffix * log n), with no rescans. Built with numpy prefix doubling (O(n log^2 n)); no suffix-array
library on PyPI is both maintained and needed for corpora of this size.

Worked examples (golden):
    corpus [[1, 2, 3, 1, 2, 4]]: context [..., 1, 2] -> longest match 2 tokens, continuations [3, 1, 2, 4], [4]
    continuation_tree([[3, 1], [3, 2], [4]], num_nodes=3) -> tokens [3, 1, 4], parents [-1, 0, -1]
    (counts: 3 -> 2, 4 -> 1, 3.1 -> 1, 3.2 -> 1; the three best with ties broken by depth, then first seen;
    emitted depth-first along the most frequent child, so the trunk is the most frequent path).

File format (`save` / `load`): .npz with format, version, tokens (int32, -1 separators), sa_rev (int64).
Builder command (ouroboros/rest_datastore.py):  python -m ouroboros.rest_datastore --out ds.npz
(--tokens FILE | --text FILE --tokenizer DIR)

This module knows nothing of drafts' verification, models or tokenizers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ouroboros.errors import OuroborosError

FORMAT = "ouroboros-rest-datastore"
VERSION = 1
SEP = -1


def suffix_array(x: np.ndarray) -> np.ndarray:
    """Suffix array of an int array (values >= -1) by prefix doubling. Golden: [2, 1, 2, 1] -> [3, 1, 2, 0]."""
    n = len(x)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    rank = x.astype(np.int64) + 1  # >= 0; "past the end" ranks as -1 (shorter suffix sorts first)
    k = 1
    while True:
        second = np.full(n, -1, dtype=np.int64)
        if k < n:
            second[: n - k] = rank[k:]
        sa = np.lexsort((second, rank))  # primary key: rank
        r, s = rank[sa], second[sa]
        new_rank = np.empty(n, dtype=np.int64)
        new_rank[sa] = np.concatenate(([0], np.cumsum((r[1:] != r[:-1]) | (s[1:] != s[:-1]))))
        rank = new_rank
        if rank[sa[-1]] == n - 1 or k >= n:
            return sa.astype(np.int64)
        k *= 2


@dataclass
class Datastore:
    tokens: np.ndarray   # int32 [n]: documents joined by SEP
    sa_rev: np.ndarray   # int64 [n]: suffix array of tokens[::-1]
    _pad: np.ndarray | None = field(default=None, repr=False, compare=False)  # tokens + SEP padding (lazy)

    @classmethod
    def build(cls, docs: list[list[int]]) -> Datastore:
        parts: list[int] = []
        for d in docs:
            if parts:
                parts.append(SEP)
            parts.extend(int(t) for t in d)
        toks = np.asarray(parts, dtype=np.int32)
        if toks.size and toks.min() < SEP:
            raise OuroborosError("REST corpus holds a negative token id")
        return cls(toks, suffix_array(toks[::-1].copy()))

    @property
    def max_token(self) -> int:
        return int(self.tokens.max()) if self.tokens.size else -1

    def save(self, path: str) -> None:
        with open(path, "wb") as f:
            np.savez(f, format=np.array(FORMAT), version=np.array(VERSION), tokens=self.tokens, sa_rev=self.sa_rev)

    @classmethod
    def load(cls, path: str) -> Datastore:
        try:
            with np.load(path, allow_pickle=False) as z:
                fmt, ver = str(z["format"]), int(z["version"])
                toks, sa = z["tokens"], z["sa_rev"]
        except FileNotFoundError:
            raise OuroborosError(f"REST datastore {path} does not exist (build one: python -m ouroboros.rest_datastore)"
                                 ) from None
        except (OSError, ValueError, KeyError) as e:
            raise OuroborosError(f"REST datastore {path} is unreadable or corrupt ({type(e).__name__})") from None
        if fmt != FORMAT or ver != VERSION:
            raise OuroborosError(f"{path} is not a REST datastore of version {VERSION} (format {fmt!r}, version {ver})")
        if toks.ndim != 1 or sa.shape != toks.shape:
            raise OuroborosError(f"REST datastore {path} is corrupt (array shapes differ)")
        return cls(toks.astype(np.int32), sa.astype(np.int64))

    # ------------------------------------------------------------------ retrieval
    def longest_match(self, context: list[int], max_suffix: int) -> tuple[int, int, int]:
        """(m, lo, hi): the longest m <= max_suffix such that context[-m:] occurs in the corpus, and the
        suffix-array range [lo, hi) of its occurrences (in the reversed corpus). m = 0 when nothing matches."""
        rev, sa = self.tokens[::-1], self.sa_rev
        n = len(rev)
        lo, hi, m = 0, n, 0
        for m_next in range(1, min(max_suffix, len(context)) + 1):
            tok = context[-m_next]
            off = m_next - 1  # compare the off-th token of each reversed suffix in [lo, hi)
            a, b = lo, hi
            while a < b:  # first j with rev[sa[j] + off] >= tok (past-the-end counts as -2)
                mid = (a + b) // 2
                p = sa[mid] + off
                if (rev[p] if p < n else -2) < tok:
                    a = mid + 1
                else:
                    b = mid
            new_lo = a
            b = hi
            while a < b:  # first j with rev[sa[j] + off] > tok
                mid = (a + b) // 2
                p = sa[mid] + off
                if (rev[p] if p < n else -2) <= tok:
                    a = mid + 1
                else:
                    b = mid
            if a == new_lo:
                break
            lo, hi, m = new_lo, a, m_next
        return m, lo, hi

    def continuations(self, context: list[int], max_suffix: int, min_suffix: int, depth: int,
                      max_occurrences: int) -> list[list[int]]:
        """Continuations (<= depth tokens, stopping at a document end) of up to max_occurrences occurrences of
        the longest matching context suffix (length >= min_suffix); [] when none."""
        m, lo, hi = self.longest_match(context, max_suffix)
        if m < min_suffix or depth <= 0:
            return []
        n = len(self.tokens)
        rev_pos = self.sa_rev[lo: min(hi, lo + max_occurrences)]
        starts = n - rev_pos  # occurrence ends at n-1-rev_pos in the forward corpus; continuation starts after
        idx = starts[:, None] + np.arange(depth)[None, :]  # [k, depth]
        conts = self._padded(depth)[idx]  # [k, depth]; past the end reads the separator padding
        is_sep = conts == SEP
        cuts = np.where(is_sep.any(axis=1), is_sep.argmax(axis=1), depth).tolist()  # [k]: tokens before a SEP
        return [row[:cut] for row, cut in zip(conts.tolist(), cuts, strict=True) if cut]

    def _padded(self, depth: int) -> np.ndarray:
        """The corpus followed by at least `depth` separators (kept: one copy per datastore, not per lookup)."""
        pad = self._pad
        if pad is None or len(pad) - len(self.tokens) < depth:
            pad = self._pad = np.concatenate((self.tokens, np.full(max(depth, 64), SEP, dtype=np.int32)))
        return pad


def continuation_tree(conts: list[list[int]], num_nodes: int) -> tuple[list[int], list[int]]:
    """Count trie of `conts`, keep the `num_nodes` most frequent nodes (ties: shallower, then first seen;
    ancestors always outrank descendants so the kept set is a tree), emit depth-first with the most frequent
    child first. Returns (tokens, parents) in emission order (parents precede children).

    The kept nodes are found best-first from the root (a heap of the frontier): as every node ranks below its
    ancestors, the first num_nodes popped are exactly the num_nodes best of the whole trie, in rank order."""
    import heapq

    count: list[int] = []   # per trie node, indexed in first-seen order
    depth: list[int] = []
    token: list[int] = []
    kids: dict[int, list[int]] = {}  # parent node (-1: the root) -> children, in first-seen order
    index: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
    get = index.get
    rows: dict[tuple[int, ...], int] = {}  # identical rows walk the trie once (first-seen order is kept)
    for row in conts:
        key = tuple(row)
        rows[key] = rows.get(key, 0) + 1
    for uniq, mult in rows.items():
        p = -1
        for d, t in enumerate(uniq, 1):
            i = get((p, t))
            if i is None:
                i = index[(p, t)] = len(count)
                count.append(0)
                depth.append(d)
                token.append(t)
                kids.setdefault(p, []).append(i)
            count[i] += mult
            p = i
    heap = [(-count[i], depth[i], i) for i in kids.get(-1, [])]
    heapq.heapify(heap)
    kept: list[int] = []
    while heap and len(kept) < num_nodes:
        i = heapq.heappop(heap)[2]
        kept.append(i)
        for c in kids.get(i, ()):
            heapq.heappush(heap, (-count[c], depth[c], c))
    children: dict[int, list[int]] = {}
    parent_of = {c: p for p, cs in kids.items() for c in cs} if kept else {}
    for i in kept:  # in rank order: the children lists inherit it
        children.setdefault(parent_of[i], []).append(i)
    tokens: list[int] = []
    parents: list[int] = []
    stack: list[tuple[int, int]] = [(c, -1) for c in reversed(children.get(-1, []))]
    while stack:
        i, parent = stack.pop()
        tokens.append(token[i])
        parents.append(parent)
        me = len(tokens) - 1
        stack.extend((c, me) for c in reversed(children.get(i, [])))
    return tokens, parents
