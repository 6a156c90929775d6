"""Run strategies over a prompt set on one backend pair, in one process: the unit every entry point and
benchmark uses. Knows nothing of Hydra, wandb or tokenizers (prompts are token-id lists).

Warm-up (one short decode per strategy) runs before any clock reading, so lazy allocations and kernel
selection never land in a measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from ouroboros.backends.base import Backend
from ouroboros.decode import Verifier, decode, greedy_verifier
from ouroboros.metrics import PromptResult, RunResult
from ouroboros.sampling import SamplingConfig, SamplingVerifier
from ouroboros.strategies import build_proposer, get_spec


@dataclass
class StrategyRun:
    name: str                      # registry name
    params: dict[str, Any] = field(default_factory=dict)
    label: str | None = None       # display name (defaults to name)

    @property
    def display(self) -> str:
        return self.label or self.name


def verifier_for(sampling: SamplingConfig | None) -> Verifier:
    """The loop's verifier: greedy for `None` / temperature 0, else a fresh exact sampling verifier (one per run:
    it carries the run's per-prompt random stream)."""
    if sampling is None or sampling.greedy:
        return greedy_verifier
    return SamplingVerifier(sampling)


def run_strategy(run: StrategyRun, target: Backend, draft: Backend | None, prompts: Sequence[Sequence[int]],
                 max_new_tokens: int | Sequence[int], eos_ids: Sequence[int] = (),
                 prompt_ids: Sequence[str] | None = None,
                 warmup: bool = True, progress: bool = False, sampling: SamplingConfig | None = None,
                 done: dict[str, PromptResult] | None = None,
                 on_prompt: Callable[[PromptResult], None] | None = None) -> RunResult:
    """`sampling=None` or temperature 0: greedy verification; else the exact sampling verifier. `done`: results
    of prompts finished by an earlier, stopped run (kept, not decoded again); `on_prompt` is called with each
    prompt decoded now, as soon as it finishes."""
    spec = get_spec(run.name)
    verifier = verifier_for(sampling)
    proposer = build_proposer(run.name, run.params, target, draft if spec.needs_draft_model else None)
    budgets = [max_new_tokens] * len(prompts) if isinstance(max_new_tokens, int) else list(max_new_tokens)
    ids = list(prompt_ids) if prompt_ids is not None else [str(i) for i in range(len(prompts))]
    done = done or {}
    todo = [(pid, p, b) for pid, p, b in zip(ids, prompts, budgets, strict=True) if pid not in done]
    if warmup and todo:
        decode(target, proposer, todo[0][1], min(8, todo[0][2]), eos_ids, verifier=verifier)
    results = dict(done)
    for pid, prompt, budget in tqdm(todo, desc=run.display, disable=not progress, leave=False):
        res = decode(target, proposer, prompt, budget, eos_ids, verifier=verifier, prompt_id=pid)
        proposer.checkpoint()
        results[pid] = res
        if on_prompt is not None:
            on_prompt(res)
    return RunResult(strategy=run.display, prompts=[results[pid] for pid in ids])
