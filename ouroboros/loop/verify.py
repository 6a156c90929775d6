"""Verification of a scored draft tree -> `Verdict` (greedy here; sampling rules live in `sampling.py`).

Input: the `Draft` and the target's prediction at every position of the one forward, `preds[0]` after the
last committed token (the "root") and `preds[i + 1]` after draft node i. Output: the longest root-to-leaf
path of CANDIDATE nodes whose every token equals the target's prediction at its position, plus the bonus
token (the target's prediction after the path's last node).

Greedy rule, worked example (golden):
    draft tokens [5, 1, 7], parents [-1, 0, -1];  preds [5, 1, 9, 3]
    root predicts 5 -> node 0 (5) accepted; node 0 predicts 1 -> node 1 (1) accepted; node 1 predicts 9
    -> path [0, 1], tokens [5, 1, 9] (bonus 9).  Node 2 (7) never matched.

This module knows nothing of models or budgets: cutting at EOS / max_new_tokens is the loop's job.
"""

from __future__ import annotations

from dataclasses import dataclass

from ouroboros.loop.draft import CANDIDATE, Draft


@dataclass
class Verdict:
    path: list[int]      # accepted node indices, root to leaf
    tokens: list[int]    # accepted tokens + the bonus token (target's own next token)
    preds: list[int]     # target prediction at every position: [root, node 0, ..., node n-1]
    n_match: int         # #Match on the trunk (paper Eq. 10): sum_i [d_i == v_i], always >= len(path) on a chain;
                         # -1 when not counted (verify_greedy(count_match=False))

    @property
    def accepted(self) -> int:
        return len(self.path)

    @property
    def bonus(self) -> int:
        return self.tokens[-1]


def trunk_match(draft: Draft, preds: list[int]) -> int:
    """#Match over the trunk d_0..d_{t-1}: v_i = target prediction at d_i's position given d_<i, i.e. preds[i]
    (root prediction for i = 0, node i-1's prediction otherwise)."""
    toks = draft.tokens
    return sum(1 for i in range(draft.trunk_len) if toks[i] == preds[i])


def verify_greedy(draft: Draft, preds: list[int], count_match: bool = True) -> Verdict:
    """count_match=False skips #Match (n_match = -1): it reads predictions the verdict does not need, which a
    lazy scorer (the simulator's) would otherwise compute."""
    n = len(draft.tokens)
    toks, kinds = draft.tokens, draft.kinds
    if draft.is_chain:
        # Fast path: a chain is accepted while each token equals the prediction before it.
        m = 0
        while m < n and toks[m] == preds[m] and kinds[m] == CANDIDATE:
            m += 1
        path = list(range(m))
        n_match = m + sum(1 for i in range(m + 1, n) if toks[i] == preds[i]) if count_match else -1
        return Verdict(path=path, tokens=toks[:m] + [preds[m]], preds=preds, n_match=n_match)
    # Tree: depth-first over matching candidate children; keep the longest path (ties: first in node order).
    parents = draft.parents
    best: list[int] = []
    stack: list[list[int]] = [[]]
    while stack:
        path = stack.pop()
        if len(path) > len(best):
            best = path
        node = path[-1] if path else -1
        pred = preds[node + 1]
        for c in reversed(_children(parents, node)):
            if toks[c] == pred and kinds[c] == CANDIDATE:
                stack.append(path + [c])
    bonus = preds[best[-1] + 1] if best else preds[0]
    return Verdict(path=best, tokens=[toks[i] for i in best] + [bonus], preds=preds,
                   n_match=trunk_match(draft, preds) if count_match else -1)


def _children(parents: list[int], node: int) -> list[int]:
    """Children of `node` (-1 = root) in node order. A C-level scan per visited node (`list.index`): the walk
    visits only matching nodes, so this beats indexing every node of a large tree (lookahead's probes)."""
    out = []
    i = node + 1  # children follow their parent
    try:
        while True:
            i = parents.index(node, i)
            out.append(i)
            i += 1
    except ValueError:
        return out
