"""`calibrate bands` across pairs (simulators/lab/calibration/across.py): which settings, which points each task's
sweep runs, how a published figure becomes a cell, and the leave-one-setting-out coverage."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ouroboros.errors import OuroborosError
from simulators.lab.calibration import across
from simulators.lab.calibration.bands import not_measured, summarise

CONF = Path(__file__).resolve().parents[1] / "conf" / "calibration"


def load(name: str) -> dict:
    return yaml.safe_load((CONF / f"{name}.yaml").read_text())


def test_the_settings_are_the_figures_files_with_held_out_figures():
    names = [p.stem for p in across.settings(None)]
    assert "yi34b_6b_a800x2" in names and sum(n.startswith("specbench_") for n in names) == 4
    assert "qwen_coder_xeon_amx" in names      # the real Qwen pair on this project's CPU: a setting like the others
    assert "llama70b_7b_a800x2" not in names   # the main job's pair: its other figures are kept aside
    with pytest.raises(OuroborosError, match="no figures file conf/calibration/nope.yaml"):
        across.settings(["nope"])
    with pytest.raises(OuroborosError, match="holds no held-out figure"):
        across.settings(["llama70b_7b_a800x2"])


def test_each_task_sweeps_sps_and_every_held_out_strategy_at_its_published_settings():
    yi = load("yi34b_6b_a800x2")
    pts = dict(across.task_points(yi, yi["tasks"]["humaneval"]))
    assert pts["speculative"] == ["strategy=speculative", "strategy.params.gamma=5", "strategy.params.schedule=hf"]
    assert pts["ouroboros"] == ["strategy=ouroboros", "strategy.params.gamma=12", "strategy.params.W=20",
                                "strategy.params.N=7", "strategy.params.K=3", "strategy.params.G=20"]
    assert pts["lookahead"] == ["strategy=lookahead", "strategy.params.W=20", "strategy.params.N=7",
                                "strategy.params.G=20"]   # the paper's lookahead: the task's W and N, G = W
    sb = load("specbench_vicuna7b_a100")
    pts = dict(across.task_points(sb, sb["tasks"]["qa"]))
    assert set(pts) == {"speculative", "pld", "rest", "lookahead"}
    assert "strategy.params.num_nodes=64" in pts["rest"] and "strategy.params.num_pred_tokens=10" in pts["pld"]
    assert pts["lookahead"][1:] == ["strategy.params.W=7", "strategy.params.N=5", "strategy.params.G=7"]
    qw = load("qwen_coder_xeon_amx")   # the real pair: every strategy it measured, at the YAML defaults
    pts = dict(across.task_points(qw, qw["tasks"]["humaneval"]))
    assert set(pts) == {"speculative", "pld", "lookahead", "cascade", "ouroboros", "suffix", "recycling"}
    assert pts["speculative"][1:] == ["strategy.params.gamma=4", "strategy.params.schedule=constant"]
    assert pts["suffix"] == ["strategy=suffix"] and pts["recycling"] == ["strategy=recycling"]
    with pytest.raises(OuroborosError, match="held-out strategy 'medusa'"):
        across.task_points({}, {"held_out": {"medusa": {"speedup": 2.0}}})
    # the points are one Hydra override a user could type
    from hydra.core.override_parser.overrides_parser import OverridesParser

    o = OverridesParser.create().parse_overrides([across.sweep_overrides(list(pts.items()))])[0]
    assert [p["label"] for p in o.value()] == list(pts) and o.value()[1]["overrides"] == pts["pld"]


def rec(tps: float, spd: float, sb: float, eta: float, new: int = 100) -> dict:
    return {"totals": {"tokens_per_s": tps, "block_efficiency": eta, "new_tokens": new,
                       "target_forwards": round(new / eta)}, "speedup": spd, "speedup_specbench": sb}


def test_a_published_figure_is_one_cell_in_its_own_speedup_definition():
    yi = load("yi34b_6b_a800x2")
    t = yi["tasks"]["humaneval"]
    recs = {"vanilla": rec(15.0, 1.0, 1.0, 1.0), "speculative": rec(21.5, 1.4, 1.9, 11.0),
            "lookahead": rec(33.0, 2.2, 2.5, 3.08), "ouroboros": rec(60.0, 4.0, 4.5, 13.0)}
    cells = {(c["strategy"], c["metric"]): c for c in across.task_cells(yi, "humaneval", t, recs, "profile_measured",
                                                                           "yi34b_6b_a800x2")}
    # the paper's speedup is time over time: the record's `speedup`, against tok/s over vanilla's published
    assert cells[("lookahead", "speedup")]["error"] == pytest.approx(2.2 / (31.9 / 15.6) - 1, abs=1e-4)
    assert cells[("ouroboros", "tokens_per_s")]["error"] == pytest.approx(60 / 61.2 - 1, abs=1e-4)
    assert cells[("ouroboros", "block_efficiency")]["error"] == pytest.approx(13 / 13.12 - 1, abs=1e-4)
    assert cells[("speculative", "speedup")]["fitted"] is True and ("vanilla", "tokens_per_s") not in cells
    prior = {(c["strategy"], c["metric"]) for c in across.task_cells(yi, "humaneval", t, recs, "prior", "yi")}
    assert ("vanilla", "tokens_per_s") in prior   # the prior is fitted to nothing: every figure is a cell
    sb = load("specbench_vicuna7b_a100")
    t = sb["tasks"]["qa"]
    recs = {"speculative": rec(0, 1.5, 1.8, 2.0), "pld": rec(0, 1.2, 1.4, 1.7)}
    cells = {(c["strategy"], c["metric"]): c for c in across.task_cells(sb, "qa", t, recs, "profile_measured", "sb")}
    # Spec-Bench's speedup is the mean per-question token/s over vanilla's: the record's `speedup_specbench`
    assert cells[("pld", "speedup")]["error"] == pytest.approx(1.4 / t["held_out"]["pld"]["speedup"] - 1, abs=1e-4)
    assert ("rest", "speedup") not in cells   # no record of it, no cell


def test_a_settings_mean_accepted_tokens_pools_its_tasks():
    sb = load("specbench_vicuna7b_a100")
    runs = {"a": {"pld": rec(0, 1, 1, 2.0, 100)}, "b": {"pld": rec(0, 1, 1, 1.0, 100)}}
    (cell,) = [c for c in across.overall_cells(sb, runs, "prior", "sb") if c["strategy"] == "pld"]
    assert cell["predicted"] == pytest.approx(200 / 150, abs=1e-4)
    assert cell["published"] == sb["held_out_overall"]["pld"]["mean_accepted_tokens"]
    runs["b"] = {}   # a task without the strategy: no pooled figure
    assert not [c for c in across.overall_cells(sb, runs, "prior", "sb") if c["strategy"] == "pld"]


def test_leave_one_setting_out_holds_each_setting_against_the_others_band():
    def c(setting: str, e: float) -> dict:
        return {"setting": setting, "strategy": "pld", "metric": "speedup", "error": e}

    cells = [c("a", 0.1), c("a", -0.2), c("b", 0.1), c("b", 0.3), c("c", 0.9)]
    got = across.leave_one_out(cells, 0.8, 3)["pld"]["speedup"]
    # a: band of b, c = q80(0.1, 0.3, 0.9) = 0.66 -> both inside; b: band of a, c = q80(.1,.2,.9) = .62 -> both;
    # c: band of a, b = q80(.1,.2,.1,.3) = .24 -> outside
    assert got["by_setting"]["a"] == {"band": 0.66, "cells": 2, "inside": 2}
    assert got["by_setting"]["c"] == {"band": 0.24, "cells": 1, "inside": 0}
    assert got["coverage"] == pytest.approx(4 / 5)
    alone = across.leave_one_out([c("a", 0.1), c("a", 0.2)], 0.8, 3)["pld"]["speedup"]
    assert alone["coverage"] is None and alone["no_other"] == 2   # no other setting: no band to hold them
    assert "loso_coverage" not in summarise([c("a", 0.1), c("a", 0.2), c("a", 0.3)], [Path("x")])["pld"]
    summary = summarise(cells, [Path("x")])
    assert summary["pld"]["loso_coverage"] == {"speedup": 0.8} and summary["pld"]["cells"] == {"speedup": 5}


def test_a_strategy_without_a_published_figure_says_why():
    def c(m: str, e: float) -> dict:
        return {"strategy": m, "metric": "speedup", "error": e, "setting": "qwen", "task": "humaneval"}

    why = not_measured([c("pld", 0.1), c("pld", 0.2), c("pld", -0.1), c("lookahead", 0.1), c("lookahead", 0.2),
                        c("lookahead", 0.3), c("recycling", 0.03)])
    assert "pld" not in why and "lookahead" not in why and "vanilla" not in why
    assert {"cascade", "suffix"} <= set(why) and "no published setting" in why["cascade"]
    # one cell is no band: the reason says what was measured
    assert why["recycling"] == "measured on 1 cell only (qwen humaneval: +3%), fewer than the 3 a band needs"
    assert "recycling" not in summarise([c("recycling", 0.03)])


def test_the_table_says_why_a_strategy_has_no_band(monkeypatch):
    from simulators import trust

    doc = {"profile_measured": {"command": "c", "commit": "x", "held_out": "h",
                                "strategies": {"pld": {"speedup": 0.5, "cells": {"speedup": 3}}},
                                "not_measured": {"cascade": "no figure of it is published"}}}
    monkeypatch.setattr(trust, "bands", lambda: doc)
    prof = yaml.safe_load((Path(__file__).resolve().parents[1] / "conf" / "sim" / "yi34b_6b_gsm8k.yaml").read_text())
    prof.pop("defaults")
    prof["tokens"] = "surrogate"
    got = trust.record_decisions(prof, "cascade", {"kind": "synthetic"})
    assert got["band"] is None and got["no_band"] == "no figure of it is published"
    assert "no_band" not in trust.record_decisions(prof, "pld", {"kind": "synthetic"})
    from ouroboros.running.table import _no_band

    class R:   # the two fields _no_band reads
        def __init__(self, strategy, decisions):
            self.strategy, self.decisions = strategy, decisions

    rows = [R("cascade", got), R("pld", {}), R("cascade", got)]
    assert _no_band(rows) == {"no figure of it is published": ["cascade"]}   # type: ignore[arg-type]


def test_a_profile_of_your_own_under_runs_conf_is_found(tmp_path, monkeypatch):
    """`calibrate measured --out-dir runs/conf/sim` writes where Hydra's search path (conf/config.yaml) finds it: the
    simulator finds it there too, after the package's own conf/."""
    from simulators.architectures import conf_file, conf_names, load_conf

    monkeypatch.chdir(tmp_path)
    assert conf_file("sim", "mine") is None
    (tmp_path / "runs" / "conf" / "sim").mkdir(parents=True)
    (tmp_path / "runs" / "conf" / "sim" / "mine.yaml").write_text("pair: yi34b_6b\nalpha_easy: 0.5\n")
    assert conf_file("sim", "mine") == Path("runs/conf/sim/mine.yaml") and "mine" in conf_names("sim")
    assert load_conf("sim", "mine")["alpha_easy"] == 0.5
    from simulators.architectures import conf_root

    assert conf_file("sim", "default") == conf_root() / "sim" / "default.yaml"   # the package's own first
