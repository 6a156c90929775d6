"""Losslessness: every registered strategy, through the one loop on the hf backend, is token-identical to the
independent reference greedy decoder (fp64 tiny random models, Llama and Qwen2 families), for random prompts,
budgets, EOS ids, hyper-parameters and drafts agreeing with the target anywhere from ~0% to 100%."""

import pytest
import torch
from conftest import get_draft, get_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import reference_greedy
from strategy_params import PARAMS

from ouroboros.backends.hf import HFBackend
from ouroboros.loop.decode import decode
from ouroboros.strategies import REGISTRY, build_proposer

NOISES = [0.0, 0.02, 0.1, 0.5, 3.0]  # draft weight noise: 0 = identical to the target, 3.0 = unrelated


def test_every_strategy_has_a_search_space():
    assert set(REGISTRY) <= set(PARAMS), f"add {set(REGISTRY) - set(PARAMS)} to tests/strategy_params.py"


@st.composite
def prompts(draw):
    if draw(st.booleans()):  # repetitive prompts give prompt-lookup / pools something to find
        unit = draw(st.lists(st.integers(0, 63), min_size=1, max_size=5))
        return (unit * draw(st.integers(1, 6)))[: draw(st.integers(1, 30))]
    return draw(st.lists(st.integers(0, 63), min_size=1, max_size=30))


@pytest.mark.parametrize("name", sorted(REGISTRY))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_token_identical_to_reference(name, data):
    family = data.draw(st.sampled_from(["llama", "qwen2"]), label="family")
    noise = data.draw(st.sampled_from(NOISES), label="noise")
    params = data.draw(PARAMS[name], label="params")
    prompt = data.draw(prompts(), label="prompt")
    max_new = data.draw(st.integers(1, 24), label="max_new")
    target_model, draft_model = get_model(family), get_draft(family, noise=noise)
    expected = reference_greedy(target_model, prompt, max_new)
    eos = ()
    if data.draw(st.booleans(), label="use_eos"):  # an EOS the reference actually emits somewhere: greedy decoding
        eos = (expected[data.draw(st.integers(0, len(expected) - 1), label="eos_at")],)   # with it stops right after
        expected = expected[: expected.index(eos[0]) + 1]                                 # its first occurrence
    target = HFBackend(target_model)
    draft = HFBackend(draft_model) if REGISTRY[name].needs_draft_model else None
    proposer = build_proposer(name, params, target, draft)
    res = decode(target, proposer, prompt, max_new, eos_ids=eos)
    assert res.output == expected
    assert res.new_tokens <= max_new
    assert sum(r.new_tokens for r in res.steps) == res.new_tokens
    for r in res.steps:  # on a chain the accepted path is a prefix of the trunk, so #Match >= accepted; a tree may
        # accept down a branch off the trunk (ouroboros' second lengthening phrase), and probes are never accepted
        assert r.n_match >= r.accepted or r.max_depth != r.n_nodes


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_identical_draft_accepts_everything(family, gamma):
    target = HFBackend(get_model(family))
    draft = HFBackend(get_draft(family, noise=0.0))
    prompt = [3, 14, 15, 9, 2, 6]
    res = decode(target, build_proposer("speculative", {"gamma": gamma}, target, draft), prompt, 20)
    assert res.output == reference_greedy(get_model(family), prompt, 20)
    assert all(r.accepted == r.max_depth for r in res.steps)
    assert all(r.accepted == min(gamma, 20 - sum(s.new_tokens for s in res.steps[:i]) - 1)
               for i, r in enumerate(res.steps))
    assert res.summary()["block_efficiency"] > 1 + 0.6 * gamma


def test_budget_cut_mid_path():
    """A verified path longer than the budget is cut exactly at the budget."""
    target = HFBackend(get_model("llama"))
    draft = HFBackend(get_draft("llama", noise=0.0))
    res = decode(target, build_proposer("speculative", {"gamma": 8}, target, draft), [7, 7, 7], 3)
    assert res.output == reference_greedy(get_model("llama"), [7, 7, 7], 3)
    assert res.stop_reason == "budget" and len(res.steps) == 1


def test_context_full_stops_cleanly():
    model = get_model("llama", max_positions=24)
    target = HFBackend(model)
    draft = HFBackend(get_draft("llama", noise=0.0, max_positions=24))
    prompt = list(range(2, 20))
    res = decode(target, build_proposer("speculative", {"gamma": 4}, target, draft), prompt, 50)
    assert res.stop_reason == "context" and len(prompt) + res.new_tokens == 24
    assert res.output == reference_greedy(model, prompt, 6)


def test_float32_also_identical():
    m = get_model("qwen2", dtype=torch.float32)
    target, draft = HFBackend(m), HFBackend(get_draft("qwen2", noise=0.1, dtype=torch.float32))
    prompt = [9, 8, 7, 6, 9, 8, 7]
    res = decode(target, build_proposer("speculative", {"gamma": 5}, target, draft), prompt, 30)
    assert res.output == reference_greedy(m, prompt, 30)
