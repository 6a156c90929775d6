"""cascade (Chen et al. 2023, "Cascade Speculative Drafting for Even Faster LLM Inference"), greedy form.

- vertical cascade: the draft model's gamma tokens are themselves produced by speculative decoding with a
  cheaper drafter (`run_steps` on the draft backend with an inner proposer). The cheaper drafter here is
  prompt lookup over the draft's own context (`vertical: pld`), the paper's statistical bottom model being
  the cheapest level; `vertical: none` drafts token by token (vanilla on the draft model).
- horizontal cascade: later draft positions come from a cheaper drafter: after the draft model's gamma
  tokens, up to `horizontal` more tokens are appended by prompt lookup over prompt + generated + draft
  (source "prompt"). CSD's insight: later positions are accepted less often, so a cheaper drafter suffices.

With vertical "none" and horizontal 0 this is `speculative`. Deviation (flagged): CSD's horizontal levels
are smaller models and its vertical levels can be several models deep; the registry hands a strategy one
draft model, so the cheaper levels here are model-free.

This module knows nothing of the loop's bookkeeping.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ouroboros.backends.base import Backend, Scores
from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import run_steps
from ouroboros.loop.draft import Draft
from ouroboros.loop.verify import Verdict
from ouroboros.strategies.base import DecodeState, Proposer
from ouroboros.strategies.pld import PLDConfig, PLDProposer, lookup_continuation
from ouroboros.strategies.speculative import check_pair
from ouroboros.strategies.stats import Drafting, Horizontal, prefixed
from ouroboros.strategies.vanilla import VanillaProposer


@dataclass
class CascadeConfig:
    gamma: int = 4              # draft-model tokens per step
    vertical: str = "pld"       # drafter of the draft model: "pld" or "none"
    horizontal: int = 4         # extra later positions from prompt lookup (0 = no horizontal cascade)
    max_ngram: int = 3          # prompt-lookup settings shared by both cheaper levels
    min_ngram: int = 1
    num_pred_tokens: int = 4    # vertical level's draft length per draft-model step

    def __post_init__(self) -> None:
        check_range("cascade.gamma", self.gamma, lo=1)
        if self.vertical not in ("pld", "none"):
            raise OuroborosError(f"cascade.vertical must be 'pld' or 'none', got {self.vertical!r}")
        check_range("cascade.horizontal", self.horizontal, lo=0)
        PLDConfig(self.max_ngram, self.min_ngram, self.num_pred_tokens, "last")  # validates the shared settings


class CascadeProposer:
    needs_draft_model = True
    reads_logits = False
    tree_models: tuple[str, ...] = ()

    def __init__(self, cfg: CascadeConfig, target: Backend, draft: Backend | None):
        self.cfg = cfg
        self.draft = check_pair(target, draft, "cascade")
        self.counters = self.draft.counters
        self._inner: Proposer = (PLDProposer(PLDConfig(cfg.max_ngram, cfg.min_ngram, cfg.num_pred_tokens, "last"))
                                 if cfg.vertical == "pld" else VanillaProposer())
        self._drafted = 0
        self._drafting, self._horizontal = Drafting(), Horizontal()

    def begin(self, prompt: list[int]) -> None:
        self._drafting, self._horizontal = Drafting(), Horizontal()
        self.draft.prefill(prompt)
        self._inner.begin(prompt)

    def propose(self, state: DecodeState) -> Draft:

        cfg = self.cfg
        gamma = min(cfg.gamma, state.max_depth(), self.draft.max_context - len(self.draft.tokens))
        if gamma <= 0:
            self._drafted = 0
            return Draft()
        f0 = self.draft.counters.forwards
        trunk = run_steps(self.draft, self._inner, gamma, record=False).output
        self._drafting.draft_forwards += self.draft.counters.forwards - f0
        self._drafting.drafted_tokens += len(trunk)
        self._drafted = len(trunk)
        h = min(cfg.horizontal, state.max_depth() - len(trunk))
        if h > 0:
            ctx = np.asarray(state.tokens + trunk, dtype=np.int64)
            more = lookup_continuation(ctx, cfg.max_ngram, cfg.min_ngram, h, "last")
            self._horizontal.hits += bool(more)
            self._horizontal.proposed += len(more)
            trunk = trunk + more
        tree = Draft.chain(trunk, source="draft")
        tree.sources[self._drafted:] = ["prompt"] * (len(trunk) - self._drafted)
        return tree

    def observe(self, verdict: Verdict, scores: Scores, state: DecodeState) -> None:
        t, m = self._drafted, len(verdict.path)
        kept = min(m, t)
        self.draft.rollback(t - kept)
        self.draft.append(verdict.tokens[kept:])
        self._horizontal.accepted += max(0, m - t)

    def stats(self) -> dict[str, float]:
        return {**self._drafting.flat(), **self._horizontal.flat(), **prefixed("vertical.", self._inner.stats())}

    def checkpoint(self) -> None:
        pass
