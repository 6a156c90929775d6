"""rest (He et al. 2024, "REST: Retrieval-Based Speculative Decoding"): each step, the longest suffix of the
context (up to max_suffix tokens) is looked up in a datastore; the continuations of its occurrences are
merged into a count trie and the num_nodes most frequent nodes become the draft tree (source "datastore").

The datastore comes from a file built by `python -m ouroboros.rest_datastore` (`datastore: path`) or, for
tests and toy runs, from token ids given inline (`corpus: [...]`, one document). With neither, only the simulator
has one to give (its stand-in, put in `datastore` where the run builds the proposer: ouroboros/running/executor.py); a
real
backend refuses the run before any work (ouroboros/config.py, `NO_DATASTORE`).

This module knows nothing of models; retrieval lives in `ouroboros/strategies/datastore.py`.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field

from ouroboros.backends.base import Backend
from ouroboros.errors import OuroborosError
from ouroboros.loop.draft import CANDIDATE, Draft
from ouroboros.loop.verify import Verdict
from ouroboros.strategies.base import DecodeState, ModelFreeProposer
from ouroboros.strategies.datastore import Datastore, continuation_tree
from ouroboros.strategies.stats import PoolUse

NO_DATASTORE = ("rest needs a datastore: strategy=rest strategy.params.datastore=PATH (a .npz built by `python -m "
                "ouroboros.rest_datastore`; in a sweep too); only backend=sim has a stand-in of its own")


class NeedsDatastore(OuroborosError):
    """REST asked for with no datastore where the backend has no stand-in (a sweep of several strategies skips it)."""

    def __init__(self) -> None:
        super().__init__(NO_DATASTORE)


@dataclass
class RestConfig:
    datastore: str | None = None     # .npz from `python -m ouroboros.rest_datastore` (none: backend=sim's stand-in)
    corpus: list[int] = field(default_factory=list)  # or inline token ids (one document)
    max_suffix: int = 16             # longest context suffix tried (REST matches suffixes of up to 16 tokens)
    min_suffix: int = 1
    depth: int = 8                   # continuation length retrieved (draft depth cap)
    num_nodes: int = 32              # tree cap (REST verifies up to 64 candidate tokens on a GPU; CPU: fewer)
    max_occurrences: int = 256       # occurrences whose continuations are counted
    CHAINS = "num_nodes=1"           # (not an option) the configuration that drafts chains only

    def __post_init__(self) -> None:
        if self.datastore and self.corpus:
            raise OuroborosError("rest takes one of datastore (a .npz path) or corpus (token ids), not both")
        if not 1 <= self.min_suffix <= self.max_suffix:
            raise OuroborosError(f"rest needs 1 <= min_suffix <= max_suffix, got {self.min_suffix}, {self.max_suffix}")
        if self.depth < 1 or self.num_nodes < 1 or self.max_occurrences < 1:
            raise OuroborosError("rest.depth, num_nodes and max_occurrences must be >= 1")

    def check_files(self) -> None:
        """The datastore exists and parses (loaded once: the proposer reuses it)."""
        if self.datastore:
            _load(self.datastore)

    def tree_models(self) -> tuple[str, ...]:
        """The models it gives token trees: none when a draft is one node (num_nodes=1)."""
        return ("target",) if self.num_nodes > 1 else ()

    def check_loaded(self, vocab_size: int) -> list[str]:
        """The datastore's (or corpus') tokens against the model's vocabulary, before anything is measured."""
        top = _load(self.datastore).max_token if self.datastore else max(self.corpus, default=-1)
        if top >= vocab_size:
            raise OuroborosError(f"REST {'datastore' if self.datastore else 'corpus'} holds token {top}, outside the "
                                 f"model's vocabulary [0, {vocab_size}): built with another tokenizer?")
        return []


@functools.lru_cache(maxsize=4)
def _load(path: str) -> Datastore:
    return Datastore.load(path)


class RestProposer(ModelFreeProposer):
    needs_draft_model = False
    context_only = True
    tree_models: tuple[str, ...] = ("target",)

    def __init__(self, cfg: RestConfig, target: Backend | None = None, draft=None):
        super().__init__()
        if not cfg.datastore and not cfg.corpus:
            raise NeedsDatastore()
        self.cfg = cfg
        self.ds = _load(cfg.datastore) if cfg.datastore else Datastore.build([list(cfg.corpus)])
        if target is not None and self.ds.max_token >= target.vocab_size:
            raise OuroborosError(f"REST datastore holds token {self.ds.max_token}, outside the model's vocabulary "
                                 f"[0, {target.vocab_size}): built with another tokenizer?")
        self._use = PoolUse()

    def begin(self, prompt: list[int]) -> None:
        self._use = PoolUse(proposed=Counter(datastore=0), accepted=Counter(datastore=0))

    def propose(self, state: DecodeState) -> Draft:
        c, use = self.cfg, self._use
        depth = min(c.depth, state.max_depth())
        if depth <= 0:
            return Draft()
        ctx = state.tokens[-c.max_suffix:]
        conts = self.ds.continuations(ctx, c.max_suffix, c.min_suffix, depth, c.max_occurrences)
        use.lookups += 1
        if not conts:
            return Draft()
        use.hits += 1
        tokens, parents = continuation_tree(conts, c.num_nodes)
        n = len(tokens)
        trunk = 0
        while trunk < n and parents[trunk] == trunk - 1:
            trunk += 1
        use.proposed["datastore"] += n
        return Draft(tokens=tokens, parents=parents, kinds=[CANDIDATE] * n, sources=["datastore"] * n,
                     depths=_depths(parents), trunk_len=trunk)

    def observe(self, verdict: Verdict, scores, state: DecodeState) -> None:
        self._use.accepted["datastore"] += len(verdict.path)

    def stats(self) -> dict[str, float]:
        return self._use.flat()


def _depths(parents: list[int]) -> list[int]:
    d: list[int] = []
    for p in parents:
        d.append(0 if p < 0 else d[p] + 1)
    return d
