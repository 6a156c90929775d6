"""SimConfig is the simulator options' single source: the generated files agree with it, its ranges are checked in
one error line each, every option list elsewhere (fit grids, text knobs, profiles) names its fields, and records
written with since-removed options still load."""

import dataclasses
import json

import pytest
import yaml

from ouroboros.errors import OuroborosError
from simulators.simconfig import REMOVED, SimConfig, type_hints, valid_range

FIELDS = {f.name: f for f in dataclasses.fields(SimConfig)}


def test_generated_files_agree_with_the_dataclass():
    from simulators.lab.write_options import DEFAULT_YAML, default_yaml, stale

    assert stale() == []
    assert yaml.safe_load(DEFAULT_YAML.read_text()) == SimConfig().as_dict() == yaml.safe_load(default_yaml())


def test_every_option_says_what_it_is_and_where_it_belongs():
    from simulators.simconfig import GROUPS

    for f in FIELDS.values():
        assert f.metadata["group"] in GROUPS, f.name
        assert len(f.metadata["doc"]) > 15, f.name


def outside(f: dataclasses.Field):
    """A value of the field's type outside its valid range (None: every value of its type is valid)."""
    m = f.metadata
    if m["choices"]:
        return "bogus"
    if m["lo"] is not None:
        return (m["lo"] - 1) if type_hints()[f.name] in (int, int | None) else -0.5
    return None


@pytest.mark.parametrize("name", [n for n, f in FIELDS.items() if outside(f) is not None])
def test_a_value_out_of_range_is_one_line_naming_the_range(name):
    f = FIELDS[name]
    with pytest.raises(OuroborosError) as e:
        SimConfig.from_dict({name: outside(f)})
    msg = str(e.value)
    assert "\n" not in msg and f"sim.{name}" in msg
    assert (valid_range(f).split(",")[0] if not f.metadata["choices"] else "known: ") in msg


@pytest.mark.parametrize(("sim", "words"), [
    ({"p_top": 1.01}, "sim.p_top must be in [0, 1], got 1.01"),
    ({"induction": 1.0}, "sim.induction must be in [0, 1), got 1.0"),
    ({"local_ctx": 4, "order": 3}, "sim.local_ctx must be in [1, order=3], got 4"),
    ({"vocab": 81.5}, "sim.vocab must be an int, got 81.5"),
    ({"local_novel": "maybe"}, "sim.local_novel must be a bool, got 'maybe'"),
    ({"fit": 3}, "sim.fit must be a mapping, got 3"),
    ({"speed": 3}, "sim has no option 'speed'; options: "),
])
def test_bad_options_are_one_line(sim, words):
    with pytest.raises(OuroborosError) as e:
        SimConfig.from_dict(sim)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_an_int_is_a_valid_float_and_the_config_is_frozen():
    cfg = SimConfig.from_dict({"alpha_hard": 0, "t_target_s": 1})
    assert cfg.alpha_hard == 0.0 and isinstance(cfg.alpha_hard, float) and cfg.t_target_s == 1.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.p_top = 0.5  # type: ignore[misc]


def test_removed_options_are_refused_but_old_records_holding_them_still_load(tmp_path):
    from ouroboros.running.sinks import load_sweep_records

    for name, kept in REMOVED.items():
        assert name not in FIELDS
        with pytest.raises(OuroborosError, match=f"sim has no option '{name}' \\(removed; the simulator keeps"):
            SimConfig.from_dict({name: kept})
    old = {**SimConfig().as_dict(), **REMOVED}
    assert SimConfig.from_dict(old, legacy=True) == SimConfig()
    path = tmp_path / "records.jsonl"   # a record stores the options it ran with in its config
    rec = {"point_id": "0" * 16, "backend": "sim", "strategy": "vanilla", "config": {"sim": old}}
    path.write_text(json.dumps(rec) + "\n")
    (loaded,) = load_sweep_records(path)
    assert loaded.config["sim"] == old and loaded.clock == "modelled"


def test_option_lists_elsewhere_name_fields_with_valid_values():
    from simulators.lab.calibration import paper_fit, prior
    from simulators.lab.decisions import fit as decisions

    for name, grid in decisions.FIT_GRID:
        assert name in FIELDS, name
        for v in grid:
            SimConfig.from_dict({name: v, **({"local_ctx": 1} if name == "order" else {})})
    for names in (prior.PRIOR_KNOBS, tuple(prior.PRIOR_START), paper_fit.TEXT_KNOBS, *decisions.FIT_JOINT):
        assert set(names) <= set(FIELDS), set(names) - set(FIELDS)
    SimConfig.from_dict(prior.PRIOR_START)


def test_every_committed_profile_is_a_valid_config():
    from simulators.architectures import conf_root
    from simulators.sim_profiles import load_profile

    names = [p.stem for p in (conf_root() / "sim").glob("*.yaml") if p.stem != "default"]
    assert names
    for name in names:
        SimConfig.from_dict(load_profile(name))


def test_type_hints_cover_every_field():
    assert set(type_hints()) == set(FIELDS)
