"""Issue 60 #1: `calibrate measured` takes what papers publish. From vanilla + SpS token/s without an SpS block
efficiency (eta inferred through the cost model, marked inferred, with its spread), from an SpS speedup alone (vanilla
from the hardware roofline), from Spec-Bench-style per-category speedups with one mean accepted tokens for the whole
setting; it prints its fit residuals and refuses a fit that misses its own inputs by more than --tolerance; it takes
the machine's --devices / --placement its own error advises; its provenance names files without machine paths, the
command whole and the commit with -dirty. The fits run on the simulator with 3 prompts of 64 tokens."""

import hashlib
from pathlib import Path

import pytest
import yaml
from cli_helper import run_module

from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.running.session import git_commit
from ouroboros.strategies import build_proposer
from simulators.architectures import load_conf
from simulators.lab.calibration.paper_fit import calibrate
from simulators.lab.figures import YI_FIGURES, load_tasks, make_task
from simulators.pair import make_pair

ROOT = Path(__file__).resolve().parents[1]
QWEN_FIGURES = ROOT / "conf" / "calibration" / "qwen_coder_xeon_amx.yaml"
# a pair's figures as flags: HumanEval-like code, 64 tokens, SpS at gamma 4 (3 prompts: a few seconds a fit)
BASE = ["calibrate", "measured", "--model", "llama70b_7b", "--task", "humaneval", "--hardware", "a800x2",
        "--sps-gamma", "4", "--max-new-tokens", "64", "--prompt-len", "150", "--prompts", "3"]
SPEC_BENCH = """model: llama70b_7b
hardware: a800x2
source: a Spec-Bench-style setting (per-category speedups, one mean accepted tokens)
sps: {{schedule: hf, gamma: 5, mean_accepted_tokens: {mean}}}
tasks:
  humaneval: {{corpus: code, prompt_len: 150, max_new_tokens: 64, sps_speedup: 1.5}}
  mbpp: {{corpus: code, prompt_len: 300, max_new_tokens: 64, sps_speedup: 1.8,
         held_out: {{pld: {{speedup: 1.4}}, lookahead: {{mean_accepted_tokens: 1.6}}}}}}
"""
# two tasks with every figure given (what the command took before): one draft overhead ratio for both
GIVEN = """model: llama70b_7b
hardware: a800x2
source: measured by hand
sps: {gamma: 4}
tasks:
  humaneval: {corpus: code, prompt_len: 150, max_new_tokens: 64, vanilla_tok_s: 8, sps_tok_s: 12,
              sps_block_efficiency: 3.2}
  mbpp: {corpus: code, prompt_len: 300, max_new_tokens: 64, vanilla_tok_s: 8, sps_tok_s: 11,
         sps_block_efficiency: 3.4, held_out: {pld: {speedup: 1.4}}}
"""


def profile(out: Path, task: str = "humaneval") -> dict:
    return yaml.safe_load((out / f"llama70b_7b_{task}.yaml").read_text())


def sweep(prof: dict, strategy: str, params: dict, max_new: int, prompt_len: int, n: int = 3) -> tuple[float, float]:
    """(token/s, block efficiency) of a run on the profile as a simulated run takes it (its options over the
    hardware's, whose estimated overheads its fitted ones replace), on n prompts cut as the fit cut them."""
    sim = {k: v for k, v in prof.items() if k not in ("fit", "defaults")}
    pair = make_pair(load_conf("model", prof["pair"]), load_conf("hardware", prof["fit"]["hardware"]), sim, seed=0)
    prompts = pair.target.lm.prompts(  # type: ignore[attr-defined]
        n, 0, max(8, round(0.75 * prompt_len)), round(1.25 * prompt_len))
    proposer = build_proposer(strategy, params, pair.target, pair.draft if strategy != "vanilla" else None)
    new = steps = 0
    for p in prompts:
        res = decode(pair.target, proposer, p, max_new, pair.eos_ids)
        new, steps = new + res.new_tokens, steps + len(res.steps)
    return new / pair.clock.now(), new / steps


def refused(res, out: Path, needle: str) -> str:
    lines = res.err.strip().splitlines()
    assert res.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.err[-2000:]
    assert "Traceback" not in res.err and needle in lines[0], lines[0]
    assert not out.exists() or not list(out.iterdir())
    return lines[0]


# ----------------------------------------------------------------------------------------------- token/s alone
def test_token_s_without_eta_infers_it_and_the_profile_reproduces_the_sps_token_s(tmp_path):
    out = tmp_path / "out"
    res = run_module("simulators", *BASE, "--vanilla-tok-s", "8", "--sps-tok-s", "12", "--tolerance", "0.05",
                     "--out-dir", str(out))
    assert res.code == 0, res.err
    prof = profile(out)
    inputs, fit = prof["fit"]["inputs"], prof["fit"]
    assert inputs["vanilla_tok_s"] == 8.0 and inputs["sps_tok_s"] == 12.0 and inputs["sps"] == "gamma=4"
    eta = inputs["sps_block_efficiency"]   # inferred: a value with how, never a bare number like a measured one
    assert isinstance(eta, dict) and "from SpS token/s through the cost model" in eta["inferred"]
    assert 1 < eta["value"] <= 5
    assert 0 <= fit["inferred_eta_spread"] < 1 and f"±{fit['inferred_eta_spread']:.0%}" in res.out
    assert abs(fit["residuals"]["sps_tok_s"]) <= 0.05 and "sps_block_efficiency" not in fit["residuals"]
    tps, run_eta = sweep(prof, "speculative", {"gamma": 4}, 64, 150)
    assert tps == pytest.approx(12.0, rel=0.05) and run_eta == pytest.approx(eta["value"], rel=1e-3)
    assert sweep(prof, "vanilla", {}, 64, 150)[0] == pytest.approx(8.0, rel=1e-3)


# ----------------------------------------------------------------------------------------------- a speedup alone
def test_a_speedup_alone_takes_vanilla_from_the_hardware_roofline(tmp_path):
    out = tmp_path / "out"
    res = run_module("simulators", *BASE, "--sps-speedup", "1.5", "--tolerance", "0.05", "--out-dir", str(out))
    assert res.code == 0, res.err
    prof = profile(out)
    inputs = prof["fit"]["inputs"]
    assert inputs["sps_speedup"] == 1.5 and "sps_tok_s" not in inputs
    assert inputs["vanilla_tok_s"]["inferred"].startswith("hardware roofline")
    assert inputs["sps_block_efficiency"]["inferred"].startswith("from SpS speedup through the cost model")
    from simulators.lab.calibration.paper_fit import estimated_overheads

    t = make_task("humaneval", {"sps_speedup": 1.5, "max_new_tokens": 64, "prompt_len": 150}, "llama70b_7b",
                  "a800x2", "4", "x")
    assert prof["target_overhead_s"] == pytest.approx(estimated_overheads(t)[0], abs=1e-6)   # 4 + 80 layers x ...
    vanilla = sweep(prof, "vanilla", {}, 64, 150)[0]
    assert vanilla == pytest.approx(inputs["vanilla_tok_s"]["value"], rel=1e-3)
    assert sweep(prof, "speculative", {"gamma": 4}, 64, 150)[0] / vanilla == pytest.approx(1.5, rel=0.05)


# ----------------------------------------------------------------------------------------------- Spec-Bench style
def test_spec_bench_speedups_with_one_mean_accepted_tokens(tmp_path):
    """Per task an eta inferred from its own speedup; the draft overhead set so they pool (all new tokens / all target
    forwards) to the setting's mean: two means, two draft overheads, every speedup and each mean reproduced."""
    draft = {}
    for mean in (2.6, 3.0):
        path, out = tmp_path / f"sb{mean}.yaml", tmp_path / f"out{mean}"
        path.write_text(SPEC_BENCH.format(mean=mean))
        res = run_module("simulators", "calibrate", "measured", "--from", str(path), "--prompts", "3", "--tolerance",
                         "0.05", "--out-dir", str(out))
        assert res.code == 0, res.err
        assert "all tasks: the setting's mean accepted tokens" in res.out and f"(input {mean:g}," in res.out
        for task, speedup, prompt_len in (("humaneval", 1.5, 150), ("mbpp", 1.8, 300)):
            prof = profile(out, task)
            inputs = prof["fit"]["inputs"]
            assert inputs["setting_mean_accepted_tokens"] == mean and inputs["sps_speedup"] == speedup
            assert "mean accepted tokens" in inputs["sps_block_efficiency"]["inferred"]
            vanilla = sweep(prof, "vanilla", {}, 64, prompt_len)[0]
            tps, _ = sweep(prof, "speculative", {"schedule": "hf", "gamma": 5}, 64, prompt_len)
            assert tps / vanilla == pytest.approx(speedup, rel=0.05)
            draft[mean] = prof["draft_overhead_s"]
        assert prof["fit"]["residuals"]["sps_speedup"] == pytest.approx(0.0, abs=0.05)
    assert draft[3.0] > draft[2.6]   # more acceptance for the same speedups: a costlier draft


def test_spec_bench_mean_is_pooled_over_every_step(tmp_path):
    """The fitted mean is all tasks' new tokens over all their target forwards, within 1% of the input."""
    from simulators.lab.calibration.measured import residuals

    path = tmp_path / "sb.yaml"
    path.write_text(SPEC_BENCH.format(mean=2.6))

    tasks, _ = load_tasks(path)
    cal = calibrate(3, 0, "hf", tasks)
    rows = residuals(cal, 3, 0)
    pooled = [r for r in rows if r["input"] == "mean_accepted_tokens"]
    assert len(pooled) == 1 and pooled[0]["fitted"] == pytest.approx(2.6, rel=0.01)
    plans = [cal.plans[t.name][t.sps][1] for t in cal.tasks]
    assert pooled[0]["fitted"] == pytest.approx(sum(p.new_tokens for p in plans) / sum(p.steps for p in plans),
                                                rel=0.02)
    assert cal.draft_from == "mean" and all("sps_block_efficiency" in dict(t.inferred) for t in cal.tasks)


# ----------------------------------------------------------------------------------------------- residuals
def test_residuals_are_printed_and_written(tmp_path):
    """Two tasks with a given eta share one draft overhead ratio (least squares): each SpS token/s misses by its
    own residual, printed and kept in the profile."""
    path, out = tmp_path / "fig.yaml", tmp_path / "out"
    path.write_text(GIVEN)
    res = run_module("simulators", "calibrate", "measured", "--from", str(path), "--prompts", "3", "--out-dir",
                     str(out))
    assert res.code == 0, res.err
    assert "fit residuals (fitted / input - 1" in res.out
    for task, sps in (("humaneval", 12), ("mbpp", 11)):
        line = next(ln for ln in res.out.splitlines() if ln.strip().startswith(f"{task}:"))
        assert "vanilla token/s 8 (input 8, +0.0%)" in line and f"(input {sps}, " in line and "SpS eta" in line
        r = profile(out, task)["fit"]["residuals"]
        assert set(r) == {"vanilla_tok_s", "sps_tok_s", "sps_block_efficiency"} and abs(r["sps_tok_s"]) > 0.01
        assert f"(input {sps}, {r['sps_tok_s']:+.1%})" in line
    # the same fit at a tolerance under its residuals: refused, nothing written
    worst = max(abs(profile(out, t)["fit"]["residuals"]["sps_tok_s"]) for t in ("humaneval", "mbpp"))
    out2 = tmp_path / "out2"
    res = run_module("simulators", "calibrate", "measured", "--from", str(path), "--prompts", "3", "--tolerance",
                     f"{worst / 2:g}", "--out-dir", str(out2))
    line = refused(res, out2, "beyond --tolerance")
    assert "its SpS token/s 1" in line and "leave out this task's block efficiency" in line
    assert ("task humaneval" in line) != ("task mbpp" in line)


@pytest.mark.parametrize("flags, needle", [
    # no block efficiency reaches 30 tok/s at gamma 4 (eta 5 at most, and the draft costs): out of reach
    (["--vanilla-tok-s", "8", "--sps-tok-s", "30"], "the fit reproduces its SpS token/s 30 as"),
    (["--sps-speedup", "4.5"], "the fit reproduces its SpS speedup 4.5 as"),
])
def test_an_input_the_fit_cannot_reproduce_is_refused(tmp_path, flags, needle):
    out = tmp_path / "out"
    line = refused(run_module("simulators", *BASE, *flags, "--out-dir", str(out)), out, needle)
    assert "beyond --tolerance 0.2 (20%)" in line and "task humaneval" in line
    assert "out of the cost model's reach" in line


@pytest.mark.parametrize("flags, needle", [
    (["--vanilla-tok-s", "8", "--sps-tok-s", "12", "--sps-speedup", "1.5"], "give --sps-tok-s or --sps-speedup"),
    (["--sps-tok-s", "12"], "give --vanilla-tok-s with --sps-tok-s or --sps-speedup, or --sps-speedup alone"),
    (["--vanilla-tok-s", "8"], "give the SpS figures"),
    (["--sps-speedup", "3", "--sps-eta", "2.5"], "--sps-speedup 3 is more than the SpS block efficiency 2.5"),
    (["--sps-speedup", "6"], "an SpS speedup of 6x is more than gamma + 1 = 5"),
    (["--sps-speedup", "1.5", "--tolerance", "0"], "--tolerance must be a finite number > 0"),
])
def test_bad_published_figures_are_one_line(tmp_path, flags, needle):
    refused(run_module("simulators", *BASE, *flags, "--out-dir", str(tmp_path / "out")), tmp_path / "out", needle)


@pytest.mark.parametrize("change, needle", [
    ("mean_accepted_tokens: 2.6", None),
    ("mean_accepted_tokens: 0.5", "sps.mean_accepted_tokens must be in [1, 64]"),
    ("mean_accepted_tokens: 2.6, typo: 1", "sps: unknown key 'typo'"),
    ("mean_accepted_tokens: 60", "sps.mean_accepted_tokens 60 is out of the cost model's reach"),
])
def test_a_figures_files_mean_accepted_tokens_is_checked(tmp_path, change, needle):
    path, out = tmp_path / "sb.yaml", tmp_path / "out"
    path.write_text(SPEC_BENCH.format(mean=2.6).replace("mean_accepted_tokens: 2.6", change))
    res = run_module("simulators", "calibrate", "measured", "--from", str(path), "--prompts", "3", "--out-dir",
                     str(out))
    if needle is None:
        assert res.code == 0, res.err
    else:
        refused(res, out, needle)


def test_held_out_figures_of_any_strategy_are_checked(tmp_path):
    path, out = tmp_path / "sb.yaml", tmp_path / "out"
    path.write_text(GIVEN.replace("pld: {speedup: 1.4}", "pld: {speedup: -1}"))
    refused(run_module("simulators", "calibrate", "measured", "--from", str(path), "--prompts", "3", "--out-dir",
                       str(out)), out, "held_out.pld.speedup must be a positive number, got -1")


# ----------------------------------------------------------------------------------------------- the machine
def test_the_hint_for_a_pair_that_does_not_fit_names_calibrates_own_flags_and_they_work(tmp_path):
    out = tmp_path / "out"
    flags = [*BASE, "--hardware", "a100", "--sps-speedup", "1.5", "--out-dir", str(out)]
    line = refused(run_module("simulators", *flags), out, "use more devices (--devices 2 --placement pipeline)")
    assert "sim." not in line
    res = run_module("simulators", *flags, "--devices", "2", "--placement", "pipeline")
    assert res.code == 0, res.err
    prof = profile(out)
    assert prof["devices"] == 2 and prof["placement"] == "pipeline" and prof["fit"]["hardware"] == "a100"
    assert "--devices 2 --placement pipeline" in prof["fit"]["command"]
    assert sweep(prof, "vanilla", {}, 64, 150)[0] == pytest.approx(prof["fit"]["inputs"]["vanilla_tok_s"]["value"],
                                                                   rel=1e-3)


# ----------------------------------------------------------------------------------------------- provenance
def test_provenance_names_no_machine_path_and_keeps_the_command_whole(tmp_path):
    path, out = tmp_path / "mine" / "figures.yaml", tmp_path / "out"
    path.parent.mkdir()
    path.write_text(GIVEN)
    res = run_module("simulators", "calibrate", "measured", "--from", str(path), "--prompts", "3", "--out-dir",
                     str(out))
    assert res.code == 0, res.err
    fit = profile(out)["fit"]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert fit["inputs_source"].startswith(f"figures.yaml (sha256 {digest}): measured by hand")
    assert str(path.parent) not in yaml.safe_dump({k: v for k, v in fit.items() if k != "command"})
    assert fit["command"] == ("python -m simulators calibrate measured --from figures.yaml --prompts 3 --seed 0 "
                              f"--text decisions --out-dir {out}")
    assert fit["commit"] == git_commit() and (git_commit() or "").endswith("-dirty") == fit["commit"].endswith("-dirty")
    # inside the repository: named from its root
    res = run_module("simulators", "calibrate", "measured", "--from", str(YI_FIGURES), "--prompts", "1", "--out-dir",
                     str(tmp_path / "yi"))
    assert res.code == 0, res.err
    fit = yaml.safe_load((tmp_path / "yi" / "yi34b_6b_gsm8k.yaml").read_text())["fit"]
    assert fit["inputs_source"].startswith("conf/calibration/yi34b_6b_a800x2.yaml: ")
    assert fit["command"].startswith("python -m simulators calibrate measured --from "
                                     "conf/calibration/yi34b_6b_a800x2.yaml --prompts 1 --seed 0 --text decisions "
                                     "--out-dir ")


# ----------------------------------------------------------------------------------------------- the spread's range
def test_the_ratio_spread_is_the_yi_fits_own():
    """RATIO_SPREAD: the Yi-34B/6B tasks' own draft / target ratios over their shared one (16 prompts, seed 0)."""
    from simulators.lab.calibration.paper_fit import RATIO_SPREAD, own_ratios

    tasks, _ = load_tasks(YI_FIGURES)
    cal = calibrate(16, 0, "hf", tasks)
    own = own_ratios(cal, tasks)
    assert set(own) == {"HumanEval", "GSM8K", "CNN/DM", "WMT16"} and cal.ratio == pytest.approx(0.799)
    assert min(own.values()) / cal.ratio == pytest.approx(RATIO_SPREAD[0], abs=0.002)
    assert max(own.values()) / cal.ratio == pytest.approx(RATIO_SPREAD[1], abs=0.002)


def test_a_measured_clock_adds_no_overhead_and_its_profile_runs_in_a_sweep(tmp_path):
    """Issue 60 #3, the real pair as a setting: on a hardware profile `calibrate clock` measured (its cost fits hold
    every fixed cost), a speedup alone is calibrated without dividing by an estimated overhead of 0, the profile adds
    no overhead of its own, and a user's sweep runs on it (sim.*_overhead_s would refuse a measured cost)."""
    out = tmp_path / "sim"
    res = run_module("simulators", "calibrate", "measured", "--from", str(QWEN_FIGURES),
                     "--prompts", "2", "--no-spread", "--out-dir", str(out))
    assert res.code == 0, res.err[-2000:]
    paths = sorted(out.glob("*.yaml"))
    assert [p.name for p in paths] == [f"qwen_coder_{t}.yaml" for t in ("gsm8k", "humaneval", "mtbench")]
    prof = yaml.safe_load(paths[1].read_text())
    assert "target_overhead_s" not in prof and "draft_overhead_s" not in prof
    assert prof["fit"]["inputs"]["vanilla_tok_s"]["inferred"].startswith("the hardware profile's measured clock")
    assert "qwen_coder_humaneval_chat" in prof["fit"]["text_knobs"]   # the figures file's own text_profile
    prof.pop("defaults", None)
    pair = make_pair(load_conf("model", "qwen_coder"), load_conf("hardware", "xeon_amx_2c"), prof, seed=0)
    assert pair.target.cost.name.endswith("/fitted")   # the measured clock, not a spec sheet
    # the fit ran on that clock too: its inferred vanilla token/s is what a run of the profile gives (it was the bare
    # roofline's, 57% faster, so an SpS speedup reproduced there missed by 17% in a sweep)
    tok_s, _ = sweep(prof, "vanilla", {}, prof["fit"]["max_new_tokens"], prof["prompt_len"], n=2)
    assert tok_s == pytest.approx(prof["fit"]["inputs"]["vanilla_tok_s"]["value"], rel=0.03)


def test_a_figures_files_text_profile_is_checked(tmp_path):
    doc = yaml.safe_load(QWEN_FIGURES.read_text())
    tasks = load_tasks(QWEN_FIGURES)[0]
    assert [t.text_profile for t in tasks] == ["qwen_coder_humaneval_chat", "qwen_coder_mtbench_chat",
                                               "qwen_coder_gsm8k"]
    for name, needle in (("nope", "nope"), ("yi34b_6b_humaneval", "fitted for pair yi34b_6b, not qwen_coder")):
        doc["tasks"]["humaneval"]["text_profile"] = name
        path = tmp_path / "f.yaml"
        path.write_text(yaml.safe_dump(doc))
        with pytest.raises(OuroborosError, match=needle):
            load_tasks(path)
