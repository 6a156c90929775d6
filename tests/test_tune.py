"""The tuner (paper's Algorithm 1): one parameter at a time, each stage at the best values found so far; the
chosen settings are written as a loadable strategy YAML."""

from pathlib import Path

import yaml
from hydra import compose, initialize_config_dir
from test_sweep import CONF, SMALL

from ouroboros.config import validate
from ouroboros.running.executor import make_executor
from ouroboros.strategies import make_config
from ouroboros.tune import tune, write_strategy_yaml


def test_tune_stages_pick_the_best_and_write_yaml(tmp_path):
    ovr = [*SMALL, "strategy=ouroboros", f"out={tmp_path / 'r.jsonl'}",
           'tune.stages=["strategy.params.gamma=2,5","strategy.params.W=8,20","strategy.params.beta_typo=1,2"]']
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        run = validate(compose("config", overrides=ovr))
    params, history = tune(run, make_executor(run, resume=True, sweep="tune"))
    assert [r.params["gamma"] for r in history[:2]] == [2, 5]
    stage1 = {r.params["gamma"]: r.totals["tokens_per_s"] for r in history[:2]}
    assert params["gamma"] == max(stage1, key=stage1.get)
    assert all(r.params["gamma"] == params["gamma"] for r in history[2:])    # W searched at the best gamma
    assert [r.params["W"] for r in history[2:]] == [8, 20]
    assert all(r.params["G"] == r.params["W"] for r in history[2:])      # G tied to W (both start at 20)
    stage2 = {r.params["W"]: r.totals["tokens_per_s"] for r in history[2:]}
    assert params["W"] == max(stage2, key=stage2.get)
    path = write_strategy_yaml(tmp_path / "tuned.yaml", run, params, history[-1])
    loaded = yaml.safe_load(path.read_text())
    assert loaded["name"] == "ouroboros" and loaded["params"] == params
    make_config(loaded["name"], loaded["params"])    # a valid strategy config


def test_tune_writes_a_preset_selectable_by_name_without_touching_the_package(tmp_path, monkeypatch):
    """Issue 33: the preset lands under runs/conf/strategy/tuned/ (on Hydra's search path), is selected with
    strategy=tuned/<name>, and the shipped conf/strategy/ stays as it is; the table lists each point once."""
    import os

    from cli_helper import run_module
    from test_sweep import SMALL

    shipped = {p.name: p.read_bytes() for p in (Path(CONF) / "strategy").glob("*.yaml")}
    monkeypatch.chdir(tmp_path)
    res = run_module("ouroboros.tune", *SMALL, "strategy=pld", f"out={tmp_path / 'r.jsonl'}",
                     'tune.stages=["strategy.params.num_pred_tokens=3,6","strategy.params.max_ngram=2,3"]',
                     tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    assert "select it with strategy=tuned/pld" in res.out
    preset = tmp_path / "runs/conf/strategy/tuned/pld.yaml"
    assert preset.is_file() and {p.name: p.read_bytes() for p in (Path(CONF) / "strategy").glob("*.yaml")} == shipped
    rows = [ln for ln in res.out.splitlines() if ln.startswith("pld")]
    assert len(rows) == len(set(rows)) == 3    # (3, 3), (6, 3) and one more max_ngram; the revisited point once
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        run = validate(compose("config", overrides=["strategy=tuned/pld"]))
    assert run.strategy.name == "pld" and run.strategy.params == yaml.safe_load(preset.read_text())["params"]
    assert os.getcwd() == str(tmp_path)
