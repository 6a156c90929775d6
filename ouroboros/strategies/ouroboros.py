"""ouroboros (Zhao et al. 2024, arXiv 2402.13720): speculative decoding whose draft is generated phrase by
phrase and lengthened with phrases, all around one phrase pool. Four mechanisms, each a config switch (the
paper's Table 4 ablation adds them one at a time); with all four off this IS `speculative` (same drafts,
same records, step by step):

(a) phrase_drafting: the draft model runs lookahead decoding on itself for gamma tokens (`run_steps` on the
    draft backend with a `LookaheadProposer` sharing the pool), so a draft forward yields several tokens and
    its Jacobi window feeds the pool ("lookahead" phrases). Off: the inner proposer is vanilla. As in the
    official code (thunlp/Ouroboros: the drafter's `lade_generate(max_new_tokens=gamma)` keeps every token of
    its last step, its max-length truncation commented out), the drafter stops once it has gamma tokens but
    keeps all of its last step's, so the trunk holds gamma .. gamma + N - 2 tokens (`trunk_overshoot`;
    false: cut at exactly gamma).
(b) lengthening: K pool phrases keyed by the last draft token hang as K branches at the trunk's tip, in the
    same target forward; when the trunk is fully accepted the longest accepted branch wins (verify.py).
(c) harvest: after verification, (i) every run of trunk tokens after the first mismatch that equals the
    target's predictions at its positions, closed by the target's next prediction, becomes a "verify"
    phrase keyed by the token before the run; (ii) every branch is corrected with the target's predictions
    (matched prefix + the target's token at the first mismatch) into a "corrected" phrase, replacing the
    wrong phrase. Deviation (flagged): the official code also stores predictions that follow a mismatch
    inside the same phrase (conditioned on a token the target rejected); we keep only coherent runs.
(d) history: the pool survives across prompts (else it is cleared per prompt) and across runs
    (pool_load / pool_save; saved after every prompt, see `stats`).

The trunk is built first (gamma chain; #Match is counted on it), then the branches.

This module knows nothing of the loop's bookkeeping; it drives its inner loop and the shared pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from ouroboros.backends.base import Backend, Scores
from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from ouroboros.loop.contracts import SharesPool
from ouroboros.loop.decode import run_steps
from ouroboros.loop.draft import Draft
from ouroboros.loop.verify import Verdict
from ouroboros.strategies.base import DecodeState, Proposer
from ouroboros.strategies.lookahead import (
    LookaheadConfig,
    LookaheadProposer,
    OutputIndexer,
    add_prompt_phrases,
    hang_phrases,
)
from ouroboros.strategies.phrase_pool import FORMAT, Phrase, PhrasePool, read_pool
from ouroboros.strategies.saved import check_save
from ouroboros.strategies.speculative import check_pair
from ouroboros.strategies.stats import Drafting, Harvest, PoolUse, pool_size, prefixed
from ouroboros.strategies.vanilla import VanillaProposer


@dataclass
class OuroborosConfig:
    # Defaults: official code (thunlp/Ouroboros `ouroboros()`): gamma=4, window_size=guess_set_size=20,
    # lookahead_level=7, topk=3.
    gamma: int = 4                 # draft (trunk) length
    W: int = 20                    # draft-side lookahead window
    N: int = 7                     # n-gram size: phrases of N-1 tokens
    G: int = 20                    # draft-side candidates per step and per-key pool capacity
    K: int = 3                     # lengthening branches at the trunk tip
    trunk_overshoot: bool = True   # the drafter's last step keeps all its tokens: trunk gamma..gamma+N-2 (official)
    phrase_drafting: bool = True   # (a)
    lengthening: bool = True       # (b)
    harvest: bool = True           # (c)
    history: bool = True           # (d)
    prompt_phrases: bool = False   # seed the pool with the prompt's n-grams (source "prompt"; not in the paper)
    output_phrases: bool = False   # add the committed output's n-grams as it grows (source "verify"; not in the paper)
    max_pool_phrases: int = 0      # global pool caps (0 = none); eviction: global LRU (phrase_pool.py)
    max_pool_bytes: int = 0
    pool_load: str | None = None   # load a saved pool at start (needs history)
    pool_save: str | None = None   # save the pool after every prompt (needs history)
    pool_on_error: str = "raise"   # "raise" | "empty": what a missing/corrupt/incompatible pool_load does
    seed: int = 0
    CHAINS = "phrase_drafting=false and either K <= 1 or lengthening=false"  # (not an option): drafts chains only

    def __post_init__(self) -> None:
        check_range("ouroboros.gamma", self.gamma, lo=1)
        if self.W < 1 or self.N < 2 or self.G < 0 or self.K < 0:
            raise OuroborosError(f"ouroboros needs W >= 1, N >= 2, G >= 0, K >= 0; got W={self.W}, N={self.N}, "
                                 f"G={self.G}, K={self.K}")
        if (self.pool_load or self.pool_save) and not self.history:
            raise OuroborosError("ouroboros.pool_load / pool_save need history=true (the pool is cleared per prompt)")
        if self.pool_on_error not in ("raise", "empty"):
            raise OuroborosError(f"ouroboros.pool_on_error must be 'raise' or 'empty', got {self.pool_on_error!r}")

    def tree_models(self) -> tuple[str, ...]:
        """The models it gives token trees: the target when two or more phrases may hang at the trunk's tip, the
        draft model when it runs lookahead windows (phrase_drafting)."""
        return (("target",) if self.lengthening and self.K >= 2 else ()) + (("draft",) if self.phrase_drafting else ())

    def draft_nodes(self) -> tuple[int, str]:
        """(the most nodes one draft holds, what sets it): the target's (trunk + K branches of N - 1 tokens) or the
        draft model's (its lookahead window and phrases), the larger."""
        over = self.N - 2 if self.trunk_overshoot and self.phrase_drafting else 0
        target = self.gamma + over + (self.K * (self.N - 1) if self.lengthening else 0)
        drafter = (self.W + self.G) * (self.N - 1) if self.phrase_drafting else 0
        if drafter > target:
            return drafter, (f"the draft model's lookahead: W={self.W} window columns and G={self.G} phrases, "
                             f"N - 1={self.N - 1} deep")
        return target, (f"a trunk of up to {self.gamma + over} tokens and K={self.K} phrases of N - 1={self.N - 1} "
                        "tokens")

    def check_loaded(self, vocab_size: int) -> list[str]:
        """pool_load against the model's vocabulary, before anything is measured: OuroborosError, or (with
        pool_on_error=empty) the note that the run starts from an empty pool."""
        if not self.pool_load:
            return []
        why = PhrasePool().load(self.pool_load, {"vocab_size": vocab_size}, self.pool_on_error)
        return [f"ouroboros.pool_load: {why}; starting from an empty pool (pool_on_error=empty)"] if why else []

    def check_files(self) -> None:
        """pool_load parses (unless pool_on_error=empty: then a bad file starts an empty pool); pool_save is
        writable. The vocabulary is checked later, once the model is known."""
        if self.pool_load and self.pool_on_error == "raise":
            read_pool(self.pool_load)
        if self.pool_save:
            check_save(self.pool_save, "ouroboros.pool_save", "phrase pool", FORMAT)


def coherent_runs(trunk: list[int], preds: list[int], start: int) -> list[tuple[int, list[int]]]:
    """(key, phrase) for every maximal run s..e (start < s) with trunk[i] == preds[i]: key trunk[s-1], phrase
    trunk[s..e] + [preds[e + 1]] (each token the target's prediction after the tokens before it).
    Golden: trunk [1, 2, 3, 4], preds [1, 9, 3, 4, 7], start=1 -> [(2, [3, 4, 7])]."""
    out = []
    t = len(trunk)
    i = start + 1
    while i < t:
        if trunk[i] != preds[i]:
            i += 1
            continue
        s = i
        while i < t and trunk[i] == preds[i]:
            i += 1
        out.append((trunk[s - 1], trunk[s:i] + [preds[i]]))
    return out


def corrected_branch(tokens: list[int], nodes: list[int], tip: int, preds: list[int]) -> list[int]:
    """The target's greedy walk along a branch hung under node `tip`: matched prefix + the target's token at
    the first mismatch (or after the last node). Golden: branch [5, 6, 7], preds after tip 5, after 5 -> 6,
    after 6 -> 9  ->  [5, 6, 9]."""
    out = []
    c = preds[tip + 1]
    for n in nodes:
        if tokens[n] != c:
            break
        out.append(c)
        c = preds[n + 1]
    out.append(c)
    return out


class OuroborosProposer:
    needs_draft_model = True
    reads_logits = False
    tree_models: tuple[str, ...] = ("target", "draft")  # the drafter runs lookahead windows

    def __init__(self, cfg: OuroborosConfig, target: Backend, draft: Backend | None):
        self.cfg = cfg
        self.draft = check_pair(target, draft, "ouroboros")
        self.counters = self.draft.counters
        self.pool = PhrasePool(per_key=max(cfg.G, cfg.K, 1), max_phrases=cfg.max_pool_phrases,
                               max_bytes=cfg.max_pool_bytes)
        self._meta = {"vocab_size": target.vocab_size}
        if cfg.pool_load:
            self.load_note = self.pool.load(cfg.pool_load, self._meta, cfg.pool_on_error)
        self._inner: Proposer
        if cfg.phrase_drafting:
            la = LookaheadConfig(W=cfg.W, N=cfg.N, G=cfg.G, seed=cfg.seed)
            self._inner = LookaheadProposer(la, pool=self.pool, owns_pool=False)
        else:
            self._inner = VanillaProposer()
        self._drafted = 0
        self._tree = Draft()
        self._key = 0
        self._phrases: list[Phrase] = []
        self._branches: list[list[int]] = []
        self._drafting, self._lengthen, self._harvested = Drafting(), PoolUse(), Harvest()
        self._output = OutputIndexer(cfg.N - 1) if cfg.output_phrases else None

    def use_pool(self, pool: PhrasePool) -> None:
        """Share `pool` (contracts.SharesPool): lengthening, harvesting and the drafter's window all use it."""
        self.pool = pool
        if isinstance(self._inner, SharesPool):
            self._inner.use_pool(pool)

    def begin(self, prompt: list[int]) -> None:
        cfg = self.cfg
        self._drafting, self._lengthen, self._harvested = Drafting(), PoolUse(), Harvest()
        if cfg.history:
            self.pool.new_epoch()
        else:
            self.pool.clear()
        if cfg.prompt_phrases:
            add_prompt_phrases(self.pool, prompt, cfg.N - 1)
        if self._output is not None:
            self._output.begin(len(prompt))
        self.draft.prefill(prompt)
        self._inner.begin(prompt)

    def propose(self, state: DecodeState) -> Draft:

        cfg = self.cfg
        cap = min(cfg.gamma + (cfg.N - 2 if cfg.trunk_overshoot and cfg.phrase_drafting else 0), state.max_depth(),
                  self.draft.max_context - len(self.draft.tokens))
        gamma = min(cfg.gamma, cap)
        self._phrases, self._branches = [], []
        if gamma <= 0:
            self._drafted = 0
            self._tree = Draft()
            return self._tree
        f0 = self.draft.counters.forwards
        trunk = run_steps(self.draft, self._inner, cap, record=False, stop_at=gamma).output
        self._drafting.draft_forwards += self.draft.counters.forwards - f0
        self._drafting.drafted_tokens += len(trunk)  # c (tokens per draft forward) = drafted / forwards
        self._drafted = len(trunk)
        tree = Draft.chain(trunk, source="draft")
        room = state.max_depth() - len(trunk)
        if cfg.lengthening and cfg.K > 0 and room > 0:
            self._key = trunk[-1]
            self._phrases = self.pool.lookup(self._key, cfg.K)
            self._lengthen.lookups += 1
            if self._phrases:
                self._lengthen.hits += 1
                self._branches = hang_phrases(tree, self._phrases, len(trunk) - 1, room)
                self._lengthen.proposed.update(tree.sources[len(trunk):])
        self._tree = tree
        return tree

    def observe(self, verdict: Verdict, scores: Scores, state: DecodeState) -> None:
        t, path = self._drafted, verdict.path
        kept = min(len(path), t)  # the path runs down the trunk first, then (maybe) into one branch
        # Draft model holds prefix + the t trunk tokens: keep the accepted ones, append the rest + bonus.
        self.draft.rollback(t - kept)
        self.draft.append(verdict.tokens[kept:])
        if len(path) > t:
            srcs = self._tree.sources
            self._lengthen.accepted.update(srcs[i] for i in path[t:])
            for ph, nodes in zip(self._phrases, self._branches, strict=True):
                if path[-1] in nodes:
                    self.pool.touch(self._key, ph.tokens)  # refresh-on-reuse
        if self.cfg.harvest and t:
            self._harvest(verdict.preds)
        if self._output is not None:
            self._harvested.added["output"] += self._output.update(state.tokens, self.pool)

    def _harvest(self, preds: list[int]) -> None:
        tree, t, added, pool = self._tree, self._drafted, self._harvested.added, self.pool
        length = self.cfg.N - 1
        trunk = tree.tokens[:t]
        first_miss = next((i for i in range(t) if trunk[i] != preds[i]), t)
        for key, phrase in coherent_runs(trunk, preds, first_miss):
            added["verify"] += pool.add(key, phrase[:length], "verify")
        for ph, nodes in zip(self._phrases, self._branches, strict=True):
            fixed = corrected_branch(tree.tokens, nodes, t - 1, preds)[:length]
            if list(ph.tokens[: len(fixed)]) != fixed:
                pool.remove(self._key, ph.tokens)
                added["corrected"] += pool.add(self._key, fixed, "corrected")

    def stats(self) -> dict[str, float]:
        """Cumulative for the current prompt (no side effects)."""
        return {**self._drafting.flat(), **self._lengthen.flat("lengthen."), **self._harvested.flat(),
                **prefixed("draft.", self._inner.stats()), **pool_size(self.pool)}

    def checkpoint(self) -> None:
        """Save the pool (pool_save); the harness calls this after every prompt, so a stopped run keeps what the
        pool learnt."""
        if self.cfg.pool_save:
            self.pool.save(self.cfg.pool_save, self._meta)
