"""lookahead (Fu et al. 2023, "Break the Sequential Dependency of LLM Inference Using Lookahead Decoding"):
Jacobi iteration over a 2-D window (N-1 levels x W columns) generates n-grams into a phrase pool; up to G
pool phrases that follow the last committed token are verified as candidate branches, in the SAME forward.

The window travels as PROBE nodes (scored, never accepted): the level-0 cells form a chain under the root,
cell (level l, column i) hangs under (l-1, i), so cell (l, i) sits at depth i + l and sees level-0 cells
0..i and the cells of its own column below it. After the forward, the target's predictions at the top level
become the new top level; once N-1 levels are full, column i yields the n-gram
(level_0[i], ..., level_{N-2}[i], new[i]) keyed by level_0[i], and the window shifts down one level.
During the first N-2 steps the window fills one level per step (no n-grams yet), as the official code does.

Candidates are added FIRST (the first phrase is the draft's trunk, on which #Match is counted), then probes.
The same proposer drives Ouroboros' drafter (on the draft model, sharing the Ouroboros pool).

Worked example (golden): W=2, N=3, levels [[5, 6], [7, 8]]; top-level predictions [9, 4]
-> n-grams 5 -> (7, 9) and 6 -> (8, 4); new levels [[7, 8], [9, 4]].

This module knows nothing of the loop's bookkeeping or of models beyond the predictions it observes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ouroboros.backends.base import Counters, Scores
from ouroboros.errors import OuroborosError
from ouroboros.loop.draft import PROBE, Draft
from ouroboros.loop.verify import Verdict
from ouroboros.strategies.base import DecodeState
from ouroboros.strategies.phrase_pool import Phrase, PhrasePool
from ouroboros.strategies.stats import Harvest, PoolUse, pool_size


@dataclass
class LookaheadConfig:
    # Defaults: the official README's example (hao-ai-lab/LookaheadDecoding: LEVEL=5, WINDOW_SIZE=7,
    # GUESS_SET_SIZE=7); the paper's A100 7B setting is W=15, N=5, G=15.
    W: int = 7                  # window columns
    N: int = 5                  # n-gram size (phrases of N-1 tokens after the key)
    G: int = 7                  # candidates verified per step, and per-key pool capacity
    prompt_phrases: bool = False  # seed the pool with the prompt's n-grams (source "prompt"; not in the paper)
    output_phrases: bool = False  # add the committed output's n-grams as it grows (source "verify"; not in the paper)
    max_pool_phrases: int = 0   # global pool cap (0 = none)
    seed: int = 0               # window initialisation (random prompt tokens, as the official code)

    def __post_init__(self) -> None:
        if self.W < 1 or self.N < 2 or self.G < 0:
            raise OuroborosError(f"lookahead needs W >= 1, N >= 2, G >= 0; got W={self.W}, N={self.N}, G={self.G}")

    def draft_nodes(self) -> tuple[int, str]:
        """(the most nodes one draft holds, what sets it): G phrases and a window of W x (N - 1) probes."""
        how = f"W={self.W} window columns and G={self.G} phrases, N - 1={self.N - 1} deep"
        return (self.W + self.G) * (self.N - 1), how


def hang_phrases(draft: Draft, phrases: list[Phrase], parent: int, max_len: int) -> list[list[int]]:
    """Trie-insert `phrases` (each cut to max_len) under node `parent` of `draft`, which must have no
    children there yet; node sources are "pool:<phrase source>". Returns each phrase's node indices."""
    if not -1 <= parent < len(draft):
        raise ValueError(f"parent {parent} out of range for a draft of {len(draft)} nodes")
    index: dict[tuple[int, int], int] = {}  # (parent, token) -> node
    toks: list[int] = []
    pars: list[int] = []
    deps: list[int] = []
    srcs: list[str] = []
    out = []
    n, d0, get = len(draft), (draft.depths[parent] + 1 if parent >= 0 else 0), index.get
    for ph in phrases:
        p, d, nodes, src = parent, d0, [], "pool:" + ph.source
        for t in ph.tokens[:max_len]:
            node = get((p, t))
            if node is None:
                node = index[(p, t)] = n
                n += 1
                toks.append(int(t))
                pars.append(p)
                deps.append(d)
                srcs.append(src)
            nodes.append(node)
            p, d = node, d + 1
        out.append(nodes)
    draft.extend(toks, pars, deps, srcs)
    return out


class JacobiWindow:
    """The 2-D window state. `levels[l][i]` = token at level l, column i (l = 0 is the oldest)."""

    def __init__(self, W: int, N: int):
        self.W, self.N = W, N
        self.levels: list[list[int]] = []
        self._shapes: dict[tuple[int, int], tuple[list[int], list[int]]] = {}  # (first index, levels) -> layout

    def reset(self, prompt: list[int], rng: random.Random) -> None:
        self.levels = [[prompt[rng.randrange(len(prompt))] for _ in range(self.W)]]

    @property
    def depth(self) -> int:
        """Deepest probe's depth."""
        return self.W - 1 + len(self.levels) - 1

    def add_probes(self, draft: Draft) -> list[list[int]]:
        """Hang the window under the root as PROBE nodes; returns each level's node indices."""
        W, L, b = self.W, len(self.levels), len(draft)
        shape = self._shapes.get((b, L))
        if shape is None:
            shape = self._shapes[(b, L)] = self._shape(b, L)
        parents, depths = shape
        draft.extend([t for lvl in self.levels for t in lvl], parents, depths, "window", PROBE)
        return [list(range(b + lv * W, b + (lv + 1) * W)) for lv in range(L)]

    def _shape(self, b: int, L: int) -> tuple[list[int], list[int]]:
        """Parents and depths of an L-level window whose first node gets index b: level 0 is a chain under the
        root, cell (l, i) hangs under (l - 1, i) at depth i + l."""
        W = self.W
        parents = [-1] + [b + i - 1 for i in range(1, W)]
        depths = list(range(W))
        for lv in range(1, L):
            parents += [b + (lv - 1) * W + i for i in range(W)]
            depths += [i + lv for i in range(W)]
        return parents, depths

    def update(self, preds: list[int], nodes: list[list[int]], pool: PhrasePool, source: str) -> int:
        """Take the top level's predictions; harvest n-grams once the window is full. Returns n-grams added."""
        new = [preds[j + 1] for j in nodes[-1]]
        levels = self.levels
        if len(levels) < self.N - 1:
            levels.append(new)
            return 0
        added = 0
        add = pool.add
        columns = zip(*levels[1:], new, strict=True)  # column i: (level_1[i], ..., new[i])
        for key, phrase in zip(levels[0], columns, strict=True):
            added += add(key, phrase, source)
        self.levels = levels[1:] + [new]
        return added


def add_prompt_phrases(pool: PhrasePool, prompt: list[int], length: int) -> None:
    for i in range(len(prompt) - 1):
        pool.add(prompt[i], prompt[i + 1: i + 1 + length], "prompt")


class OutputIndexer:
    """Adds every complete n-gram of the committed output to a pool, incrementally (each key position once:
    O(new tokens) per step, no rescans). Source "verify": these tokens were verified by the target."""

    def __init__(self, length: int):
        self.length = length
        self.next_key = 0

    def begin(self, prompt_len: int) -> None:
        self.next_key = max(prompt_len - 1, 0)  # the last prompt token keys the first output phrase

    def update(self, tokens: list[int], pool: PhrasePool) -> int:
        added, L = 0, self.length
        k, end = self.next_key, len(tokens) - L
        while k < end:
            added += pool.add(tokens[k], tokens[k + 1: k + 1 + L], "verify")
            k += 1
        self.next_key = k
        return added


class LookaheadProposer:
    needs_draft_model = False
    reads_logits = False
    tree_models: tuple[str, ...] = ("target",)

    def __init__(self, cfg: LookaheadConfig, target=None, draft=None, pool: PhrasePool | None = None,
                 owns_pool: bool = True):
        """With `pool` given and owns_pool=False (Ouroboros' drafter) the pool is shared and never cleared here."""
        self.cfg = cfg
        self.counters = Counters()
        self.pool = pool if pool is not None else PhrasePool(per_key=max(cfg.G, 1), max_phrases=cfg.max_pool_phrases)
        self.owns_pool = owns_pool
        self.window = JacobiWindow(cfg.W, cfg.N)
        self._draft = Draft()
        self._phrase_nodes: list[list[int]] = []
        self._phrases: list[Phrase] = []
        self._probe_nodes: list[list[int]] | None = None
        self._key = 0
        self._use, self._harvest, self._probes = PoolUse(), Harvest(), 0
        self._output = OutputIndexer(cfg.N - 1) if cfg.output_phrases else None

    def use_pool(self, pool: PhrasePool) -> None:
        """Draft from and harvest into `pool` instead (contracts.SharesPool)."""
        self.pool = pool

    def begin(self, prompt: list[int]) -> None:
        self._use, self._harvest, self._probes = PoolUse(), Harvest(), 0
        if self.owns_pool:
            self.pool.clear()
        if self.cfg.prompt_phrases and self.owns_pool:
            add_prompt_phrases(self.pool, prompt, self.cfg.N - 1)
        if self._output is not None:
            self._output.begin(len(prompt))
        self.window.reset(prompt, random.Random(self.cfg.seed))

    def propose(self, state: DecodeState) -> Draft:
        cfg, use = self.cfg, self._use
        draft = Draft()
        depth = min(state.max_depth(), cfg.N - 1)
        self._phrases, self._phrase_nodes = [], []
        if depth > 0 and cfg.G > 0:
            self._key = state.tokens[-1]
            self._phrases = self.pool.lookup(self._key, cfg.G)
            use.lookups += 1
            if self._phrases:
                use.hits += 1
                self._phrase_nodes = hang_phrases(draft, self._phrases, -1, depth)
                use.proposed.update(draft.sources)
        if not draft.tokens:
            draft.trunk_len = 0  # probes never form a trunk
        self._probe_nodes = None
        if self.window.depth <= state.room - 1:
            n_cand, trunk = len(draft), draft.trunk_len
            self._probe_nodes = self.window.add_probes(draft)
            draft.trunk_len = trunk
            self._probes += len(draft) - n_cand
        self._draft = draft
        return draft

    def observe(self, verdict: Verdict, scores: Scores, state: DecodeState) -> None:
        added = self._harvest.added
        if self._probe_nodes is not None:
            added["lookahead"] += self.window.update(verdict.preds, self._probe_nodes, self.pool, "lookahead")
        if self._output is not None:
            added["output"] += self._output.update(state.tokens, self.pool)
        path = verdict.path
        if path:
            srcs = self._draft.sources
            self._use.accepted.update(srcs[i] for i in path)
            last = path[-1]
            for ph, nodes in zip(self._phrases, self._phrase_nodes, strict=True):
                if last in nodes:
                    self.pool.touch(self._key, ph.tokens)  # refresh-on-reuse

    def stats(self) -> dict[str, float]:
        out = {**self._use.flat(), "probes": self._probes, **self._harvest.flat()}
        return {**out, **pool_size(self.pool)} if self.owns_pool else out

    def checkpoint(self) -> None:
        pass
