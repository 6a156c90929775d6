"""Ouroboros: all mechanisms off == speculative step by step; golden harvest kernels; each mechanism does
what it claims; losslessness with pre-filled pools across prompts (history); pool save/load."""

import os
import random

import pytest
from conftest import get_draft, get_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import reference_greedy
from stepwise import run_traced

from ouroboros.backends.hf import HFBackend
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.strategies import build_proposer
from ouroboros.strategies.ouroboros import coherent_runs, corrected_branch

OFF = {"phrase_drafting": False, "lengthening": False, "harvest": False, "history": False}
REPETITIVE = [5, 9, 13, 2, 5, 9, 13, 2, 5, 9, 13, 2, 7]


def test_golden_coherent_runs():
    # trunk [1, 2, 3, 4]; target predictions at its positions [1, 9, 3, 4] + after the tip 7; first mismatch at 1
    assert coherent_runs([1, 2, 3, 4], [1, 9, 3, 4, 7], 1) == [(2, [3, 4, 7])]
    assert coherent_runs([1, 2, 3, 4], [8, 2, 0, 4, 7], 0) == [(1, [2, 0]), (3, [4, 7])]
    assert coherent_runs([1, 2], [1, 2, 3], 2) == []  # no mismatch: nothing to harvest


def test_golden_corrected_branch():
    # branch nodes 3, 4, 5 = tokens 5, 6, 7 under the tip node 2; preds[i + 1] = prediction after node i
    toks = [0, 0, 0, 5, 6, 7]
    preds = [0, 0, 0, 5, 6, 9, 1]
    assert corrected_branch(toks, [3, 4, 5], 2, preds) == [5, 6, 9]
    assert corrected_branch(toks, [3, 4, 5], 2, [0, 0, 0, 4, 6, 7, 1]) == [4]        # wrong at once: [4], not [5]
    assert corrected_branch(toks, [3, 4, 5], 2, [0, 0, 0, 5, 6, 7, 1]) == [5, 6, 7, 1]  # all right: one more


@pytest.mark.parametrize("noise", [0.0, 0.1, 3.0])
@pytest.mark.parametrize("gamma", [1, 4])
def test_all_off_equals_speculative_step_by_step(noise, gamma):
    prompts = [REPETITIVE, [3, 1, 4, 1, 5, 9, 2, 6]]
    tm, dm = get_model("qwen2"), get_draft("qwen2", noise=noise)
    spec, spec_drafts = run_traced("speculative", {"gamma": gamma}, tm, dm, prompts, 20)
    ouro, ouro_drafts = run_traced("ouroboros", {"gamma": gamma, **OFF}, tm, dm, prompts, 20)
    assert ouro_drafts == spec_drafts
    assert ouro == spec


def run(params, prompts, noise=0.1, max_new=24, family="llama"):
    target, draft = HFBackend(get_model(family)), HFBackend(get_draft(family, noise=noise))
    prop = build_proposer("ouroboros", params, target, draft)
    results = [decode(target, prop, p, max_new) for p in prompts]
    for p, r in zip(prompts, results, strict=True):
        assert r.output == reference_greedy(get_model(family), p, max_new)
    return prop, results


def test_phrase_drafting_yields_several_tokens_per_draft_forward():
    """(a): with a pool that knows the continuation, the draft model's lookahead drafts several tokens per
    draft forward (the paper's c > 1); vanilla drafting stays at c = 1."""
    prompt, max_new = [3, 1, 4, 1, 5, 9, 2, 6], 30
    text = prompt + reference_greedy(get_model("llama"), prompt, max_new)
    cs = {}
    for drafting in (False, True):
        target, draft = HFBackend(get_model("llama")), HFBackend(get_draft("llama", noise=0.0))
        prop = build_proposer("ouroboros", {**OFF, "history": True, "phrase_drafting": drafting, "gamma": 8,
                                            "W": 2, "N": 4, "G": 2}, target, draft)
        for i in range(len(text) - 1):
            prop.pool.add(text[i], text[i + 1: i + 4], "verify")
        res = decode(target, prop, prompt, max_new)
        assert res.output == text[len(prompt):]
        cs[drafting] = res.proposer_stats["drafted_tokens"] / res.proposer_stats["draft_forwards"]
    assert cs[False] == 1.0
    assert cs[True] > 2.0, cs
    assert res.proposer_stats["draft.accepted:pool:history"] > 0


def test_lengthening_and_harvest_and_history():
    params = {"gamma": 2, "W": 3, "N": 5, "G": 4, "K": 3, "phrase_drafting": True, "lengthening": True,
              "harvest": True, "history": True}
    prop, res = run(params, [REPETITIVE, REPETITIVE], noise=0.0, max_new=40)
    s0, s1 = res[0].proposer_stats, res[1].proposer_stats
    assert s1["lengthen.hits"] > 0
    assert sum(v for k, v in s1.items() if k.startswith("lengthen.accepted:")) > 0
    # history: the second prompt is served phrases learnt on the first
    assert s1.get("lengthen.accepted:pool:history", 0) + s1.get("draft.accepted:pool:history", 0) > 0
    assert s0["pool_phrases"] <= s1["pool_phrases"]
    # accepted-by-source in the loop's records agrees with the proposer's count
    acc = sum((r.accepted_sources or {}).get(k[len("lengthen.accepted:"):], 0) for r in res[1].steps
              for k in s1 if k.startswith("lengthen.accepted:"))
    assert acc >= sum(v for k, v in s1.items() if k.startswith("lengthen.accepted:"))


def test_harvest_from_a_disagreeing_draft():
    params = {**OFF, "gamma": 6, "harvest": True, "history": True, "N": 4}
    prop, res = run(params, [REPETITIVE, [3, 1, 4, 1, 5, 9, 2, 6]], noise=0.5, max_new=30)
    assert sum(r.proposer_stats.get("harvested:verify", 0) for r in res) > 0
    assert {s for _, _, s in prop.pool.items()} <= {"verify", "history"}


def test_trunk_overshoots_gamma_as_the_official_drafter_does():
    """(a), official semantics: the drafter stops once it has gamma tokens but keeps all of its last lookahead
    step's, so trunks reach gamma + N - 2; trunk_overshoot=false cuts them at gamma. Lossless either way."""
    prompt, max_new = [3, 1, 4, 1, 5, 9, 2, 6], 40
    text = prompt + reference_greedy(get_model("llama"), prompt, max_new)
    gamma, N = 5, 4
    trunks = {}
    for overshoot in (True, False):
        target, draft = HFBackend(get_model("llama")), HFBackend(get_draft("llama", noise=0.0))
        prop = build_proposer("ouroboros", {**OFF, "history": True, "phrase_drafting": True, "gamma": gamma,
                                            "W": 2, "N": N, "G": 2, "trunk_overshoot": overshoot}, target, draft)
        for i in range(len(text) - 1):
            prop.pool.add(text[i], text[i + 1: i + N], "verify")
        res = decode(target, prop, prompt, max_new)
        assert res.output == text[len(prompt):]
        trunks[overshoot] = [r.n_candidates for r in res.steps[:-1]]  # the last step may be cut by the budget
    assert max(trunks[False]) == gamma
    assert all(gamma <= t <= gamma + N - 2 for t in trunks[True]) and max(trunks[True]) > gamma, trunks


def test_no_history_clears_the_pool_per_prompt():
    params = {"gamma": 3, "W": 3, "N": 3, "G": 3, "K": 2, "history": False}
    _, res = run(params, [REPETITIVE, [3, 1, 4, 1, 5, 9, 2, 6]], noise=0.0)
    assert not any(k.endswith("pool:history") for k in res[1].proposer_stats)


def test_pool_save_and_load(tmp_path):
    path = str(tmp_path / "pool.json")
    params = {"gamma": 3, "W": 3, "N": 4, "G": 3, "K": 2, "pool_save": path}
    prop, _ = run(params, [REPETITIVE], noise=0.0)
    saved = len(prop.pool)
    assert saved > 0 and not os.path.exists(path)  # stats() has no side effects: the pool is saved by checkpoint()
    prop.checkpoint()
    assert os.path.exists(path)
    prop2, res = run({"gamma": 3, "W": 3, "N": 4, "G": 3, "K": 2, "pool_load": path}, [REPETITIVE], noise=0.0)
    assert res[0].proposer_stats.get("lengthen.proposed:pool:history", 0) + \
        res[0].proposer_stats.get("draft.proposed:pool:history", 0) > 0
    target, draft = HFBackend(get_model("llama")), HFBackend(get_draft("llama", noise=0.0))
    with pytest.raises(OuroborosError, match="does not exist"):
        build_proposer("ouroboros", {"pool_load": str(tmp_path / "nope.json")}, target, draft)
    p = build_proposer("ouroboros", {"pool_load": str(tmp_path / "nope.json"), "pool_on_error": "empty"}, target,
                       draft)
    assert len(p.pool) == 0 and "does not exist" in p.load_note
    with pytest.raises(OuroborosError, match="history"):
        build_proposer("ouroboros", {"pool_load": path, "history": False}, target, draft)


@st.composite
def phrase_lists(draw):
    n = draw(st.integers(0, 30))
    return [(draw(st.integers(0, 63)), draw(st.lists(st.integers(0, 63), min_size=1, max_size=6))) for _ in range(n)]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_lossless_with_prefilled_pool_across_prompts(data):
    """Arbitrary pool contents (right, wrong, random) never change the output, across several prompts."""
    params = {"gamma": data.draw(st.integers(1, 5)), "W": data.draw(st.integers(1, 3)),
              "N": data.draw(st.integers(2, 5)), "G": data.draw(st.integers(0, 4)), "K": data.draw(st.integers(0, 4))}
    noise = data.draw(st.sampled_from([0.0, 0.1, 3.0]))
    family = data.draw(st.sampled_from(["llama", "qwen2"]))
    target, draft = HFBackend(get_model(family)), HFBackend(get_draft(family, noise=noise))
    prop = build_proposer("ouroboros", params, target, draft)
    for key, toks in data.draw(phrase_lists()):
        prop.pool.add(key, toks, "verify")
    rng = random.Random(data.draw(st.integers(0, 100)))
    for _ in range(2):
        prompt = [rng.randrange(64) for _ in range(rng.randint(1, 12))] * rng.randint(1, 3)
        max_new = rng.randint(1, 20)
        assert decode(target, prop, prompt, max_new).output == reference_greedy(get_model(family), prompt, max_new)
