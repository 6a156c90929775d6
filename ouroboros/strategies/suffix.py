"""suffix (Oliaro et al., "SuffixDecoding", arXiv 2411.04975; vLLM's `method="suffix"`, whose reference
implementation is Snowflake's ArcticInference): model-free drafts from suffix trees of token ids.

Two trees: one per request over its prompt and its output so far (source "suffix:request"), and one global tree over
the outputs of the requests seen so far, the running one included (source "suffix:global"). The global tree holds at
most `max_cached_requests` outputs, evicted oldest first (FIFO, as vLLM's); it outlives prompts, and with
`cache_save` / `cache_load` runs (the phrase pool's mechanism: a versioned JSON file, written atomically after every
prompt).

Tree (`SuffixTree`): every substring of at most `max_depth` tokens of a sequence is a node; its count is how many times
it occurs (as vLLM's depth-capped suffix tree counts it; stored here as a plain trie, without path compression).

Speculation (`SuffixTree.speculate`), given the pattern (the context's last `max_depth` tokens): for every match length
m = 1 .. len(pattern) - 1 whose suffix of the pattern is a node, a draft of at most
min(max_spec_tokens, floor(m * max_spec_factor)) tokens is grown from that node by estimated probability
(count(child) / count(node), multiplied down the path), never below min_token_prob: the most probable path
(`tree=False`, vLLM's drafts) or the most probable nodes of the continuation tree, best first (`tree=True`, the
paper's). The draft with the highest score (the sum of its tokens' probabilities; ties: the longer match) wins; the
global tree's only when its score is higher than the request tree's. The full pattern is never matched, as in the
reference implementation (a match of all max_depth tokens leaves no depth to continue).
Ties between children of equal count: the one that reached that count first (of continuations seen once, the one
seen first), the order the reference implementation keeps in most cases (its sibling lists move a node to the front
of its new count's group in some cases; that order depends on the history and is not reproduced).

Golden (tests/test_suffix.py): one sequence [1, 2, 3, 1, 2, 4, 1, 2], depth 8, factor 1, min_prob 0.1, a path, the
pattern = the sequence: m=1 ("2", 3 occurrences; children 3 and 4 once each, 3 seen first) gives [3] (p 1/3); m=2
("1 2") gives [3, 1] (p 1/3, 1/3: score 2/3); m=3 ("4 1 2") has no continuation -> [3, 1], match length 2.

This module knows nothing of models, the loop or sinks; the proposer below feeds the trees what the loop committed.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ouroboros.backends.base import Backend
from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from ouroboros.loop.draft import Draft
from ouroboros.loop.verify import Verdict
from ouroboros.strategies.base import DecodeState, ModelFreeProposer
from ouroboros.strategies.saved import check_save, read_doc, write_doc
from ouroboros.strategies.stats import PoolUse

FORMAT = "ouroboros-suffix-cache"
VERSION = 1
REQUEST, GLOBAL = "suffix:request", "suffix:global"


@dataclass
class SuffixConfig:
    # Names and defaults: vLLM's SpeculativeConfig for method="suffix" (vllm/config/speculative.py).
    num_speculative_tokens: int | None = None          # most draft tokens per step (None: max_tree_depth, as vLLM)
    suffix_decoding_max_tree_depth: int = 24            # depth of both trees: match length + draft length <= it
    suffix_decoding_max_spec_factor: float = 1.0        # draft length <= factor x match length
    suffix_decoding_min_token_prob: float = 0.1         # drop tokens whose estimated probability is below this
    suffix_decoding_max_cached_requests: int = 10000    # outputs the global tree holds (FIFO); 0: no global tree
    use_tree_spec: bool = True      # true: a tree of the most probable nodes (the paper); false: one path (vLLM's)
    cache_load: str | None = None   # load a saved global tree at start
    cache_save: str | None = None   # save the global tree after every prompt
    cache_on_error: str = "raise"   # "raise" | "empty": what a missing / corrupt / incompatible cache_load does
    CHAINS = "use_tree_spec=false"  # (not an option) the configuration that drafts chains only

    def __post_init__(self) -> None:
        check_range("suffix.suffix_decoding_max_tree_depth", self.suffix_decoding_max_tree_depth, lo=1)
        if self.num_speculative_tokens is not None:
            check_range("suffix.num_speculative_tokens", self.num_speculative_tokens, lo=1, note=" (or null)")
        check_range("suffix.suffix_decoding_max_spec_factor", self.suffix_decoding_max_spec_factor, lo=0)
        if math.isinf(self.suffix_decoding_max_spec_factor):   # int(m x inf) overflows
            raise OuroborosError("suffix.suffix_decoding_max_spec_factor must be a finite number >= 0, got inf (a "
                                 "factor of the draft's token cap or more already caps nothing)")
        check_range("suffix.suffix_decoding_min_token_prob", self.suffix_decoding_min_token_prob, lo=0, hi=1)
        check_range("suffix.suffix_decoding_max_cached_requests", self.suffix_decoding_max_cached_requests, lo=0)
        if (self.cache_load or self.cache_save) and self.suffix_decoding_max_cached_requests == 0:
            raise OuroborosError("suffix.cache_load / cache_save need suffix_decoding_max_cached_requests > 0 "
                                 "(0 turns the global tree off)")
        if self.cache_on_error not in ("raise", "empty"):
            raise OuroborosError(f"suffix.cache_on_error must be 'raise' or 'empty', got {self.cache_on_error!r}")

    @property
    def max_spec_tokens(self) -> int:
        return self.num_speculative_tokens or self.suffix_decoding_max_tree_depth

    def tree_models(self) -> tuple[str, ...]:
        """The models it gives token trees: none when it drafts one path (use_tree_spec=false)."""
        return ("target",) if self.use_tree_spec else ()

    def check_loaded(self, vocab_size: int) -> list[str]:
        """cache_load against the model's vocabulary, before anything is measured: OuroborosError, or (with
        cache_on_error=empty) the note that the run starts from an empty cache."""
        if not self.cache_load:
            return []
        try:
            read_cache(self.cache_load, {"vocab_size": vocab_size})
        except OuroborosError as e:
            if self.cache_on_error == "raise":
                raise
            return [f"suffix.cache_load: {e}; starting from an empty cache (cache_on_error=empty)"]
        return []

    def check_files(self) -> None:
        """cache_load parses (unless cache_on_error=empty); cache_save is writable. The vocabulary is checked once
        the model is known."""
        if self.cache_load and self.cache_on_error == "raise":
            read_cache(self.cache_load, {})
        if self.cache_save:
            check_save(self.cache_save, "suffix.cache_save", "suffix cache", FORMAT)


# ---------------------------------------------------------------------------------------------- the tree
class _Node:
    __slots__ = ("token", "count", "stamp", "children")

    def __init__(self, token: int):
        self.token = token
        self.count = 0          # occurrences of the substring this node ends
        self.stamp = 0          # the tree's tick when it was last counted (ties: the earlier first)
        self.children: dict[int, _Node] = {}


def _rank(node: _Node) -> tuple[int, int]:
    """Sort key, highest first: the count, then the earlier to reach it."""
    return node.count, -node.stamp


@dataclass
class Candidate:
    """A speculation: tokens with their parent indices (-1 = the root; parents precede children), each token's
    estimated probability, the score (their sum) and the match length that gave it."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    probs: list[float] = field(default_factory=list)
    score: float = 0.0
    match_len: int = 0


class SuffixTree:
    """Depth-capped suffix trie over several sequences (ids), with counts. `append` extends a sequence by one token
    (O(max_depth)); `remove` drops a whole sequence; `speculate` (module docstring)."""

    def __init__(self, max_depth: int):
        self.max_depth = max_depth
        self.root = _Node(-1)
        self.seqs: dict[int, list[int]] = {}
        self._active: dict[int, list[_Node]] = {}   # per sequence: the nodes its last max_depth suffixes end at
        self._tick = 0
        self.n_nodes = 0

    def extend(self, seq_id: int, tokens: list[int]) -> None:
        for t in tokens:
            self.append(seq_id, t)

    def append(self, seq_id: int, token: int) -> None:
        seq = self.seqs.setdefault(seq_id, [])
        active = self._active.get(seq_id, [])
        self._tick += 1
        tick = self._tick
        self.root.count += 1
        active.append(self.root)                     # a new suffix starts at this token
        if len(active) > self.max_depth:
            del active[0]                            # the oldest one has reached max_depth tokens
        seq.append(token)
        for i, node in enumerate(active):
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = _Node(token)
                self.n_nodes += 1
            child.count += 1
            child.stamp = tick
            active[i] = child
        self._active[seq_id] = active

    def remove(self, seq_id: int) -> None:
        seq = self.seqs.pop(seq_id)
        self._active.pop(seq_id, None)
        d = self.max_depth
        for start in range(len(seq)):
            node = self.root
            node.count -= 1
            for tok in seq[start:start + d]:
                child = node.children[tok]
                child.count -= 1
                if child.count == 0:                 # no other occurrence: the whole subtree goes
                    del node.children[tok]
                    self.n_nodes -= _size(child)
                    break
                node = child

    def match(self, pattern: list[int]) -> _Node | None:
        node: _Node | None = self.root
        for t in pattern:
            node = node.children.get(t)  # type: ignore[union-attr]
            if node is None:
                return None
        return node

    def speculate(self, pattern: list[int], max_spec_tokens: int, max_spec_factor: float = 1.0,
                  min_token_prob: float = 0.1, tree: bool = False) -> Candidate:
        pattern = pattern[-self.max_depth:]
        best = Candidate()
        for m in range(1, len(pattern)):
            node = self.match(pattern[len(pattern) - m:])
            if node is None:
                break                                # a longer suffix cannot match either
            n = max(0, min(max_spec_tokens, int(m * max_spec_factor + 1e-6)))
            cand = grow_tree(node, n, min_token_prob) if tree else grow_path(node, n, min_token_prob)
            if cand.score >= best.score:
                best = cand
                best.match_len = m
        return best


def _size(node: _Node) -> int:
    n, stack = 0, [node]
    while stack:
        x = stack.pop()
        n += 1
        stack.extend(x.children.values())
    return n


def grow_path(node: _Node, max_tokens: int, min_prob: float) -> Candidate:
    """The most probable path below `node`: the highest-count child each time (ties: `_rank`)."""
    out = Candidate()
    prob = 1.0
    while len(out.tokens) < max_tokens and node.children:
        child = max(node.children.values(), key=_rank)
        prob *= child.count / node.count
        if prob < min_prob:
            break
        out.parents.append(len(out.tokens) - 1)
        out.tokens.append(child.token)
        out.probs.append(prob)
        out.score += prob
        node = child
    return out


def grow_tree(node: _Node, max_tokens: int, min_prob: float) -> Candidate:
    """The `max_tokens` most probable nodes below `node` (each at least min_prob), best first; equal
    probabilities in the order they were reached, siblings by `_rank`."""
    out = Candidate()
    heap: list[tuple[float, int, _Node, _Node, int]] = []   # (-prob, order, node, parent node, parent index)
    order = 0

    def push(parent: _Node, prob: float, index: int) -> None:
        nonlocal order
        for child in sorted(parent.children.values(), key=_rank, reverse=True):
            p = prob * child.count / parent.count
            if p < min_prob:
                break                                # children are sorted by count: the rest are smaller
            heapq.heappush(heap, (-p, order, child, parent, index))
            order += 1

    push(node, 1.0, -1)
    while heap and len(out.tokens) < max_tokens:
        neg, _, child, _, parent = heapq.heappop(heap)
        out.parents.append(parent)
        out.tokens.append(child.token)
        out.probs.append(-neg)
        out.score += -neg
        push(child, -neg, len(out.tokens) - 1)
    return out


# ---------------------------------------------------------------------------------------------- the cache
@dataclass
class CacheStats:
    """The global tree's size and evictions (cumulative over the run)."""

    cached_requests: int = 0
    evicted_requests: int = 0
    global_tokens: int = 0
    global_nodes: int = 0

    def flat(self) -> dict[str, float]:
        return {"cached_requests": self.cached_requests, "evicted_requests": self.evicted_requests,
                "global_tokens": self.global_tokens, "global_nodes": self.global_nodes}


class SuffixCache:
    """The request tree (prompt + output of the running request) and the global tree (outputs of the last
    `max_cached` requests, FIFO). `start_request(prompt)`, `add(tokens)` (the running request's new output),
    `speculate(...)` -> (Candidate, source), `save` / `load`."""

    def __init__(self, max_depth: int, max_cached: int):
        self.max_depth = max_depth
        self.max_cached = max_cached
        self.local = SuffixTree(max_depth)
        self.glob = SuffixTree(max_depth)
        self._next = 0                               # the next request's sequence id in the global tree
        self._running: int | None = None
        self.evicted = 0

    def start_request(self, prompt: list[int]) -> None:
        self.local = SuffixTree(self.max_depth)
        self.local.extend(0, prompt)
        self._running = self._new_seq() if self.max_cached else None

    def _new_seq(self) -> int:
        seq = self._next
        self._next += 1
        self.glob.seqs[seq] = []
        while len(self.glob.seqs) > self.max_cached:     # FIFO: the oldest cached output goes first
            self.glob.remove(next(iter(self.glob.seqs)))
            self.evicted += 1
        return seq

    def add(self, tokens: list[int]) -> None:
        self.local.extend(0, tokens)
        if self._running is not None and self._running in self.glob.seqs:
            self.glob.extend(self._running, tokens)

    def speculate(self, pattern: list[int], max_spec_tokens: int, max_spec_factor: float, min_token_prob: float,
                  tree: bool) -> tuple[Candidate, str]:
        best = self.local.speculate(pattern, max_spec_tokens, max_spec_factor, min_token_prob, tree)
        if self.max_cached:
            g = self.glob.speculate(pattern, max_spec_tokens, max_spec_factor, min_token_prob, tree)
            if g.score > best.score:
                return g, GLOBAL
        return best, REQUEST

    def stats(self) -> CacheStats:
        g = self.glob
        return CacheStats(len(g.seqs), self.evicted, sum(len(s) for s in g.seqs.values()), g.n_nodes)

    def save(self, path: str, meta: dict[str, Any]) -> None:
        """The cached outputs, oldest first, as a versioned JSON document (temp file + rename)."""
        write_doc(path, FORMAT, VERSION, meta, {"outputs": [list(s) for s in self.glob.seqs.values()]})

    def load(self, path: str, meta: dict[str, Any], on_error: str = "raise") -> str | None:
        """Add the saved outputs as cached requests (oldest first, so FIFO eviction keeps the newest). Returns None,
        or the reason nothing was loaded when on_error="empty"; raises OuroborosError otherwise."""
        try:
            outputs = read_cache(path, meta)
        except OuroborosError as e:
            if on_error == "raise":
                raise
            return str(e)
        for out in outputs:
            self.glob.extend(self._new_seq(), out)
        return None


def read_cache(path: str, meta: dict[str, Any]) -> list[list[int]]:
    """Parse and validate a saved global tree; every failure is one OuroborosError line naming the file."""
    doc = read_doc(path, "suffix cache", FORMAT, VERSION, meta)
    outputs = doc.get("outputs")
    vocab = meta.get("vocab_size")
    if not isinstance(outputs, list):
        raise OuroborosError(f"suffix cache file {path} is corrupt: no output list")
    for i, out in enumerate(outputs):
        ok = isinstance(out, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in out)
        if ok and vocab is not None:
            ok = all(0 <= t < vocab for t in out)
        if not ok:
            raise OuroborosError(f"suffix cache file {path} is corrupt: bad output #{i}")
    return outputs


# ---------------------------------------------------------------------------------------------- the proposer
class SuffixProposer(ModelFreeProposer):
    needs_draft_model = False
    context_only = True
    tree_models: tuple[str, ...] = ("target",)

    def __init__(self, cfg: SuffixConfig, target: Backend | None = None, draft=None):
        super().__init__()
        self.cfg = cfg
        self.cache = SuffixCache(cfg.suffix_decoding_max_tree_depth, cfg.suffix_decoding_max_cached_requests)
        self._meta: dict[str, Any] = {"vocab_size": target.vocab_size} if target is not None else {}
        self.load_note = self.cache.load(cfg.cache_load, self._meta, cfg.cache_on_error) if cfg.cache_load else None
        self._use = PoolUse()
        self._source = REQUEST                           # the source of the last draft

    def begin(self, prompt: list[int]) -> None:
        self._use = PoolUse(proposed=Counter({REQUEST: 0, GLOBAL: 0}), accepted=Counter({REQUEST: 0, GLOBAL: 0}))
        self.cache.start_request(list(prompt))

    def propose(self, state: DecodeState) -> Draft:
        c = self.cfg
        n = min(c.max_spec_tokens, state.max_depth())    # a tree of n nodes is at most n deep
        if n <= 0:
            return Draft()
        pattern = state.tokens[-c.suffix_decoding_max_tree_depth:]
        cand, src = self.cache.speculate(pattern, n, c.suffix_decoding_max_spec_factor,
                                         c.suffix_decoding_min_token_prob, c.use_tree_spec)
        self._use.lookups += 1
        if not cand.tokens:
            return Draft()
        self._use.hits += 1
        self._use.proposed[src] += len(cand.tokens)
        self._source = src
        d = Draft()
        d.extend(cand.tokens, cand.parents, _depths(cand.parents), src)
        return d

    def observe(self, verdict: Verdict, scores, state: DecodeState) -> None:
        self._use.accepted[self._source] += len(verdict.path)
        self.cache.add(list(verdict.tokens))

    def stats(self) -> dict[str, float]:
        return {**self._use.flat(), **self.cache.stats().flat()}

    def checkpoint(self) -> None:
        """Save the global tree (cache_save); the harness calls this after every prompt."""
        if self.cfg.cache_save:
            self.cache.save(self.cfg.cache_save, self._meta)


def _depths(parents: list[int]) -> list[int]:
    d: list[int] = []
    for p in parents:
        d.append(0 if p < 0 else d[p] + 1)
    return d
