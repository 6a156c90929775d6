"""Calibration profiles (conf/sim/<pair>_<task>.yaml): they compose with Hydra (`sim=<profile>`, `sim.<key>=v` still
works), every pair names only its own, a profile's fit states paper inputs of its own pair only, the fitted clock
reaches make_pair, another pair's profile is refused, and two profiles give different decisions."""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from ouroboros.config import validate
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.strategies import build_proposer
from simulators.architectures import PairProfile, conf_root, load_conf
from simulators.cost_model import from_spec
from simulators.hardware import Hardware
from simulators.pair import make_pair
from simulators.sim_profiles import load_profile, pair_profiles, profile_text
from simulators.simconfig import SimConfig

CONF = str(conf_root())
PAIRS = ("yi34b_6b", "codellama34b_7b", "deepseek33b_6.7b", "llama70b_7b")


def test_profile_composes_and_keeps_every_option_overridable():
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=["model=yi34b_6b", "sim=yi34b_6b_humaneval", "sim.vocab=2048"])
    run = validate(cfg)
    assert run.sim["pair"] == "yi34b_6b" and run.sim["vocab"] == 2048
    assert run.sim["corpus"] == load_profile("yi34b_6b_humaneval")["corpus"]   # the profile's own text
    assert set(run.sim) == set(SimConfig().as_dict())  # the defaults list filled in every other option


@pytest.mark.parametrize("model", PAIRS)
def test_each_pair_names_only_its_own_profiles(model):
    for task, name in pair_profiles(model).items():
        prof = load_profile(name)
        assert prof["pair"] == model, (task, name)
        assert set(prof) <= set(SimConfig().as_dict())
        # fitted from this pair's published vanilla and SpS figures only
        inputs = set(prof["fit"]["inputs"])
        assert "sps" in inputs and inputs <= {"vanilla_tok_s", "sps_tok_s", "sps_speedup", "sps_block_efficiency",
                                              "sps"}
    assert bool(pair_profiles(model)) == (model in ("yi34b_6b", "llama70b_7b"))  # the pairs with published figures


def test_profile_clock_reaches_make_pair():
    prof = load_profile("yi34b_6b_humaneval")
    model, hw = load_conf("model", "yi34b_6b"), load_conf("hardware", "a800x2")
    pair = make_pair(model, hw, prof)
    spec = from_spec(PairProfile.from_model_cfg(model).target,
                     Hardware.from_dict({**hw, "forward_overhead_s": prof["target_overhead_s"],
                                         "layer_overhead_s": 0.0}), "fp16")
    assert pair.costs["target"].forward_s(1, 100) == pytest.approx(spec.forward_s(1, 100), rel=1e-12)
    default = make_pair(model, hw, {})
    assert pair.costs["target"].forward_s(1, 100) != pytest.approx(default.costs["target"].forward_s(1, 100))


def test_another_pairs_profile_is_refused():
    with pytest.raises(OuroborosError, match="fitted for pair 'yi34b_6b', not for model 'llama70b_7b'"):
        make_pair(load_conf("model", "llama70b_7b"), load_conf("hardware", "a800x2"), load_profile("yi34b_6b_mbpp"))
    with pytest.raises(OuroborosError, match="sim.target_overhead_s must be >= 0"):
        make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "a800x2"), {"target_overhead_s": -1})


def test_two_profiles_make_different_decisions():
    etas = []
    for name in ("yi34b_6b_humaneval", "yi34b_6b_wmt16"):
        prof = {**load_profile(name), "corpus": "code", "prompt_len": None}  # same text: only the agreement differs
        pair = make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "a800x2"), prof)
        sps = build_proposer("speculative", {"gamma": 8}, pair.target, pair.draft)
        steps = new = 0
        for p in pair.default_prompts(3, 0):
            res = decode(pair.target, sps, p.ids, 64, pair.eos_ids)
            steps, new = steps + len(res.steps), new + res.new_tokens
        etas.append(new / steps)
    assert etas[0] > etas[1] + 1.0  # HumanEval's agreement 0.95 vs WMT16's 0.68


def test_profile_text_is_documented_yaml(tmp_path: Path):
    text = profile_text("t", {"pair": "yi34b_6b", "alpha_easy": 0.5}, {"inputs": {"vanilla_tok_s": 1.0}})
    d = yaml.safe_load(text)
    assert d == {"defaults": ["default", "_self_"], "pair": "yi34b_6b", "alpha_easy": 0.5,
                 "fit": {"inputs": {"vanilla_tok_s": 1.0}}}
    assert all("#" in ln for ln in text.splitlines() if ln.startswith(("pair:", "alpha_easy:")))


def test_every_fitted_knob_is_documented_in_a_written_profile():
    """A refit writes each knob of the fit grid with its comment (none may come out blank)."""
    from simulators.lab.decisions.fit import FIT_GRID
    from simulators.sim_profiles import FIELD_DOCS

    assert [k for k, _ in FIT_GRID if not FIELD_DOCS.get(k)] == []


def test_paper_text_knobs_come_from_the_real_pairs_decision_profiles():
    """`check paper --text decisions`: each paper task's surrogate target takes its text knobs from the decision
    profile of a real-pair task of the same kind (the draft's agreement is still the Yi pair's own fit), and they reach
    the simulated pair; without --text the target keeps the defaults."""
    from simulators.lab.calibration.paper_fit import (
        CODE_CORPORA,
        TASKS,
        TEXT_KNOBS,
        TEXT_PROFILES,
        task_pair,
        text_knobs,
    )

    for t in TASKS:
        assert text_knobs(t, "none") == ()
        knobs = dict(text_knobs(t, "decisions"))
        prof = load_profile(TEXT_PROFILES[t.name])
        assert prof["pair"] == "qwen_coder"
        assert (prof["corpus"] in CODE_CORPORA) == (t.corpus in CODE_CORPORA) or prof["fit"]["task"] == t.name.lower()
        assert knobs == {k: prof[k] for k in TEXT_KNOBS if k in prof} and "alpha_easy" not in knobs
        lm = task_pair(replace(t, text=tuple(knobs.items())), 0.9, 0).target.lm
        assert (lm.p_copy, lm.p_top) == (knobs["p_copy"], knobs["p_top"])
        assert lm.corpus.kind == knobs.get("corpus", t.corpus)   # the profile's text kind (pycode: code tasks)
    with pytest.raises(OuroborosError, match="--text must be none or decisions"):
        text_knobs(TASKS[0], "paper")


def test_validate_paper_refuses_profiles_with_text(capsys):
    from simulators.__main__ import main

    assert main(["check", "paper", "--profiles", "--text", "decisions"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--profiles goes with `paper`" in err[0] and "without --text" in err[0]


def test_a_long_value_keeps_its_comment_apart():
    """A value longer than the comment column still has a space before `#`: YAML would read it into the value."""
    text = profile_text("t", {"profile": "a_profile_name_longer_than_the_column_x"}, {"task": "t"})
    assert yaml.safe_load(text)["profile"] == "a_profile_name_longer_than_the_column_x"
