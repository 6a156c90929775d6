"""Closed-form check: with an i.i.d.-acceptance draft (rate alpha), speculative decoding's block efficiency is
Leviathan et al.'s E(gamma, alpha) = (1 - alpha^(gamma + 1)) / (1 - alpha) (arXiv 2211.17192, Eq. 1).

`simulated_block_efficiency` runs `speculative` through the ONE loop on the `sim` backend (iid token source)
and returns new tokens / target forwards. Knows nothing of hardware (the clock is irrelevant here).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ouroboros.loop.decode import decode
from ouroboros.strategies import build_proposer
from simulators.architectures import load_conf
from simulators.pair import make_pair


def expected_block_efficiency(alpha: float, gamma: int) -> float:
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


@dataclass
class ClosedFormResult:
    alpha: float
    gamma: int
    simulated: float
    expected: float
    forwards: int
    stderr: float          # standard error of `simulated` (steps treated as independent)

    @property
    def rel_error(self) -> float:
        return self.simulated / self.expected - 1


def simulated_block_efficiency(alpha: float, gamma: int, new_tokens: int = 20_000, seed: int = 0,
                               prompts: int = 4) -> ClosedFormResult:
    model = load_conf("model", "yi34b_6b")
    long_ctx = {side: {**model["profile"][side], "max_context": new_tokens + 512} for side in ("target", "draft")}
    pair = make_pair({**model, "profile": long_ctx}, load_conf("hardware", "h200"),
                     {"tokens": "iid", "alpha": alpha, "ctx": 0}, seed=seed)
    per_step: list[int] = []
    for p in pair.default_prompts(prompts, seed):
        prop = build_proposer("speculative", {"gamma": gamma}, pair.target, pair.draft)
        res = decode(pair.target, prop, p.ids, new_tokens // prompts)  # no EOS: every prompt runs its full budget
        # drop the last step: the budget cut there is not part of the closed form
        per_step += [r.new_tokens for r in res.steps[:-1]]
    mean = statistics.fmean(per_step)
    se = statistics.stdev(per_step) / math.sqrt(len(per_step))
    return ClosedFormResult(alpha, gamma, mean, expected_block_efficiency(alpha, gamma), len(per_step), se)
