"""recycling (Luo et al., "Turning Trash into Treasure: Token Recycling", arXiv 2408.08696): model-free drafts from
the target's own discarded candidates.

An adjacency matrix M keeps, for each token x, the k tokens the target ranked highest the last time it scored a
position right after x (M[x] = argtopk of that row's logits). Each step, a static tree template is filled from M
breadth first, rooted at the last committed token: the template node [i] is M[root][i], the node [i, j] is
M[M[root][i]][j], and so on (source "matrix"); a node whose row is empty or shorter than its index is dropped with
its subtree, so an empty matrix gives an empty draft (`row:hit_rate` in its stats: the share of nodes kept of those
whose parent was in the tree). After verification every scored row updates M: the row after
the last committed token (the tree's root) and the row after each draft node (duplicates: the last one wins; the
paper merges them in parallel, which it leaves undefined, and found the last occurrence as good).

The template: `tree` as index paths, in the official code's format ([[0], [1], [0, 0], ...]; every path's prefix
must be in it too), or `widths` (a full tree: w_1 children of the root, w_2 of each of those, ...), or neither: the
paper's default tree (the official code's version "2.2.2", 80 nodes in 6 levels: `PAPER_TREE`; with k < 8, without
the nodes whose index k cannot fill).
`keep_history` (the paper's hot start): M outlives prompts; false: it is cleared for each prompt.

Top-k rows come from the target's logits, which the loop returns when a proposer declares `reads_logits`. Where a
forward gives none (a backend without logits), the target's prediction moves to the front of the row (the other
candidates shift down): top-1 information only. Rows with fewer than k finite logits (the simulator's surrogate
ranks only its own back-off table's continuations) keep only those.

Golden (tests/test_recycling.py): M = {5: [6, 7], 6: [8]}, template [[0], [1], [0, 0]], root 5
    -> nodes 6 (under the root), 7 (under the root), 8 (under 6): tokens [6, 7, 8], parents [-1, -1, 0].

This module knows nothing of models or the loop's bookkeeping; it reads the logits of the forward it drafted for.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ouroboros.backends.base import Backend, Scores
from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from ouroboros.loop.draft import Draft
from ouroboros.loop.verify import Verdict
from ouroboros.strategies.base import DecodeState, ModelFreeProposer
from ouroboros.strategies.stats import PoolUse

SOURCE = "matrix"
# The official code's default template (Luowaterbi/TokenRecycling, model/recycling/tree_template_.py, version
# "2.2.2"; the paper's Appendix 8.1): 8 + 21 + 25 + 15 + 8 + 3 = 80 nodes, depth 6, indices < k = 8.
PAPER_TREE: tuple[tuple[int, ...], ...] = (
    (0,), (1,), (2,), (3,), (4,), (5,), (6,), (7,),
    (0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 6), (0, 7), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (2, 1),
    (2, 2), (3, 0), (3, 1), (4, 0), (5, 0), (6, 0), (7, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 0, 4), (0, 0, 5), (0, 0, 6), (0, 0, 7), (0, 1, 0), (0, 1, 1),
    (0, 1, 2), (0, 2, 0), (0, 2, 1), (0, 3, 0), (0, 4, 0), (0, 5, 0), (0, 6, 0), (0, 7, 0), (1, 0, 0), (1, 0, 1),
    (1, 1, 0), (2, 0, 0), (3, 0, 0), (4, 0, 0), (5, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2), (0, 0, 0, 3), (0, 0, 0, 4), (0, 0, 1, 0), (0, 0, 1, 1), (0, 0, 2, 0),
    (0, 0, 3, 0), (0, 0, 4, 0), (0, 1, 0, 0), (0, 2, 0, 0), (1, 0, 0, 0), (2, 0, 0, 0), (3, 0, 0, 0),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1), (0, 0, 0, 0, 2), (0, 0, 0, 1, 0), (0, 0, 0, 2, 0), (0, 0, 1, 0, 0),
    (0, 1, 0, 0, 0), (1, 0, 0, 0, 0),
    (0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 1), (0, 0, 0, 1, 0, 0),
)


@dataclass
class RecyclingConfig:
    k: int = 8                             # candidates kept per token (the paper's k; official --output-id-topk 8)
    tree: list[list[int]] | None = None    # template as index paths (null: the paper's, unless widths is given)
    widths: list[int] | None = None        # or a full tree: children per node at each level, e.g. [4, 2, 1]
    keep_history: bool = True              # the matrix outlives prompts (the paper's hot start)
    CHAINS = "a one-path template (widths of 1s)"  # (not an option) the configurations that draft chains only

    def __post_init__(self) -> None:
        check_range("recycling.k", self.k, lo=1)
        if self.tree is not None and self.widths is not None:
            raise OuroborosError("recycling takes a tree template as `tree` (index paths) or `widths`, not both")
        if self.tree is not None and not self.tree:
            raise OuroborosError("recycling.tree must be a non-empty list of index paths (null: the paper's tree), "
                                 "got []")
        if self.widths is not None and (not self.widths or min(self.widths) < 1 or max(self.widths) > self.k):
            raise OuroborosError(f"recycling.widths must be a non-empty list of widths in 1..k={self.k}, got "
                                 f"{self.widths}")
        self.template()  # validates `tree`

    def template(self) -> list[tuple[int, ...]]:
        """The template's index paths, parents before children (breadth first)."""
        if self.widths is not None:
            return widths_template(self.widths)
        if self.tree is None:  # the paper's tree, without the nodes a smaller k cannot fill
            return [p for p in PAPER_TREE if max(p) < self.k]
        paths = [tuple(p) for p in self.tree]
        seen = set(paths)
        for p in paths:
            if not p or min(p) < 0 or max(p) >= self.k:
                raise OuroborosError(f"recycling.tree path {list(p)} must be non-empty with indices in 0..k-1 "
                                     f"(k={self.k})")
            if len(p) > 1 and p[:-1] not in seen:
                raise OuroborosError(f"recycling.tree path {list(p)} has no parent path {list(p[:-1])}")
        if len(seen) != len(paths):
            raise OuroborosError("recycling.tree repeats a path")
        return sorted(paths, key=lambda p: (len(p), p))

    def tree_models(self) -> tuple[str, ...]:
        """The models it gives token trees: none when the template is one path (no two nodes at one depth)."""
        depths = [len(p) for p in self.template()]
        return ("target",) if len(set(depths)) < len(depths) else ()

    def draft_nodes(self) -> tuple[int, str]:
        """(the most nodes one draft holds, what sets it): the template's size."""
        how = f"widths={self.widths}" if self.widths is not None else "tree" if self.tree else "the paper's tree"
        return len(self.template()), f"the template of {how}"


def widths_template(widths: list[int]) -> list[tuple[int, ...]]:
    """Golden: [2, 1] -> [(0,), (1,), (0, 0), (1, 0)]."""
    level: list[tuple[int, ...]] = [()]
    out: list[tuple[int, ...]] = []
    for w in widths:
        level = [p + (i,) for p in level for i in range(w)]
        out.extend(level)
    return out


def fill_template(matrix: dict[int, list[int]], root: int, template: list[tuple[int, ...]],
                  max_depth: int, rows: list[int] | None = None) -> tuple[list[int], list[int]]:
    """(tokens, parents) of the draft tree the template gives from `matrix` under `root` (parents precede children;
    -1 = the root), keeping nodes at depth < max_depth whose parent row has their index. `rows` ([looked up,
    found]): for every node whose parent is in the tree, whether the parent token's row holds its index (what
    makes a tree narrower than its template) is counted into it."""
    index: dict[tuple[int, ...], int] = {}
    looked = found = 0
    tokens: list[int] = []
    parents: list[int] = []
    for path in template:
        if len(path) > max_depth:
            break                                    # breadth first: every later path is as deep or deeper
        if len(path) == 1:
            parent, ptok = -1, root
        else:
            parent = index.get(path[:-1], -2)
            if parent == -2:
                continue                             # its parent was dropped
            ptok = tokens[parent]
        row = matrix.get(ptok)
        looked += 1
        if row is None or path[-1] >= len(row):
            continue
        found += 1
        index[path] = len(tokens)
        tokens.append(row[path[-1]])
        parents.append(parent)
    if rows is not None:
        rows[0] += looked
        rows[1] += found
    return tokens, parents


def topk_rows(logits, k: int) -> list[list[int]]:
    """Each row's k highest-scoring tokens, best first, dropping -inf entries (one device sync).
    Golden: [[0, -inf, 2, 1]], k=3 -> [[2, 1, 0]]."""
    import torch

    vals, idx = logits.topk(min(k, logits.shape[-1]), dim=-1)  # [n + 1, k]
    idx = idx.masked_fill(~torch.isfinite(vals), -1)
    return [[t for t in row if t >= 0] for row in idx.tolist()]


class RecyclingProposer(ModelFreeProposer):
    needs_draft_model = False
    tree_models: tuple[str, ...] = ("target",)
    reads_logits = True   # the loop asks the target for logits (the top-k candidates of every scored row)

    def __init__(self, cfg: RecyclingConfig, target: Backend | None = None, draft=None):
        super().__init__()
        self.cfg = cfg
        self.template = cfg.template()
        self.matrix: dict[int, list[int]] = {}      # token -> its candidates, best first (a missing row: empty)
        self._root = -1
        self._draft = Draft()
        self._use = PoolUse()
        self._rows = [0, 0]   # template nodes whose parent was in the tree: [looked up a row, found it]

    def begin(self, prompt: list[int]) -> None:
        self._use = PoolUse(proposed=Counter({SOURCE: 0}), accepted=Counter({SOURCE: 0}))
        self._rows = [0, 0]
        if not self.cfg.keep_history:
            self.matrix.clear()

    def propose(self, state: DecodeState) -> Draft:
        self._root = state.tokens[-1]
        depth = state.max_depth()
        self._draft = Draft()
        if depth <= 0:
            return self._draft
        tokens, parents = fill_template(self.matrix, self._root, self.template, depth, self._rows)
        self._use.lookups += 1
        if tokens:
            self._use.hits += 1
            self._use.proposed[SOURCE] += len(tokens)
            depths: list[int] = []
            for p in parents:
                depths.append(0 if p < 0 else depths[p] + 1)
            self._draft.extend(tokens, parents, depths, SOURCE)
        return self._draft

    def observe(self, verdict: Verdict, scores: Scores, state: DecodeState) -> None:
        self._use.accepted[SOURCE] += len(verdict.path)
        keys = [self._root, *self._draft.tokens]     # row i of the forward follows keys[i]
        m, k = self.matrix, self.cfg.k
        if scores.logits is not None:
            for key, row in zip(keys, topk_rows(scores.logits, k), strict=True):
                m[key] = row
        else:
            for key, pred in zip(keys, scores.preds, strict=False):
                m[key] = [pred, *(t for t in m.get(key, ()) if t != pred)][:k]

    def stats(self) -> dict[str, float]:
        # row:hit_rate (metrics.pool_rates): the share of template nodes under a node in the tree whose parent
        # token had a row holding their index; the rest drop with their subtrees
        return {**self._use.flat(), "matrix_rows": len(self.matrix), "row:lookups": self._rows[0],
                "row:hits": self._rows[1]}
