"""speculative (SpS; Leviathan et al. 2023, Chen et al. 2023): a draft model proposes a chain of gamma
tokens greedily; the target verifies the chain in one forward.

The drafter is itself the decode loop (`run_steps`) with the vanilla proposer, run on the draft backend
(DESIGN.md: "a proposer that needs a model is itself a loop on that model"). After verification the draft
backend is rolled back to the accepted prefix and the target's tokens are appended to it (they become
pending and are fed with the next draft forward).
"""

from __future__ import annotations

from dataclasses import dataclass

from ouroboros.backends.base import Backend, OuroborosError, Scores
from ouroboros.draft import Draft
from ouroboros.strategies.base import DecodeState
from ouroboros.strategies.vanilla import VanillaProposer
from ouroboros.verify import Verdict


@dataclass
class SpeculativeConfig:
    gamma: int = 4          # draft length (paper's gamma)

    def __post_init__(self) -> None:
        if self.gamma < 1:
            raise OuroborosError(f"speculative.gamma must be >= 1, got {self.gamma}")


def check_pair(target: Backend, draft: Backend | None, who: str) -> Backend:
    if draft is None:
        raise OuroborosError(f"strategy '{who}' needs a draft model (set model.draft)")
    if draft.vocab_size != target.vocab_size:
        raise OuroborosError(f"draft and target vocabularies differ ({draft.vocab_size} vs {target.vocab_size}): "
                             "speculative decoding needs one shared tokenizer")
    return draft


class SpeculativeProposer:
    needs_draft_model = True

    def __init__(self, cfg: SpeculativeConfig, target: Backend, draft: Backend | None):
        self.cfg = cfg
        self.draft = check_pair(target, draft, "speculative")
        self.counters = self.draft.counters
        self._inner = VanillaProposer()
        self._drafted = 0

    def begin(self, prompt: list[int]) -> None:
        self.draft.prefill(prompt)

    def propose(self, state: DecodeState) -> Draft:
        from ouroboros.decode import run_steps  # the inner loop (import here: decode imports strategies.base)

        gamma = min(self.cfg.gamma, state.max_depth(), self.draft.max_context - len(self.draft.tokens))
        if gamma <= 0:
            self._drafted = 0
            return Draft()
        res = run_steps(self.draft, self._inner, gamma)
        self._drafted = len(res.output)
        return Draft.chain(res.output, source="draft")

    def observe(self, verdict: Verdict, scores: Scores, state: DecodeState) -> None:
        # Draft model holds prefix + d_1..d_gamma; keep d_1..d_m, then append the target's new token(s).
        m = len(verdict.path)
        self.draft.rollback(self._drafted - m)
        self.draft.append(verdict.tokens[m:])

    def stats(self) -> dict[str, float]:
        return {}

