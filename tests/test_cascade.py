"""Cascade: no cascade == speculative step by step; the vertical level drafts several tokens per draft forward;
horizontal tokens are proposed, verified and counted."""

from conftest import get_draft, get_model
from reference import reference_greedy
from stepwise import run_traced

from ouroboros.backends.hf import HFBackend
from ouroboros.loop.decode import decode
from ouroboros.strategies import build_proposer

REPETITIVE = [5, 9, 13, 2, 5, 9, 13, 2, 5, 9, 13, 2, 7]


def test_no_cascade_equals_speculative_step_by_step():
    prompts = [REPETITIVE, [3, 1, 4, 1, 5, 9, 2, 6]]
    tm, dm = get_model("llama"), get_draft("llama", noise=0.1)
    spec = run_traced("speculative", {"gamma": 3}, tm, dm, prompts, 20)
    casc = run_traced("cascade", {"gamma": 3, "vertical": "none", "horizontal": 0}, tm, dm, prompts, 20)
    assert casc == spec


def test_vertical_and_horizontal_levels():
    """Random tiny models rarely repeat themselves, so prompt lookup is right only now and then; on this fixed
    (deterministic, fp64) case it is right a few times at both levels."""
    m = get_model("qwen2")
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    prompt = prompt + reference_greedy(m, prompt, 40)
    target, draft = HFBackend(m), HFBackend(get_draft("qwen2", noise=0.0))
    prop = build_proposer("cascade", {"gamma": 4, "vertical": "pld", "horizontal": 3, "num_pred_tokens": 4,
                                      "max_ngram": 2}, target, draft)
    res = decode(target, prop, prompt, 40)
    assert res.output == reference_greedy(m, prompt, 40)
    s = res.proposer_stats
    assert s["drafted_tokens"] > s["draft_forwards"]      # vertical: the draft model accepted some PLD tokens
    assert s["vertical.hits"] > 0
    assert s["horizontal_accepted"] > 0 and s["horizontal_proposed"] >= s["horizontal_accepted"]
    assert sum((r.accepted_sources or {}).get("prompt", 0) for r in res.steps) == s["horizontal_accepted"]
