"""speculative (SpS; Leviathan et al. 2023, Chen et al. 2023): a draft model proposes a chain of gamma
tokens greedily; the target verifies the chain in one forward.

The drafter is itself the decode loop (`run_steps`) with the vanilla proposer, run on the draft backend
(docs/design.md: "a proposer that needs a model runs this same loop on that model"). After verification the draft
backend is rolled back to the accepted prefix and the target's tokens are appended to it (they become
pending and are fed with the next draft forward).

`schedule`: "constant" drafts gamma tokens every step; "hf" is the draft-length schedule of transformers' assisted
generation (`generate(assistant_model=...)`, `num_assistant_tokens_schedule="heuristic"`, the default from 4.36 to
4.44 and the likely SpS baseline of the Ouroboros paper): the length starts at gamma (HF: 5), grows by 2 after a
fully accepted draft, else shrinks by 1 (never below 1), and is kept across prompts (HF writes it back into the
assistant's generation config after each `generate`). As in HF, "fully accepted" compares the accepted count with
the scheduled length, not with a length cut short by the budget. Only the draft length changes, so it is lossless
for the same reason as the constant schedule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ouroboros.backends.base import Backend, Scores
from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import run_steps
from ouroboros.loop.draft import Draft
from ouroboros.loop.verify import Verdict
from ouroboros.strategies.base import DecodeState
from ouroboros.strategies.vanilla import VanillaProposer

if TYPE_CHECKING:  # torch is needed by sampled drafts only (imported there)
    import torch


class _DraftSampler:
    """Inner-loop verifier for the draft model: draws each draft token from q and keeps q's rows, so the target
    can apply the rejection rule (ouroboros.loop.sampling, rule 2). Its draws come from the outer run's sampling
    stream when there is one (`outer`), else from its own seeded stream (greedy runs)."""

    needs_logits = True
    samples = False  # its inner proposer (vanilla) draws nothing of its own

    def __init__(self, cfg):
        from ouroboros.loop.sampling import SamplingVerifier

        self._own = SamplingVerifier(cfg)
        self.cfg = cfg
        self.outer = None
        self.rows: list[torch.Tensor] = []

    def begin(self, key: str) -> None:
        self._own.begin("draft:" + key)

    def __call__(self, draft: Draft, scores: Scores, state: DecodeState) -> Verdict:
        import torch

        from ouroboros.loop.sampling import warp

        q = warp(scores.logits, self.cfg)  # [1, V] (the inner proposer is vanilla: empty draft)
        self.rows.append(q[0])
        gen = (self.outer or self._own).generator(q.device)
        x = int(torch.multinomial(q[0], 1, generator=gen))
        return Verdict(path=[], tokens=[x], preds=[x], n_match=0)


SCHEDULES = ("constant", "hf")


def hf_next_length(n: int, accepted: int) -> int:
    """transformers' heuristic schedule (`AssistedCandidateGenerator.update_candidate_strategy`): the next draft
    length after `accepted` of `n` scheduled draft tokens were accepted. hf_next_length(5, 5) == 7,
    hf_next_length(5, 2) == 4, hf_next_length(1, 0) == 1."""
    return n + 2 if accepted == n else max(1, n - 1)


@dataclass
class SpeculativeConfig:
    gamma: int = 4                  # draft length (paper's gamma)
    # Draft-side sampling (only matters when the run samples): 0 = greedy draft (a deterministic chain,
    # verified by sampling at each node); > 0 = the chain is drawn from q and verified by Leviathan's rule.
    draft_temperature: float = 0.0
    draft_top_p: float = 1.0
    draft_top_k: int = 0
    draft_seed: int = 0
    # Draft-length schedule: "constant" (gamma every step) or "hf" (transformers' heuristic: start at gamma,
    # +2 after a fully accepted draft, else -1, at least 1; kept across prompts).
    schedule: str = "constant"

    def __post_init__(self) -> None:
        check_range("speculative.gamma", self.gamma, lo=1)
        if self.schedule not in SCHEDULES:
            raise OuroborosError(f"speculative.schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        check_range("speculative.draft_temperature", self.draft_temperature, lo=0)
        if math.isinf(self.draft_temperature):   # inf flattens q to uniform: not a drafter
            raise OuroborosError("speculative.draft_temperature must be a finite number >= 0, got inf")
        check_range("speculative.draft_top_p", self.draft_top_p, lo=0, hi=1, lo_open=True)
        check_range("speculative.draft_top_k", self.draft_top_k, lo=0)


def check_pair(target: Backend, draft: Backend | None, who: str) -> Backend:
    if draft is None:
        raise OuroborosError(f"strategy '{who}' needs a draft model (set model.draft)")
    if draft.vocab_size != target.vocab_size:
        raise OuroborosError(f"draft and target vocabularies differ ({draft.vocab_size} vs {target.vocab_size}): "
                             "speculative decoding needs one shared tokenizer")
    return draft


class SpeculativeProposer:
    needs_draft_model = True
    reads_logits = False
    tree_models: tuple[str, ...] = ()

    def __init__(self, cfg: SpeculativeConfig, target: Backend, draft: Backend | None):
        self.cfg = cfg
        self.draft = check_pair(target, draft, "speculative")
        self.counters = self.draft.counters
        self._inner = VanillaProposer()
        self._drafted = 0
        self._n = cfg.gamma  # scheduled draft length (changes only with schedule="hf"; kept across prompts)
        self._sampler: _DraftSampler | None = None
        if cfg.draft_temperature > 0:
            from ouroboros.loop.sampling import SamplingConfig

            self._sampler = _DraftSampler(SamplingConfig(cfg.draft_temperature, cfg.draft_top_p, cfg.draft_top_k,
                                                         cfg.draft_seed))

    def begin(self, prompt: list[int]) -> None:
        self.draft.prefill(prompt)
        if self._sampler is not None:
            self._sampler.begin(",".join(map(str, prompt)))

    def propose(self, state: DecodeState) -> Draft:

        gamma = min(self._n, state.max_depth(), self.draft.max_context - len(self.draft.tokens))
        if gamma <= 0:
            self._drafted = 0
            return Draft()
        if self._sampler is None:
            res = run_steps(self.draft, self._inner, gamma, record=False)
            self._drafted = len(res.output)
            return Draft.chain(res.output, source="draft")
        import torch

        self._sampler.rows.clear()
        self._sampler.outer = state.sampler
        res = run_steps(self.draft, self._inner, gamma, verifier=self._sampler, record=False)
        self._drafted = len(res.output)
        d = Draft.chain(res.output, source="draft")
        d.meta["q"] = torch.stack(self._sampler.rows[: len(res.output)])  # [gamma, V] draft distributions
        return d

    def observe(self, verdict: Verdict, scores: Scores, state: DecodeState) -> None:
        # Draft model holds prefix + d_1..d_gamma; keep d_1..d_m, then append the target's new token(s).
        m = len(verdict.path)
        if self.cfg.schedule == "hf":
            self._n = hf_next_length(self._n, m)
        self.draft.rollback(self._drafted - m)
        self.draft.append(verdict.tokens[m:])

    def stats(self) -> dict[str, float]:
        return {}

    def checkpoint(self) -> None:
        pass

