"""Metric records and their ONE definition each. Sinks (JSONL, wandb, console) only write these.

Definitions (docs/design.md and the README point here):
- new tokens: tokens emitted after the prompt (EOS included when emitted; never past max_new_tokens).
- elapsed_s: wall seconds (hf) or modelled seconds (sim) from the start of prefill to the last token;
  prefill_s is the part spent prefilling. Never mix wall and modelled time in one comparison.
- tokens/s: total new tokens / total elapsed over all prompts (the paper's convention, `tokens_per_s`);
  `mean_tokens_per_s` is the per-prompt mean of new_tokens / elapsed_s (Spec-Bench's convention).
- speedup: vanilla elapsed / strategy elapsed on the same prompts, backend, dtype and hardware, in one run
  (computed by `speedup`, never across runs).
- block efficiency eta = new tokens / target forwards (includes the bonus token; prefill not counted).
- accepted length A = accepted draft tokens / target forwards (excludes the bonus token).
- #Match = sum_i [d_i == v_i] over the draft trunk d and the target's predictions v at the same positions
  (paper Eq. 10); reported per target forward; always >= A on chain drafts.
- draft forwards / tokens: forwards of the proposer's own model(s); c = draft tokens emitted per draft
  forward is strategy-specific and reported by the proposer's stats.
- per-position acceptance: proposed[i] = steps whose deepest candidate path reached position i,
  accepted[i] = steps that accepted position i (vLLM's convention).
- time split per step: draft_s (propose), verify_s (target forward + verification), other_s (commit,
  observe: pool harvesting, draft rollback, bookkeeping).
- proposer stats are per-prompt counters summed over prompts, except gauges (`pool_phrases`, `pool_bytes`:
  the pool's size at the end of a prompt), where a run's total is the value after its last prompt.

This module knows nothing of models or strategies; it only aggregates numbers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field


@dataclass(slots=True)
class StepRecord:
    n_nodes: int                 # draft nodes scored (candidates + probes)
    n_candidates: int
    max_depth: int               # longest candidate root path (positions proposed this step)
    accepted: int                # accepted draft tokens (bonus excluded)
    new_tokens: int              # tokens emitted this step (after EOS / budget cut)
    n_match: int                 # #Match on the trunk
    target_tokens: int           # tokens fed to the target forward (pending + nodes)
    draft_forwards: int
    draft_tokens: int
    draft_s: float
    verify_s: float
    other_s: float
    accepted_sources: dict[str, int] | None = None


@dataclass
class PromptResult:
    prompt_id: str
    prompt_len: int
    output: list[int]
    elapsed_s: float
    prefill_s: float
    stop_reason: str             # "eos" | "budget" | "context"
    steps: list[StepRecord] = field(default_factory=list)
    proposer_stats: dict[str, float] = field(default_factory=dict)

    @property
    def new_tokens(self) -> int:
        return len(self.output)

    @property
    def target_forwards(self) -> int:
        return len(self.steps)

    def summary(self) -> dict:
        s = self.steps
        fw = max(len(s), 1)
        return {
            "prompt_id": self.prompt_id,
            "prompt_len": self.prompt_len,
            "new_tokens": self.new_tokens,
            "elapsed_s": self.elapsed_s,
            "prefill_s": self.prefill_s,
            "tokens_per_s": self.new_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0,
            "stop_reason": self.stop_reason,
            "target_forwards": len(s),
            "block_efficiency": self.new_tokens / fw,
            "accepted_tokens": sum(r.accepted for r in s),
            "match_tokens": sum(r.n_match for r in s),
            "accepted_length": sum(r.accepted for r in s) / fw,
            "match_per_forward": sum(r.n_match for r in s) / fw,
            "draft_forwards": sum(r.draft_forwards for r in s),
            "proposer_stats": dict(self.proposer_stats),
        }


def per_position(steps: list[StepRecord]) -> tuple[list[int], list[int]]:
    """(proposed[i], accepted[i]) counts per draft position i."""
    depth = max((r.max_depth for r in steps), default=0)
    proposed, accepted = [0] * depth, [0] * depth
    for r in steps:
        for i in range(r.max_depth):
            proposed[i] += 1
        for i in range(r.accepted):
            accepted[i] += 1
    return proposed, accepted


@dataclass
class RunResult:
    """Aggregates over the prompts of one strategy in one run."""

    strategy: str
    prompts: list[PromptResult]
    serving: dict | None = None     # served under load (ouroboros/serving/batch.py ServeResult.summary), else None

    def totals(self) -> dict:
        """`combine_summaries` over every prompt, plus what needs the steps (time split, per-position
        acceptance, accepted tokens by source) and the proposers' summed stats."""
        steps = [r for p in self.prompts for r in p.steps]
        proposed, accepted = per_position(steps)
        src_acc: Counter[str] = Counter()
        for r in steps:
            if r.accepted_sources:
                src_acc.update(r.accepted_sources)
        return {
            "strategy": self.strategy,
            **combine_summaries([p.summary() for p in self.prompts]),
            "draft_tokens": sum(r.draft_tokens for r in steps),
            "draft_s": sum(r.draft_s for r in steps),
            "verify_s": sum(r.verify_s for r in steps),
            "other_s": sum(r.other_s for r in steps),
            "prefill_s": sum(p.prefill_s for p in self.prompts),
            "position_proposed": proposed,
            "position_accepted": accepted,
            "accepted_by_source": dict(src_acc),
            "proposer_stats": sum_stats([p.proposer_stats for p in self.prompts]),
        }


GAUGES = frozenset({"pool_phrases", "pool_bytes"})  # sizes at the end of a prompt, not per-prompt counts


def sum_stats(per_prompt: list[dict[str, float]]) -> dict[str, float]:
    """Proposer stats over prompts in order: counters add up; gauges (`GAUGES`, also under a prefix such as
    `draft.pool_phrases`) keep the last prompt's value."""
    out: dict[str, float] = {}
    for st in per_prompt:
        for k, v in st.items():
            if k.rsplit(".", 1)[-1] in GAUGES:
                out[k] = v
            else:
                out[k] = out.get(k, 0) + v
    return out


def speedup_mean_speed(baseline: RunResult, other: RunResult) -> float:
    """Spec-Bench's speedup: the mean over prompts of other's tokens/s over the mean of baseline's (its
    evaluation/speed.py; `speedup` is the paper's, total time over total time). Same prompts in both runs."""
    if [p.prompt_id for p in baseline.prompts] != [p.prompt_id for p in other.prompts]:
        raise ValueError("speedup needs the same prompts in both runs")

    def mean_speed(r: RunResult) -> float:
        speeds = [p.new_tokens / p.elapsed_s for p in r.prompts if p.elapsed_s > 0]
        return sum(speeds) / len(speeds) if speeds else 0.0

    mb = mean_speed(baseline)
    return mean_speed(other) / mb if mb > 0 else float("inf")


def speedup(baseline: RunResult, other: RunResult) -> float:
    """baseline elapsed / other elapsed over the same prompts (raises if the prompt sets differ)."""
    a = [p.prompt_id for p in baseline.prompts]
    b = [p.prompt_id for p in other.prompts]
    if a != b:
        raise ValueError("speedup needs the same prompts in both runs")
    tb = sum(p.elapsed_s for p in baseline.prompts)
    to = sum(p.elapsed_s for p in other.prompts)
    return tb / to if to > 0 else float("inf")


def step_dict(r: StepRecord) -> dict:
    return asdict(r)


def prompt_dict(p: PromptResult) -> dict:
    """A PromptResult as plain data, steps included (a partial run's line in the records file)."""
    return asdict(p)


def prompt_from_dict(d: dict) -> PromptResult:
    return PromptResult(**{**d, "steps": [StepRecord(**s) for s in d.get("steps", [])]})


def pool_rates(stats: dict[str, float]) -> dict[str, float]:
    """Rates derived from a proposer's counters (its `stats()`, or their sum over prompts): for every
    `<p>lookups` with `<p>hits`, `<p>hit_rate` = hits / lookups (lookups that found >= 1 phrase); for every
    `<p>proposed:<src>` with `<p>accepted:<src>`, `<p>acceptance:<src>` = accepted / proposed tokens by source.
    Example: {"lookups": 4, "hits": 3, "proposed:pool": 10, "accepted:pool": 4}
             -> {"hit_rate": 0.75, "acceptance:pool": 0.4}."""
    out = {}
    for k, v in stats.items():
        if k.endswith("lookups") and v and (k[:-7] + "hits") in stats:
            out[k[:-7] + "hit_rate"] = stats[k[:-7] + "hits"] / v
        elif "proposed:" in k and v:
            acc = k.replace("proposed:", "accepted:", 1)
            if acc in stats:
                out[k.replace("proposed:", "acceptance:", 1)] = stats[acc] / v
    return out


def combine_summaries(summaries: list[dict]) -> dict:
    """The run-level aggregates, ONE definition: from `PromptResult.summary()` dicts of any subset of prompts
    (records keep summaries, not always steps). Sums of tokens, time and forwards; tokens/s = sum of tokens /
    sum of time; eta, A and #Match per target forward. Summaries written before `accepted_tokens` /
    `match_tokens` existed are read through their per-forward means."""
    new = sum(s["new_tokens"] for s in summaries)
    elapsed = sum(s["elapsed_s"] for s in summaries)
    fw_each = [s["target_forwards"] for s in summaries]
    fw = max(sum(fw_each), 1)
    per_prompt = [s["new_tokens"] / s["elapsed_s"] for s in summaries if s["elapsed_s"] > 0]
    acc = sum(s.get("accepted_tokens", s["accepted_length"] * f) for s, f in zip(summaries, fw_each, strict=True))
    match = sum(s.get("match_tokens", s["match_per_forward"] * f) for s, f in zip(summaries, fw_each, strict=True))
    return {
        "prompts": len(summaries),
        "new_tokens": new,
        "elapsed_s": elapsed,
        "tokens_per_s": new / elapsed if elapsed > 0 else 0.0,
        "mean_tokens_per_s": sum(per_prompt) / len(per_prompt) if per_prompt else 0.0,
        "target_forwards": sum(fw_each),
        "block_efficiency": new / fw,
        "accepted_length": acc / fw,
        "match_per_forward": match / fw,
        "draft_forwards": sum(s.get("draft_forwards", 0) for s in summaries),
    }
