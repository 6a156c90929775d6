"""Issue 32: per prompt category, the profile fitted to that category's recordings decides its prompts
(sim.by_category, set from the model YAML's sim_category_profiles): the real pair's block efficiency differs up to
1.6x between MT-Bench's categories, so one profile per task predicts only its fit mix."""

from pathlib import Path

import pytest
from cli_helper import run_module
from hydra import compose, initialize_config_dir

from ouroboros.config import apply_explicit, explicit_notices, validate
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.prompts.datasets import Prompt
from ouroboros.running.sinks import read_records
from ouroboros.strategies import build_proposer
from simulators import trust
from simulators.architectures import load_conf
from simulators.pair import category_options, make_pair
from simulators.sim_profiles import load_profile
from simulators.simconfig import SimConfig

ROOT = Path(__file__).resolve().parents[1]
CLOSED, OPEN, MIX = "qwen_coder_mtbench_closed", "qwen_coder_mtbench_open", "qwen_coder_mtbench_chat"


def composed(*overrides: str):
    ovr = list(overrides)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        run = apply_explicit(validate(compose("config", overrides=ovr)), ovr)
    return run, explicit_notices(run, ovr)


def surrogate_opts(name: str, **extra):
    """A profile's options with prompts in the surrogate's own tokens (no fetched tokenizer needed)."""
    return {**load_profile(name), "prompt_tokens": "surrogate", **extra}


# ----------------------------------------------------------------------------------------------- picked by default
def test_an_mtbench_run_decides_each_category_by_its_profile_and_says_so():
    run, notes = composed("model=qwen_coder", "backend=sim", "dataset=mtbench", "hardware=h100")
    routes = run.sim["by_category"]
    assert run.sim["profile"] == MIX
    assert {routes[c] for c in ("reasoning", "math", "coding", "extraction")} == {CLOSED}
    assert {routes[c] for c in ("writing", "roleplay", "stem", "humanities")} == {OPEN}
    [note] = [n for n in notes if "per prompt category" in n]
    assert CLOSED in note and OPEN in note and "sim.by_category=null opts out" in note


@pytest.mark.parametrize("extra", [("sim.by_category=null",), (f"sim={MIX}",)])
def test_no_routing_when_opted_out_or_a_profile_is_picked_by_hand(extra):
    """sim.by_category=null and an explicit sim= (that profile alone) decide every prompt by one option set."""
    run, notes = composed("model=qwen_coder", "backend=sim", "dataset=mtbench", "hardware=h100", *extra)
    assert not run.sim.get("by_category")
    assert not any("per prompt category" in n for n in notes)


def test_other_tasks_are_not_routed():
    run, _ = composed("model=qwen_coder", "backend=sim", "dataset=humaneval", "hardware=h100")
    assert not run.sim.get("by_category")


# ----------------------------------------------------------------------------------------------- the options
def test_a_category_gets_its_profiles_text_and_draft_options_and_typed_ones_win():
    closed = load_profile(CLOSED)
    mix = load_profile(MIX)
    assert closed["alpha_easy"] != mix["alpha_easy"]   # else the check below could not fail
    opts = SimConfig.from_dict({**mix, "by_category": {"math": CLOSED}})
    cat = category_options(opts)["math"]
    assert cat.alpha_easy == closed["alpha_easy"] and cat.induction == closed["induction"]
    assert cat.profile == CLOSED and cat.by_category is None
    typed = category_options(SimConfig.from_dict({**mix, "alpha_easy": 0.5, "by_category": {"math": CLOSED}}))
    assert typed["math"].alpha_easy == 0.5 and typed["math"].induction == closed["induction"]


@pytest.mark.parametrize("routes, extra, msg", [
    ({"math": "no_such_profile"}, {}, "unknown sim profile 'no_such_profile'"),
    ({"math": "yi34b_6b_gsm8k"}, {}, "of pair 'yi34b_6b'"),
    ({"math": "qwen_coder_humaneval_chat"}, {}, "reads prompt ids otherwise"),
    ({"math": CLOSED}, {"tokens": "replay", "trace": "t.json"}, "sim.tokens=replay decides every prompt"),
])
def test_bad_category_profiles_are_one_line(routes, extra, msg):
    with pytest.raises(OuroborosError, match=msg) as e:
        category_options(SimConfig.from_dict({**load_profile(MIX), **extra, "by_category": routes}))
    assert "\n" not in str(e.value)


def test_by_category_must_map_names_to_names():
    with pytest.raises(OuroborosError, match="sim.by_category must be a mapping of names to names"):
        SimConfig.from_dict({"by_category": {"math": 3}})


# ----------------------------------------------------------------------------------------------- the routed pair
def decoded(pair, prompt):
    proposer = build_proposer("speculative", {"gamma": 3}, pair.target, pair.draft)
    res = decode(pair.target, proposer, list(prompt.ids), 48, pair.eos_ids, prompt_id=prompt.id)
    return res.output, [s.accepted for s in res.steps]


def test_a_routed_prompt_decodes_as_its_category_profile_alone_and_the_others_as_the_run_options():
    model, hw = load_conf("model", "qwen_coder"), load_conf("hardware", "h100")
    routed = make_pair(model, hw, surrogate_opts(MIX, by_category={"math": CLOSED}), seed=0)
    closed = make_pair(model, hw, surrogate_opts(CLOSED), seed=0)
    mix = make_pair(model, hw, surrogate_opts(MIX), seed=0)
    a, b = routed.default_prompts(2, 0)
    math, writing = Prompt(a.id, a.ids, None, "math"), Prompt(b.id, b.ids, None, "writing")
    assert routed.route([math, writing]) == {CLOSED: 1}
    assert decoded(routed, math) == decoded(closed, math)
    assert routed.target.lm is routed.by_category["math"][1]    # type: ignore[attr-defined]
    assert decoded(routed, writing) == decoded(mix, writing)
    assert routed.target.lm is routed.target.base_lm            # type: ignore[attr-defined]
    assert decoded(closed, math) != decoded(mix, math)          # the two option sets decide differently
    assert routed.target.fresh().routes is routed.target.routes  # type: ignore[attr-defined]


def test_a_run_names_the_category_profiles_in_its_note_record_and_label(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", "model=qwen_coder", "backend=sim", "hardware=h100", "dataset=specbench",
                     f"dataset.path={ROOT / 'tests/fixtures/specbench_sample.jsonl'}",
                     "dataset.categories=[writing,coding]", "sim.prompt_tokens=surrogate", "strategy=speculative",
                     "max_new_tokens=16", "logger=quiet", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    assert f"note: decisions per prompt category: {CLOSED} decides 2, {OPEN} decides 2, {MIX} 0" in res.err
    spec = next(r for r in read_records(out) if r["strategy"] == "speculative")
    assert spec["decisions"]["by_category"]["coding"] == CLOSED
    assert spec["decisions"]["label"] == f"profile {MIX} (recorded) + per category {CLOSED}, {OPEN}"
    assert trust.source_label(spec["decisions"]) == spec["decisions"]["label"]


def test_prompts_read_specials_as_eos_wherever_a_category_profile_copies_from_its_prompt(monkeypatch):
    """A prompt's ids are read before its category routes it, so where a routed profile copies from the prompt
    (sim.copy_from=prompt) every prompt reads a chat template's special tokens as EOS: read as stand-in pieces, the
    routed surrogate copied the template into every answer (answers then shared their text: `cross4`)."""
    import simulators.pair as pair_mod
    from simulators.pair import specials_eos

    mix = load_profile(MIX)
    assert mix.get("copy_from", "context") == "context" and load_profile(CLOSED)["copy_from"] == "prompt"
    assert not specials_eos(SimConfig.from_dict(mix))
    assert specials_eos(SimConfig.from_dict({**mix, "by_category": {"math": CLOSED}}))
    assert specials_eos(SimConfig.from_dict(load_profile(CLOSED)))
    seen = []
    monkeypatch.setattr(pair_mod, "prompt_tokenizer", lambda opts, model, tok, eos=False: seen.append(eos) or tok)
    model, hw = load_conf("model", "qwen_coder"), load_conf("hardware", "h100")
    make_pair(model, hw, surrogate_opts(MIX, by_category={"math": CLOSED}), seed=0)
    make_pair(model, hw, surrogate_opts(MIX), seed=0)
    assert seen == [True, False]
