"""The aggregate definitions in ouroboros.loop.metrics: one formula, whether from steps or from record summaries."""

from __future__ import annotations

import pytest

from ouroboros.loop.metrics import PromptResult, RunResult, StepRecord, combine_summaries, sum_stats


def _step(accepted: int, n_match: int, new: int) -> StepRecord:
    return StepRecord(n_nodes=4, n_candidates=4, max_depth=4, accepted=accepted, new_tokens=new, n_match=n_match,
                      target_tokens=5, draft_forwards=4, draft_tokens=4, draft_s=0.01, verify_s=0.02, other_s=0.0)


def _run() -> RunResult:
    a = PromptResult("a", 5, [1, 2, 3, 4, 5], 2.0, 0.5, "budget", [_step(3, 3, 4), _step(0, 1, 1)],
                     {"lookups": 2, "hits": 1, "pool_phrases": 7, "draft.pool_bytes": 100})
    b = PromptResult("b", 3, [6, 7], 0.5, 0.1, "eos", [_step(1, 2, 2)],
                     {"lookups": 1, "hits": 1, "pool_phrases": 9, "draft.pool_bytes": 140})
    return RunResult("x", [a, b])


def test_totals_golden_and_equal_to_the_summaries_aggregate():
    r = _run()
    t = r.totals()
    assert (t["new_tokens"], t["elapsed_s"], t["target_forwards"]) == (7, 2.5, 3)
    assert t["tokens_per_s"] == pytest.approx(7 / 2.5)
    assert t["mean_tokens_per_s"] == pytest.approx((5 / 2.0 + 2 / 0.5) / 2)
    assert t["block_efficiency"] == pytest.approx(7 / 3)
    assert t["accepted_length"] == pytest.approx(4 / 3) and t["match_per_forward"] == pytest.approx(6 / 3)
    assert t["draft_forwards"] == 12 and t["prefill_s"] == pytest.approx(0.6)
    assert t["position_proposed"] == [3, 3, 3, 3] and t["position_accepted"] == [2, 1, 1, 0]
    comb = combine_summaries([p.summary() for p in r.prompts])
    assert {k: t[k] for k in comb} == comb
    old = [{k: v for k, v in p.summary().items() if k not in ("accepted_tokens", "match_tokens")} for p in r.prompts]
    assert combine_summaries(old) == pytest.approx(comb)   # records written before the raw sums existed


def test_counters_add_and_pool_sizes_keep_the_last_value():
    assert _run().totals()["proposer_stats"] == {"lookups": 3, "hits": 2, "pool_phrases": 9, "draft.pool_bytes": 140}
    assert sum_stats([]) == {}


def test_speedup_paper_vs_specbench_golden():
    """Paper: total time over total time; Spec-Bench: mean per-prompt speed over the baseline's mean speed.
    Baseline: 10 tokens in 10 s and 10 in 1 s (1 and 10 tok/s: mean 5.5); other: 10 in 5 s and 10 in 1 s (2, 10:
    mean 6). Paper 11 / 6 = 1.833x; Spec-Bench 6 / 5.5 = 1.091x."""
    from ouroboros.loop.metrics import speedup, speedup_mean_speed

    def run(times):
        return RunResult("x", [PromptResult(str(i), 3, list(range(10)), t, 0.0, "budget", []) for i, t in
                               enumerate(times)])

    base, other = run([10.0, 1.0]), run([5.0, 1.0])
    assert speedup(base, other) == pytest.approx(11 / 6)
    assert speedup_mean_speed(base, other) == pytest.approx(6 / 5.5)
    with pytest.raises(ValueError):
        speedup_mean_speed(base, run([1.0]))


def test_divergences_golden():
    from ouroboros.running.divergence import Divergence, divergences, first_difference

    assert first_difference([5, 6, 7], [5, 6, 9]) == 2 and first_difference([5, 6], [5, 6, 1]) == 2
    assert first_difference([1], [1]) is None

    def run(outs):
        return RunResult("x", [PromptResult(str(i), 2, o, 1.0, 0.0, "budget", []) for i, o in enumerate(outs)])

    seen = []
    got = divergences(run([[5, 6, 7], [1, 2]]), run([[5, 6, 9], [1, 2]]), {"0": [3, 4], "1": [8]},
                      lambda prefix: seen.append(prefix) or 0.25)
    assert got == [Divergence("0", 2, 7, 9, 0.25)] and seen == [[3, 4, 5, 6]]
