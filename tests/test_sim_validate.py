"""`python -m simulators check paper` machinery: the fast SpS replay equals the decode loop (also with the HF
draft-length schedule), the agreement fit hits its target, overheads add per forward."""

from dataclasses import replace

import pytest

from ouroboros.errors import OuroborosError
from simulators.lab.calibration.paper_fit import TASKS, Run, Trace, fit_agreement, run, sps_plan

SMALL = replace(TASKS[3], max_new=40)  # CNN/DM settings, short outputs


@pytest.mark.parametrize("setting", ["1", "4", "hf"])
def test_sps_replay_equals_the_loop(setting):
    params = {"schedule": "hf"} if setting == "hf" else {"gamma": int(setting)}
    real = run(SMALL, "speculative", params, 0.9, 3, 0)
    plan = sps_plan(Trace(SMALL, 3, 0), 0.9, setting)
    assert (plan.new_tokens, plan.steps, plan.target_fw, plan.draft_fw) == \
        (real.new_tokens, real.steps, real.target_fw, real.draft_fw)
    assert plan.target_s == pytest.approx(real.target_s, rel=1e-9)
    assert plan.draft_s == pytest.approx(real.draft_s, rel=0.01)  # the replay rounds the draft's ctx


def test_fit_agreement_hits_the_target():
    tr = Trace(SMALL, 3, 0)
    a = fit_agreement(tr, "4", 3.0)
    assert a is not None and 0 < a < 1
    assert sps_plan(tr, a, "4", with_cost=False).eta == pytest.approx(3.0, rel=0.05)
    assert fit_agreement(tr, "1", 2.5) is None  # beyond gamma + 1


def test_overheads_add_per_forward():
    r = Run(new_tokens=10, steps=4, target_s=1.0, draft_s=0.5, target_fw=5, draft_fw=20)
    assert r.eta == 2.5
    assert r.tps(0.1, 0.01) == pytest.approx(10 / (1.0 + 0.5 + 0.5 + 0.2))


def test_validate_cli_refuses_empty_runs(capsys):
    from simulators.__main__ import main

    assert main(["check", "paper", "--prompts", "0"]) == 2
    assert main(["check", "closed-form", "--tokens", "-1"]) == 2
    assert main(["check", "copy-rate", "--window", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --prompts must be >= 1, got 0", "error: --tokens must be >= 1, got -1",
                   "error: --window must be >= 3, got 2"]


def test_sensitivity_grid_on_the_paper_calibration():
    from simulators.lab.checks.paper import SENSITIVITY_BEST, sensitivity

    lines: list[str] = []
    r = sensitivity(n_prompts=1, out=lines.append)
    assert len(r["tps"]) == 27 and all(v > 0 for v in r["tps"].values())
    assert r["tps"][r["best"]] == max(r["tps"].values()) and r["tps"][r["worst"]] == min(r["tps"].values())
    assert r["std"] > 0  # the knobs matter
    best_line = next(x for x in lines if x.startswith("best"))
    assert f"{SENSITIVITY_BEST[0]:.2f}" in best_line and str(r["best"]) in best_line


def test_draft_overhead_scales_with_the_tasks_target_overhead():
    from simulators.lab.calibration.paper_fit import calibrate

    tasks = TASKS[1:4]   # MBPP (no SpS figure), GSM8K, CNN/DM
    scaled = calibrate(1, 0, "hf", tasks)
    assert scaled.ratio is not None and 0 < scaled.ratio < 3
    for t in tasks:   # MBPP's draft overhead comes from its own vanilla fit, through the shared ratio
        assert scaled.over_d[t.name] == pytest.approx(scaled.ratio * scaled.over_t[t.name])
    assert len({round(v, 9) for v in scaled.over_d.values()}) == 3
    assert "x the target's" in scaled.overheads()
    shared = calibrate(1, 0, "hf", tasks, draft_overhead="shared")
    assert shared.ratio is None and len(set(shared.over_d.values())) == 1
    assert shared.over_t == scaled.over_t   # the target's overheads do not depend on the draft's
    with pytest.raises(OuroborosError, match="draft overhead must be one of scaled, shared"):
        calibrate(1, 0, "hf", tasks, draft_overhead="per-layer")


def test_roofline_shape_reaches_the_paper_pair_and_slows_its_wide_forwards():
    """`--roofline-p` (a sensitivity check) gives the task's pair a smooth A800 roofline: a lookahead-wide forward
    (k near the ridge) costs more, a one-token forward within 2%."""
    from simulators.lab.calibration.paper_fit import task_pair

    t = next(t for t in TASKS if t.name == "CNN/DM")
    sharp, smooth = task_pair(t, 0.9, 0), task_pair(replace(t, roofline_p=2.0), 0.9, 0)
    assert sharp.costs["target"].roofline_p == 0 and smooth.costs["target"].roofline_p == 2.0
    assert smooth.costs["draft"].roofline_p == 2.0
    one = sharp.costs["target"].forward_s(1, 900)
    assert one <= smooth.costs["target"].forward_s(1, 900) < 1.02 * one  # one token: 1/7 of the ridge, tile-rounded
    assert smooth.costs["target"].forward_s(121, 900) > 1.1 * sharp.costs["target"].forward_s(121, 900)
