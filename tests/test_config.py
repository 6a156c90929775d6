"""Config validation before any model loads: Hydra's errors for typos, one line for impossible combinations,
every sweep preset composes into valid points, point identity."""

import subprocess
import sys

import pytest
from cli_helper import HYDRA_MODULES, run_module
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException, MissingConfigException
from test_sweep import CONF, ROOT, SMALL

import ouroboros.cli as cli_mod
from ouroboros.config import RunConfig, check_overrides, one_line, validate
from ouroboros.errors import OuroborosError
from ouroboros.running.point import point_id, point_key
from ouroboros.sweep import plan


def composed(*overrides: str, hydra_cfg: bool = False):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=hydra_cfg)


def test_defaults_validate_to_plain_dataclasses():
    run = validate(composed())
    assert isinstance(run, RunConfig) and isinstance(run.model, dict) and isinstance(run.strategy.params, dict)
    assert run.backend_kind == "hf"   # the tiny pair has weights
    assert validate(composed("model=llama70b_7b")).backend_kind == "sim"   # a profile-only pair
    assert run.logger.wandb.mode == "offline"


def test_typo_in_group_option_is_hydras_error():
    with pytest.raises(MissingConfigException) as e:
        composed("strategy=speculativ")
    assert "speculativ" in str(e.value) and "speculative" in str(e.value)   # lists the available options


@pytest.mark.parametrize("override", ["strategy.params.gama=3", "max_new_token=5", "logger.wandb.mod=online",
                                      "backend.dtyp=bf16"])
def test_typo_in_field_is_hydras_error(override):
    with pytest.raises(ConfigCompositionException) as e:
        composed(override)
    key = override.split("=")[0]
    assert f"Could not override '{key}'" in str(e.value)
    assert "not in" in str(e.value.__cause__)   # "not in struct" / "not in 'RunConfig'"


def test_one_line_joins_hydras_option_list_and_drops_its_search_path():
    with pytest.raises(MissingConfigException) as e:
        composed("strategy=speculativ")
    msg = one_line(e.value)
    assert "\n" not in msg and "Could not find 'strategy/speculativ'" in msg
    assert "Available options in 'strategy': cascade, " in msg and ", speculative, " in msg
    assert "search path" not in msg and "file://" not in msg   # no absolute paths in the one line
    with pytest.raises(ConfigCompositionException) as e:
        composed("strategy.params.gama=3")
    msg = one_line(e.value)   # the cause (why) joins the message (what)
    assert msg == ("Could not override 'strategy.params.gama'; To append to your config use "
                   "+strategy.params.gama=3; Key 'gama' is not in struct")


@pytest.mark.parametrize("override,needle", [
    ("strategy=speculativ", "Could not find 'strategy/speculativ'"),
    ("hardware=a900", "Could not find 'hardware/a900'"),
    ("sim=nope", "Could not find 'sim/nope'"),
    ("max_new_token=5", "Could not override 'max_new_token'"),
    ("seed=abc", "Value 'abc' of type 'str' could not be converted to Integer"),
])
def test_check_overrides_raises_hydras_error_in_one_line(override, needle):
    with pytest.raises(OuroborosError) as e:
        check_overrides([override])
    assert needle in str(e.value) and "\n" not in str(e.value)
    check_overrides(["strategy=speculative", "strategy.params.gamma=3", "hydra.run.dir=x"])   # good ones pass


def test_a_key_added_with_plus_is_one_line():
    with pytest.raises(OuroborosError) as e:
        validate(composed("+foo=1"))
    assert str(e.value) == "Key 'foo' not in 'RunConfig'"


@pytest.mark.parametrize("module", HYDRA_MODULES)
@pytest.mark.parametrize("override,needle", [
    ("strategy=nope", "error: In 'config': Could not find 'strategy/nope'; Available options in 'strategy': "),
    ("+foo=1", "error: Key 'foo' not in 'RunConfig'"),
])
def test_entry_points_print_a_bad_override_in_one_line(tmp_path, module, override, needle):
    res = run_module(module, override, tmp=tmp_path)
    assert res.code == 2
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(needle), res.err
    assert "Traceback" not in res.err and not res.out


def test_hydra_cli_leaves_flags_to_hydra(monkeypatch):
    calls = []
    monkeypatch.setattr(cli_mod, "check_overrides", lambda args: calls.append(("check", args)))
    for argv, checked in ((["run", "--cfg", "job", "strategy=nope"], False), (["run", "seed=1"], True)):
        calls.clear()
        monkeypatch.setattr(sys, "argv", argv)
        cli_mod.hydra_cli(lambda: calls.append(("main", None)))
        assert calls == ([("check", ["seed=1"])] if checked else []) + [("main", None)]


@pytest.mark.parametrize("overrides,needle", [
    (["max_new_tokens=0"], "max_new_tokens must be >= 1"),
    (["strategy=speculative", "strategy.params.gamma=0"], "gamma must be >= 1"),
    (["strategy=ouroboros", "strategy.params.history=false", "strategy.params.pool_save=p.json"], "need history"),
    (["model=llama70b_7b", "backend=hf"], "is a simulator profile: use backend=sim"),
    (["baseline=nope"], "unknown strategy 'nope'"),
    (["logger.wandb.mode=offlin"], "logger.wandb.mode must be one of"),
    (["backend=hf", "backend.dtype=fp12"], "unknown dtype"),
])
def test_impossible_combinations_get_one_line(overrides, needle):
    with pytest.raises(OuroborosError) as e:
        validate(composed(*overrides))
    msg = str(e.value)
    assert needle in msg and "\n" not in msg


@pytest.mark.parametrize("preset,n_points", [("single", 2), ("compare", 9), ("gamma", 15), ("k", 8), ("wn", 13),
                                             ("grid27", 28), ("ablation", 6), ("genlen", 8)])
def test_every_preset_plans_valid_points(preset, n_points):
    ovr = [*SMALL, f"sweep={preset}"]
    cfg = composed(*ovr, hydra_cfg=True)
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        points = plan(ovr, dict(cfg.hydra.runtime.choices), validate(cfg).sweep)
    assert len(points) == n_points
    assert len({p.id for p in points}) == n_points
    base_ids = {p.id for p in points if p.run.strategy.name == "vanilla"}
    assert all(p.baseline_id in base_ids for p in points)   # every baseline is in the plan
    if preset in ("wn", "grid27"):
        assert all(p.run.strategy.params["G"] == p.run.strategy.params["W"] for p in points[1:])
    if preset == "genlen":   # one baseline per generation length
        assert len(base_ids) == 4


def test_point_identity():
    a = validate(composed("strategy=speculative"))
    b = validate(composed("strategy=speculative", "strategy.params.gamma=4"))   # the default, written out
    c = validate(composed("strategy=speculative", "strategy.params.gamma=5"))
    d = validate(composed("strategy=speculative", "logger=quiet", "out=elsewhere.jsonl"))  # not part of a measurement
    assert point_id(point_key(a)) == point_id(point_key(b)) == point_id(point_key(d)) != point_id(point_key(c))
    assert point_key(a, strategy="vanilla")["strategy"] == {"name": "vanilla", "params": {}}


def test_cli_rejects_before_loading_any_model():
    proc = subprocess.run([sys.executable, "-m", "ouroboros.sweep", "model=llama70b_7b", "sweep=gamma",
                           "strategy.params.gamma=-1", "out=null"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "gamma must be >= 1" in proc.stderr and "Traceback" not in proc.stderr


def test_every_sim_option_is_in_the_sim_config():
    """conf/sim/default.yaml lists every simulator option (SimConfig's fields) with its default, so `sim.<key>=v`
    works for all."""
    import yaml

    from simulators.simconfig import SimConfig

    conf = yaml.safe_load(open(ROOT / "conf" / "sim" / "default.yaml"))
    assert conf == SimConfig().as_dict()
