"""Losslessness across model families: every registered strategy, through the one loop on the hf backend, is
token-identical to the independent no-cache reference (tests/reference.py) on tiny fp64 models of every family
in `ouroboros.backends.tiny.FAMILIES`, with prompts longer than every local-attention window (window 8: sliding-window
Mistral / Qwen2 / Starcoder2 / Phi-3, Gemma 2 / 3's local layers, GPT-Neo's local layers) -- or, where a family's
stock attention cannot take a tree, the tree strategies are refused up front with a one-line error naming it.
"""

import functools
import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import reference_greedy
from strategy_params import PARAMS

from ouroboros.backends.hf import HFBackend
from ouroboros.backends.tiny import FAMILIES, perturbed, tiny_model
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.strategies import REGISTRY, build_proposer

WINDOW = 8
# decided by HFBackend.tree_refusal() from what each model does; listed here so that a change is seen
NO_TREES = {"bloom": "no position_ids", "falcon_alibi": "fails on a tree mask", "gpt_neo": "by their index"}
TREE_STRATEGIES = {name for name, spec in REGISTRY.items() if spec.tree_models}
FIXED = {"speculative": {"gamma": 3}, "pld": {}, "vanilla": {}, "cascade": {"gamma": 3},
         "lookahead": {"W": 3, "N": 3, "G": 3}, "ouroboros": {"gamma": 3, "W": 3, "N": 3, "G": 3, "K": 2},
         "rest": {"corpus": [3, 5, 7, 9] * 6 + list(range(20)), "num_nodes": 12},
         "suffix": {}, "recycling": {"widths": [3, 2, 1]}}


@functools.cache
def model(family: str, noise: float = 0.0):
    m = tiny_model(family, dtype=torch.float64, vocab_size=64, window=WINDOW, redraw=True)
    return perturbed(m, noise, seed=7) if noise else m


def run(family, name, params, prompt, max_new, noise=0.1, eos=()):
    target = HFBackend(model(family))
    draft = HFBackend(model(family, noise)) if REGISTRY[name].needs_draft_model else None
    return decode(target, build_proposer(name, params, target, draft), prompt, max_new, eos_ids=eos)


def test_every_strategy_has_fixed_settings():
    assert set(FIXED) == set(REGISTRY)
    assert {"lookahead", "ouroboros", "rest"} <= TREE_STRATEGIES


@pytest.mark.parametrize("family", FAMILIES)
def test_tree_capability_is_decided_per_model(family):
    why = HFBackend(model(family)).tree_refusal()
    if family in NO_TREES:
        assert why is not None and NO_TREES[family] in why
    else:
        assert why is None, why


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_long_prompt_identical_or_refused(family, name):
    prompt = [3, 5, 7, 3, 5, 9, 11, 3, 5, 7, 2, 4, 6, 3, 5, 7, 9, 3, 5, 7]  # 20 tokens > WINDOW
    if family in NO_TREES and name in TREE_STRATEGIES:
        with pytest.raises(OuroborosError, match=f"{name}.*{model(family).config.model_type}"):
            run(family, name, FIXED[name], prompt, 12)
        return
    assert run(family, name, FIXED[name], prompt, 24).output == reference_greedy(model(family), prompt, 24)


@pytest.mark.parametrize("family", [f for f in FAMILIES if f not in NO_TREES])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_identical_to_reference(family, data):
    name = data.draw(st.sampled_from(sorted(REGISTRY)), label="strategy")
    params = data.draw(PARAMS[name], label="params")
    unit = data.draw(st.lists(st.integers(0, 63), min_size=1, max_size=6), label="unit")
    prompt = (unit * 40)[: data.draw(st.integers(WINDOW + 1, 3 * WINDOW), label="prompt_len")]
    if data.draw(st.booleans(), label="noisy_prompt"):
        prompt = prompt + data.draw(st.lists(st.integers(0, 63), min_size=1, max_size=8), label="tail")
    max_new = data.draw(st.integers(1, 20), label="max_new")
    noise = data.draw(st.sampled_from([0.0, 0.1, 3.0]), label="noise")
    eos = ()
    if data.draw(st.booleans(), label="use_eos"):
        free = reference_greedy(model(family), prompt, max_new)
        eos = (free[data.draw(st.integers(0, len(free) - 1), label="eos_at")],)
    res = run(family, name, params, prompt, max_new, noise=noise, eos=eos)
    assert res.output == reference_greedy(model(family), prompt, max_new, eos)


def test_refused_tree_is_never_scored():
    """The backend itself refuses a tree on such a model (the net under the up-front check)."""
    from ouroboros.loop.draft import Draft

    target = HFBackend(model("bloom"))
    target.prefill([3, 4, 5])
    tree = Draft()
    tree.add_path([1, 2])
    tree.add_path([3])
    with pytest.raises(OuroborosError, match="bloom.*no position_ids"):
        target.score(tree)
    chain = target.score(Draft.chain([1, 2]))  # chains still work after the refusal
    assert len(chain.preds) == 3


def test_cli_refuses_trees_before_measuring(tmp_path):
    """`ouroboros.run` on a model that scores chains only: a tree strategy is one error line, exit 2, and no
    record (not even the baseline's); a chain strategy runs and is identical to vanilla."""
    from cli_helper import run_module

    out = tmp_path / "r.jsonl"
    common = ["model=tiny", "model.family=bloom", "model.hidden_size=64", "model.vocab_size=128",
              "dataset.num_prompts=2", "max_new_tokens=6", f"out={out}", "logger=quiet"]
    res = run_module("ouroboros.run", *common, "strategy=lookahead", tmp=tmp_path)
    assert res.code == 2 and res.err.strip().startswith("error: strategy 'lookahead' scores token trees")
    assert "bloom" in res.err and len(res.err.strip().splitlines()) == 1 and not out.exists()
    res = run_module("ouroboros.run", *common, "strategy=speculative", tmp=tmp_path)
    assert res.code == 0, res.err
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["strategy"] for r in recs] == ["vanilla", "speculative"] and recs[1]["identical_to_baseline"]


def test_top2_margin_and_record_divergences(tmp_path):
    """HFBackend.top2_margin is the reference's top-1 minus top-2 logit; a record lists no divergence when the
    outputs are identical (the fp64 runs here)."""
    m = model("llama")
    with torch.no_grad():
        logits = m(torch.tensor([[3, 5, 7]])).logits[0, -1]
    top = torch.topk(logits, 2).values
    assert HFBackend(m).top2_margin([3, 5, 7]) == pytest.approx(float(top[0] - top[1]))
    from cli_helper import run_module

    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", "model=tiny", "model.hidden_size=64", "model.vocab_size=128",
                     "dataset.num_prompts=2", "max_new_tokens=6", f"out={out}", "logger=quiet", "strategy=pld",
                     "backend.dtype=float64", tmp=tmp_path)
    assert res.code == 0, res.err
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert recs[1]["identical_to_baseline"] == "2/2" and recs[1]["divergences"] == []
