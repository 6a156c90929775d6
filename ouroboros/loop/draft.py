"""Draft = a token tree that the target scores in ONE forward.

Every strategy proposes a `Draft`: a list of nodes, each with a token, a parent index (-1 = hangs off the
last committed token), a kind (CANDIDATE may be accepted; PROBE is scored but never accepted, e.g.
lookahead's Jacobi window, whose predictions go back to the proposer) and a source tag ("draft",
"prompt", "pool:verify", ...). Parents always precede their children (`parent[i] < i`), so node order is
a topological order and a node's depth (its position offset) is `depth[parent] + 1`.

A chain is the special case parent[i] = i - 1; it needs no custom mask (plain causal attention).

This module knows nothing of models, tensors of scores or verification rules; it only builds trees and the
attention mask / position offsets they imply.

Worked example (golden):  tokens [5, 1, 7], parents [-1, 0, -1]  ->  depths [0, 1, 0];
node 1 sees nodes {0, 1}, node 2 sees {2} (plus all committed context in every case).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where masks are built: the simulator never needs it
    import torch

CANDIDATE = 0
PROBE = 1


@dataclass
class Draft:
    """A token tree. Build with `Draft()` + `add_path`, or `Draft.chain(tokens)`."""

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    # Number of leading nodes that form a root chain (parent[i] == i - 1): the "trunk" on which #Match is counted.
    trunk_len: int = 0
    # Optional per-draft payload for the proposer (e.g. which nodes belong to which pool phrase).
    meta: dict = field(default_factory=dict)

    # ---------------------------------------------------------------- builders
    @classmethod
    def chain(cls, tokens: list[int], source: str = "draft") -> Draft:
        n = len(tokens)
        return cls(
            tokens=list(tokens),
            parents=list(range(-1, n - 1)),
            kinds=[CANDIDATE] * n,
            sources=[source] * n,
            depths=list(range(n)),
            trunk_len=n,
        )

    def __len__(self) -> int:
        return len(self.tokens)

    def add_node(self, token: int, parent: int, source: str, kind: int = CANDIDATE) -> int:
        """Append one node under `parent` (-1 = root) and return its index. No de-duplication."""
        if parent >= len(self.tokens) or parent < -1:
            raise ValueError(f"parent {parent} out of range for a draft of {len(self.tokens)} nodes")
        i = len(self.tokens)
        self.tokens.append(int(token))
        self.parents.append(parent)
        self.kinds.append(kind)
        self.sources.append(source)
        self.depths.append(0 if parent < 0 else self.depths[parent] + 1)
        if parent == i - 1 and self.trunk_len == i:
            self.trunk_len = i + 1
        return i

    def extend(self, tokens: list[int], parents: list[int], depths: list[int], source: str | list[str],
               kind: int = CANDIDATE) -> int:
        """Append nodes in bulk (node j: tokens[j] under parents[j], an absolute index, at depths[j], with
        `source` or source[j]) and return the first new index. Unchecked fast path for a tree the caller built
        (a lookahead window, a trie of phrases); `validate()` checks a whole draft. The trunk grows as with
        `add_node`."""
        i0 = len(self.tokens)
        n = len(tokens)
        self.tokens.extend(tokens)
        self.parents.extend(parents)
        self.depths.extend(depths)
        self.kinds.extend([kind] * n)
        self.sources.extend([source] * n if isinstance(source, str) else source)
        t = self.trunk_len
        if t == i0:
            par, end = self.parents, i0 + n
            while t < end and par[t] == t - 1:
                t += 1
            self.trunk_len = t
        return i0

    def add_path(self, tokens: list[int], parent: int = -1, source: str = "draft", kind: int = CANDIDATE,
                 merge: bool = True) -> list[int]:
        """Hang `tokens` as a chain under `parent`; with merge=True reuse an existing child carrying the same
        token and kind (trie insertion), so a tree never holds two identical siblings. Returns the node
        index of every token of the path."""
        out = []
        for t in tokens:
            node = self.find_child(parent, t, kind) if merge else -1
            if node < 0:
                node = self.add_node(t, parent, source, kind)
            out.append(node)
            parent = node
        return out

    def find_child(self, parent: int, token: int, kind: int = CANDIDATE) -> int:
        # Linear scan: drafts are small (tens of nodes) and children must precede nothing in particular.
        for i in range(parent + 1, len(self.tokens)):
            if self.parents[i] == parent and self.tokens[i] == token and self.kinds[i] == kind:
                return i
        return -1

    # ---------------------------------------------------------------- queries
    @property
    def is_chain(self) -> bool:
        """True when the whole draft is one root chain of candidates (plain causal attention suffices)."""
        return self.trunk_len == len(self.tokens)

    def path_to(self, node: int) -> list[int]:
        """Node indices from the root down to `node` (inclusive)."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def children(self) -> dict[int, list[int]]:
        """parent index (-1 = root) -> child indices, in node order."""
        ch: dict[int, list[int]] = {}
        for i, p in enumerate(self.parents):
            ch.setdefault(p, []).append(i)
        return ch

    def validate(self, vocab_size: int | None = None) -> None:
        n = len(self.tokens)
        if not (len(self.parents) == len(self.kinds) == len(self.sources) == len(self.depths) == n):
            raise ValueError("draft fields have different lengths")
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(f"draft node {i} has parent {p}; parents must precede children")
        if vocab_size is not None and any(t < 0 or t >= vocab_size for t in self.tokens):
            raise ValueError(f"draft holds a token outside the vocabulary [0, {vocab_size})")


def ancestor_matrix(parents: list[int]) -> torch.Tensor:
    """Bool [n, n]: row i is True at i and at every ancestor of i (the tree part of the attention mask)."""
    import torch

    n = len(parents)
    anc = torch.eye(n, dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            anc[i] |= anc[p]
    return anc


def tree_attention(parents: list[int], n_prefix: int) -> torch.Tensor:
    """Bool [n_prefix + n, n_prefix + n] attention among the tokens of one forward: `n_prefix` uncached
    committed tokens (causal among themselves) followed by the draft nodes (each sees every prefix token and
    its own ancestors). Cached context is not included: every query sees all of it."""
    import torch

    n = len(parents)
    q = n_prefix + n
    mask = torch.zeros(q, q, dtype=torch.bool)
    mask[:n_prefix, :n_prefix] = torch.tril(torch.ones(n_prefix, n_prefix, dtype=torch.bool))
    mask[n_prefix:, :n_prefix] = True
    mask[n_prefix:, n_prefix:] = ancestor_matrix(parents)
    return mask


def additive_mask(parents: list[int], n_prefix: int, n_cached: int, dtype: torch.dtype,
                  device: torch.device | str = "cpu", window: int | None = None) -> torch.Tensor:
    """Float [1, 1, q, n_cached + q] additive mask (0 = attend, dtype-min = blocked), the form every stock
    attention implementation (eager, sdpa) accepts as a ready 4-D mask. With `window`, a query also sees
    only keys less than `window` positions before it (cached slot i = position i; a node's position is
    n_cached + n_prefix + its depth), as transformers' sliding-window layers do."""
    import torch

    allowed = tree_attention(parents, n_prefix)
    q = allowed.shape[0]
    full = torch.ones(q, n_cached + q, dtype=torch.bool)
    full[:, n_cached:] = allowed
    if window is not None:
        depth = torch.zeros(len(parents), dtype=torch.long)
        for i, p in enumerate(parents):
            if p >= 0:
                depth[i] = depth[p] + 1
        q_pos = torch.cat([torch.arange(n_prefix), n_prefix + depth]) + n_cached  # [q]
        k_pos = torch.cat([torch.arange(n_cached), q_pos])  # [n_cached + q]
        full &= (q_pos[:, None] - k_pos[None, :]) < window
    mask = torch.zeros(q, n_cached + q, dtype=dtype)
    mask.masked_fill_(~full, torch.finfo(dtype).min)
    return mask.view(1, 1, q, n_cached + q).to(device)
