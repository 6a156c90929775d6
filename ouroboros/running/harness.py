"""Run strategies over a prompt set on one backend pair, in one process: the unit every entry point and
benchmark uses. Knows nothing of Hydra, wandb or tokenizers (prompts are token-id lists).

A `PromptRunner` decodes one prompt at a time and keeps its state (proposer, phrase pool, draft-length
schedule) from prompt to prompt: `StrategyRunner` (ours, through the one decode loop) and `PeerRunner`
(transformers' `generate`, ouroboros/running/peers.py) have the same shape. `run_prompts` runs one runner over the
prompts; `run_interleaved` runs several prompt by prompt (every runner decodes prompt i before any starts
prompt i + 1; the order rotates per prompt), so background load and drift on a shared machine hit all alike.
Either way each runner sees the same prompts in the same order, so its outputs do not depend on the mode.

Warm-up (one short decode per runner) runs before any clock reading, so lazy allocations and kernel
selection never land in a measurement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tqdm.auto import tqdm

from ouroboros.backends.base import Backend
from ouroboros.loop.contracts import ChargesHost
from ouroboros.loop.decode import Verifier, decode, greedy_verifier
from ouroboros.loop.metrics import PromptResult, RunResult
from ouroboros.loop.sampling import SamplingConfig, SamplingVerifier
from ouroboros.strategies import Proposer, build_proposer, get_spec

WARMUP_TOKENS = 8   # the warm-up decode's budget (at most the first prompt's)


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


class PromptRunner(Protocol):
    label: str

    def warm_up(self, prompt: Sequence[int], budget: int) -> None: ...
    def __call__(self, prompt: Sequence[int], budget: int, prompt_id: str) -> PromptResult: ...


class StrategyRunner:
    """One of our strategies on a backend pair: its proposer and verifier live as long as the runner."""

    def __init__(self, run: StrategyRun, target: Backend, draft: Backend | None, eos_ids: Sequence[int] = (),
                 sampling: SamplingConfig | None = None):
        self.label = run.display
        self.target, self.eos_ids = target, tuple(eos_ids)
        self.verifier = verifier_for(sampling)
        self._run, self._draft = run, draft
        self.proposer = self._new_proposer()

    def _new_proposer(self) -> Proposer:
        run, target = self._run, self.target
        proposer = build_proposer(run.name, run.params, target,
                                  self._draft if get_spec(run.name).needs_draft_model else None)
        # a modelled clock charges the strategy's measured host time per step (simulators/host.py)
        return target.host_timed(run.name, proposer) if isinstance(target, ChargesHost) else proposer

    def warm_up(self, prompt: Sequence[int], budget: int) -> None:
        """An untimed decode of the prompt's first tokens on a throw-away proposer: the models warm up, and what
        the decode taught a proposer that keeps state across prompts (a global tree, a matrix, a pool, a draft
        length) does not reach the measured prompts (records of schema 1 were warmed up on the measured one)."""
        decode(self.target, self._new_proposer(), list(prompt), min(WARMUP_TOKENS, budget), self.eos_ids,
               verifier=self.verifier)

    def __call__(self, prompt: Sequence[int], budget: int, prompt_id: str) -> PromptResult:
        res = decode(self.target, self.proposer, list(prompt), budget, self.eos_ids, verifier=self.verifier,
                     prompt_id=prompt_id)
        self.proposer.checkpoint()
        return res


@dataclass
class Job:
    """One runner's part in `run_prompts` / `run_interleaved`: its budgets (one per prompt), the results of
    prompts an earlier, stopped run finished (`done`: kept, not decoded again) and `on_prompt`, called with each
    prompt decoded now as soon as it finishes."""

    runner: PromptRunner
    budgets: list[int]
    done: dict[str, PromptResult] = field(default_factory=dict)
    on_prompt: Callable[[PromptResult], None] | None = None
    results: dict[str, PromptResult] = field(default_factory=dict)

    def result(self, ids: Sequence[str]) -> RunResult:
        return RunResult(strategy=self.runner.label, prompts=[self.results[pid] for pid in ids])


def budgets_of(max_new_tokens: int | Sequence[int], n: int) -> list[int]:
    return [max_new_tokens] * n if isinstance(max_new_tokens, int) else list(max_new_tokens)


def run_interleaved(jobs: Sequence[Job], prompts: Sequence[Sequence[int]], ids: Sequence[str],
                    warmup: bool = True, progress: bool = False,
                    on_round: Callable[[int], None] | None = None) -> list[RunResult]:
    """Every job over every prompt, prompt by prompt: prompt i is decoded by each job (order rotating with i)
    before any job starts prompt i + 1. A job's prompts in `done` are kept, not decoded again; `on_round(i)` is
    called after a prompt that some job decoded now."""
    n = len(jobs)
    for job in jobs:
        job.results = dict(job.done)
        first = next((i for i, pid in enumerate(ids) if pid not in job.done), None)
        if warmup and first is not None:
            job.runner.warm_up(prompts[first], job.budgets[first])
    bar = tqdm(list(enumerate(ids)), desc="prompts", disable=not progress, leave=False)
    for i, pid in bar:
        todo = [job for job in (jobs[(i + k) % n] for k in range(n)) if pid not in job.results]
        for job in todo:
            res = job.runner(prompts[i], job.budgets[i], pid)
            job.results[pid] = res
            if job.on_prompt is not None:
                job.on_prompt(res)
        if todo and on_round is not None:
            on_round(i)
    bar.close()
    return [job.result(ids) for job in jobs]


def run_prompts(runner: PromptRunner, prompts: Sequence[Sequence[int]], max_new_tokens: int | Sequence[int],
                prompt_ids: Sequence[str] | None = None, warmup: bool = True, progress: bool = False,
                done: dict[str, PromptResult] | None = None,
                on_prompt: Callable[[PromptResult], None] | None = None) -> RunResult:
    """One runner over the prompts (`run_interleaved` with one job)."""
    ids = list(prompt_ids) if prompt_ids is not None else [str(i) for i in range(len(prompts))]
    job = Job(runner, budgets_of(max_new_tokens, len(prompts)), dict(done or {}), on_prompt)
    return run_interleaved([job], prompts, ids, warmup, progress)[0]


def run_strategy(run: StrategyRun, target: Backend, draft: Backend | None, prompts: Sequence[Sequence[int]],
                 max_new_tokens: int | Sequence[int], eos_ids: Sequence[int] = (),
                 prompt_ids: Sequence[str] | None = None,
                 warmup: bool = True, progress: bool = False, sampling: SamplingConfig | None = None,
                 done: dict[str, PromptResult] | None = None,
                 on_prompt: Callable[[PromptResult], None] | None = None) -> RunResult:
    """`sampling=None` or temperature 0: greedy verification; else the exact sampling verifier. `done`: results
    of prompts finished by an earlier, stopped run (kept, not decoded again); `on_prompt` is called with each
    prompt decoded now, as soon as it finishes."""
    return run_prompts(StrategyRunner(run, target, draft, eos_ids, sampling), prompts, max_new_tokens, prompt_ids,
                       warmup, progress, done, on_prompt)
