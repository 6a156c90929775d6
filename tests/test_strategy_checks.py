"""Every check of a strategy's options before the first measurement (issue 59): float options that are not finite
numbers, files whose fit depends on the loaded model (a suffix cache's, a phrase pool's, a REST corpus' vocabulary),
drafts with as many nodes as the model context, an empty recycling tree, and which configurations draft token trees
(chain configurations of suffix, recycling, ouroboros and REST run on models that score chains only, losslessly).
Bad inputs: exit 2, one `error:` line, nothing appended to the records file (tests/test_inputs.py's pattern)."""

import dataclasses
import functools
import json
import math
import typing
from pathlib import Path

import pytest
import torch
from cli_helper import run_module
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import reference_greedy
from strategy_params import PARAMS

from ouroboros.backends.hf import HFBackend
from ouroboros.backends.tiny import perturbed, tiny_config, tiny_model
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.strategies import (
    REGISTRY,
    build_proposer,
    chain_configurations,
    field_types,
    get_spec,
    make_config,
    tree_models,
)

SIM = ["model=llama70b_7b", "hardware=a800x2", "dataset.num_prompts=1", "dataset.task=none", "max_new_tokens=4",
       "logger=quiet"]
OLD = b'{"point_id":"old","label":"kept","totals":{}}\n'
SIM_VOCAB = 8192   # the llama70b_7b simulator's vocabulary (the error names it: checked below)


def _write_files(tmp: Path) -> None:
    """Saved documents of another vocabulary (7 tokens) than the simulator's."""
    (tmp / "cache7.json").write_text(json.dumps({"format": "ouroboros-suffix-cache", "version": 1,
                                                 "meta": {"vocab_size": 7}, "outputs": [[1, 2, 3]]}))
    (tmp / "pool7.json").write_text(json.dumps({"format": "ouroboros-phrase-pool", "version": 1,
                                                "meta": {"vocab_size": 7}, "phrases": [[1, [2, 3], "lookahead"]]}))


def _run(tmp: Path, *args: str):
    out = tmp / "records.jsonl"
    out.write_bytes(OLD)
    _write_files(tmp)
    res = run_module("ouroboros.run", *SIM, f"out={out}", *(a.format(tmp=tmp) for a in args), tmp=tmp)
    return res, out


BAD = [
    # item 7: a float that is not a finite number (inf used to overflow in suffix after the baseline)
    (["strategy=suffix", "strategy.params.suffix_decoding_max_spec_factor=inf"],
     "suffix.suffix_decoding_max_spec_factor must be a finite number >= 0, got inf"),
    (["strategy=speculative", "+strategy.params.draft_temperature=inf"],
     "speculative.draft_temperature must be a finite number >= 0, got inf"),
    (["strategy=speculative", "+strategy.params.draft_top_p=nan"],
     "speculative.draft_top_p must be in (0, 1], got nan"),
    (["strategy=speculative", "+strategy.params.draft_top_p=0"], "speculative.draft_top_p must be in (0, 1], got 0"),
    (["strategy=speculative", "+strategy.params.draft_top_k=-1"], "speculative.draft_top_k must be >= 0, got -1"),
    # item 8: files of another vocabulary, refused before the baseline is measured
    (["strategy=suffix", "strategy.params.cache_load={tmp}/cache7.json"],
     f"suffix cache file {{tmp}}/cache7.json is incompatible: vocab_size=7, this run has {SIM_VOCAB}"),
    (["strategy=ouroboros", "strategy.params.pool_load={tmp}/pool7.json"],
     f"phrase pool file {{tmp}}/pool7.json is incompatible: vocab_size=7, this run has {SIM_VOCAB}"),
    (["strategy=rest", "+strategy.params.corpus=[1,2,99999]"],
     f"REST corpus holds token 99999, outside the model's vocabulary [0, {SIM_VOCAB})"),
    # item 9: a draft with as many nodes as the context (4,096 tokens)
    (["strategy=recycling", "strategy.params.widths=[8,8,8,8]"],
     "strategy 'recycling' drafts up to 4680 nodes in one step (the template of widths=[8, 8, 8, 8]), which does "
     "not fit the model context of 4096 tokens"),
    (["strategy=lookahead", "strategy.params.W=500", "strategy.params.G=500", "strategy.params.N=6"],
     "strategy 'lookahead' drafts up to 5000 nodes in one step"),
    (["strategy=ouroboros", "strategy.params.K=1000", "strategy.params.N=6"],
     "strategy 'ouroboros' drafts up to 5008 nodes in one step (a trunk of up to 8 tokens and K=1000 phrases"),
    (["strategy=ouroboros", "strategy.params.W=600", "strategy.params.G=600", "strategy.params.K=0"],
     "strategy 'ouroboros' drafts up to 7200 nodes in one step (the draft model's lookahead"),
    (["strategy=suffix", "strategy.params.num_speculative_tokens=5000"],
     "strategy.params.num_speculative_tokens=5000 for suffix does not fit the model context of 4096 tokens"),
    # item 15: an empty template is refused as widths=[] is
    (["strategy=recycling", "strategy.params.tree=[]"], "recycling.tree must be a non-empty list of index paths"),
]


@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a)[:60] for a, _ in BAD])
def test_bad_strategy_option_is_one_line_before_any_record(tmp_path, args, needle):
    res, out = _run(tmp_path, *args)
    lines = res.err.strip().splitlines()
    assert res.code == 2, (res.code, res.err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), res.err[-2000:]
    assert needle.format(tmp=tmp_path) in lines[0], lines[0]
    assert "Traceback" not in res.err + res.out
    assert out.read_bytes() == OLD   # not even the vanilla baseline's record


FLOATS = [(name, f) for name in sorted(REGISTRY) for f, hint in field_types(name).items()
          if float in (hint, *typing.get_args(hint))]


def test_the_float_options_are_known():
    assert {(n, f) for n, f in FLOATS} == {("speculative", "draft_temperature"), ("speculative", "draft_top_p"),
                                           ("suffix", "suffix_decoding_max_spec_factor"),
                                           ("suffix", "suffix_decoding_min_token_prob")}


@pytest.mark.parametrize("name,option", FLOATS)
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_every_float_option_must_be_finite(name, option, value):
    with pytest.raises(OuroborosError, match=f"^{name}.{option} must be .*, got -?(inf|nan)"):
        make_config(name, {option: value})


@pytest.mark.parametrize("args,note", [
    (["strategy=suffix", "strategy.params.cache_load={tmp}/nope.json", "strategy.params.cache_on_error=empty"],
     "note: suffix.cache_load: suffix cache file {tmp}/nope.json does not exist; starting from an empty cache "
     "(cache_on_error=empty)"),
    (["strategy=suffix", "strategy.params.cache_load={tmp}/cache7.json", "strategy.params.cache_on_error=empty"],
     f"note: suffix.cache_load: suffix cache file {{tmp}}/cache7.json is incompatible: vocab_size=7, this run has "
     f"{SIM_VOCAB}; starting from an empty cache (cache_on_error=empty)"),
    (["strategy=ouroboros", "strategy.params.pool_load={tmp}/pool7.json", "strategy.params.pool_on_error=empty"],
     f"note: ouroboros.pool_load: phrase pool file {{tmp}}/pool7.json is incompatible: vocab_size=7, this run has "
     f"{SIM_VOCAB}; starting from an empty pool (pool_on_error=empty)"),
])
def test_on_error_empty_says_so(tmp_path, args, note):
    """Item 14: a missing or incompatible file with *_on_error=empty runs, starting empty, and says so once."""
    res, out = _run(tmp_path, *args)
    assert res.code == 0, res.err[-2000:]
    assert res.err.splitlines().count(note.format(tmp=tmp_path)) == 1, res.err
    assert len(out.read_text().splitlines()) == 3   # the old line, vanilla's and the strategy's


def test_tiny_gpt_neo_repeats_its_layer_pattern(tmp_path):
    """Item 20: GPT-Neo's global/local pattern covers any number of layers (model=tiny has 4)."""
    for layers in (1, 2, 3, 4):
        assert tiny_config("gpt_neo", layers=layers).attention_layers == ["global", "local", "global", "local"][:layers]
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", "model=tiny", "model.family=gpt_neo", "model.hidden_size=64",
                     "model.vocab_size=128", "strategy=vanilla", "dataset.num_prompts=1", "max_new_tokens=4",
                     f"out={out}", "logger=quiet", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    assert [json.loads(line)["strategy"] for line in out.read_text().splitlines()] == ["vanilla"]


# ------------------------------------------------------------------------------ item 21: chains on chain-only models
CHAINS = [("suffix", {"use_tree_spec": False}), ("recycling", {"widths": [1, 1, 1]}),
          ("recycling", {"tree": [[1], [1, 0], [1, 0, 1]]}), ("ouroboros", {"phrase_drafting": False, "K": 1}),
          ("ouroboros", {"phrase_drafting": False, "lengthening": False, "K": 3}),
          ("rest", {"corpus": [3, 5, 7, 9] * 6 + list(range(20)), "num_nodes": 1})]
TREES = [("suffix", {}), ("recycling", {"widths": [1, 2]}), ("ouroboros", {"phrase_drafting": False, "K": 2}),
         ("ouroboros", {"lengthening": False}), ("rest", {"corpus": [1, 2, 3], "num_nodes": 2}),
         ("lookahead", {"G": 0, "N": 2})]
NO_TREES = ("bloom", "falcon_alibi", "gpt_neo")


def test_tree_models_follow_the_configuration():
    for name, params in CHAINS:
        assert tree_models(name, params) == (), (name, params)
    for name, params in TREES:
        assert tree_models(name, params), (name, params)
    assert tree_models("ouroboros", {"lengthening": False}) == ("draft",)
    assert tree_models("ouroboros", {}) == ("target", "draft") == get_spec("ouroboros").tree_models
    assert tree_models("speculative", {"gamma": 2}) == ()
    for name, spec in REGISTRY.items():   # `CHAINS` is a class attribute, not an option
        assert "CHAINS" not in {f.name for f in dataclasses.fields(spec.config)} | set(field_types(name)), name


@functools.cache
def model(family: str, noise: float = 0.0):
    m = tiny_model(family, dtype=torch.float64, vocab_size=64, window=8, redraw=True)
    return perturbed(m, noise, seed=7) if noise else m


def _decode(family, name, params, prompt, max_new):
    target = HFBackend(model(family))
    draft = HFBackend(model(family, 0.1)) if REGISTRY[name].needs_draft_model else None
    return decode(target, build_proposer(name, params, target, draft), prompt, max_new).output


PROMPT = [3, 5, 7, 3, 5, 9, 11, 3, 5, 7, 2, 4, 6, 3, 5, 7, 9, 3, 5, 7]   # 20 tokens, longer than the window (8)


@pytest.mark.parametrize("family", NO_TREES)
@pytest.mark.parametrize("name,params", CHAINS, ids=[f"{n}-{p}"[:50] for n, p in CHAINS])
def test_chain_configuration_runs_losslessly_where_trees_are_refused(family, name, params):
    """A chain configuration runs on a model that scores chains only (its backend would refuse a tree mid-run),
    token-identical to the independent greedy reference in fp64."""
    assert HFBackend(model(family)).tree_refusal() is not None
    assert _decode(family, name, params, PROMPT, 24) == reference_greedy(model(family), PROMPT, 24)


@pytest.mark.parametrize("family", NO_TREES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_property_chain_configurations_lossless_tree_ones_refused(family, data):
    """Any configuration of any strategy on a chain-only model: refused up front when `tree_models` says it gives
    trees to a model that refuses them, else token-identical to the reference (never refused mid-run)."""
    name = data.draw(st.sampled_from(["suffix", "recycling", "ouroboros", "rest", "speculative"]), label="strategy")
    params = data.draw(PARAMS[name], label="params")
    roles = tree_models(name, params)
    max_new = data.draw(st.integers(1, 16), label="max_new")
    if roles:
        with pytest.raises(OuroborosError, match=f"strategy '{name}' scores token trees on the {roles[0]} model"):
            _decode(family, name, params, PROMPT, max_new)
    else:
        assert _decode(family, name, params, PROMPT, max_new) == reference_greedy(model(family), PROMPT, max_new)


def test_refusal_lists_the_chain_configurations():
    assert chain_configurations() == [
        "vanilla", "speculative", "pld", "cascade", "ouroboros with phrase_drafting=false and either K <= 1 "
        "or lengthening=false", "rest with num_nodes=1", "suffix with use_tree_spec=false",
        "recycling with a one-path template (widths of 1s)"]
    with pytest.raises(OuroborosError) as e:
        _decode("bloom", "suffix", {}, PROMPT, 4)
    msg = str(e.value)
    assert msg.startswith("strategy 'suffix' scores token trees on the target model, which cannot take them (bloom")
    assert msg.endswith("what drafts chains only: " + "; ".join(chain_configurations()))


def test_cli_runs_a_chain_configuration_on_bloom(tmp_path):
    """Through the CLI: suffix with use_tree_spec=false runs on bloom (it used to be refused as a tree strategy),
    identical to vanilla; with trees it is refused before any record."""
    out = tmp_path / "r.jsonl"
    common = ["model=tiny", "model.family=bloom", "model.hidden_size=64", "model.vocab_size=128",
              "dataset.num_prompts=2", "max_new_tokens=6", f"out={out}", "logger=quiet", "strategy=suffix"]
    res = run_module("ouroboros.run", *common, tmp=tmp_path)
    assert res.code == 2 and "suffix with use_tree_spec=false" in res.err and not out.exists(), res.err[-2000:]
    res = run_module("ouroboros.run", *common, "strategy.params.use_tree_spec=false", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["strategy"] for r in recs] == ["vanilla", "suffix"] and recs[1]["identical_to_baseline"] == "2/2"

