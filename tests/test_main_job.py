"""Issue 60 #4 (and the trust parts of #1): the main job ranks on its pair's own calibration. `python -m
ouroboros.sweep model=llama70b_7b` runs GSM8K stand-in prompts (a synthetic dataset stands for the model YAML's
default_task: the task's prompt length and budget) on conf/sim/llama70b_7b_gsm8k.yaml, fitted to the pair's published
vanilla + SpS token/s with its SpS eta inferred; that profile's bands of the strategies that run the draft are widened
by the inferred eta's spread, and its notes, records and tables say so."""

import math
from pathlib import Path

import pytest
import yaml
from cli_helper import run_module
from hydra import compose, initialize_config_dir

from ouroboros.config import apply_explicit, explicit_notices, validate
from ouroboros.errors import OuroborosError
from ouroboros.running.sinks import read_records
from simulators import trust
from simulators.pair import make_pair

ROOT = Path(__file__).resolve().parents[1]
CONF = str(ROOT / "conf")
SIM = ["model=llama70b_7b", "hardware=a800x2", "dataset.num_prompts=1", "max_new_tokens=4", "logger=quiet"]
GSM8K = "profile llama70b_7b_gsm8k (vanilla + SpS, 2x A800, GSM8K; SpS eta inferred)"


def composed(*overrides: str):
    ovr = list(overrides)
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        run = apply_explicit(validate(compose("config", overrides=ovr)), ovr)
    return run, explicit_notices(run, ovr)


def stored(name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / "sim" / f"{name}.yaml").read_text())


def inferred_eta() -> str:
    """The GSM8K profile's inferred SpS eta as the notes print it (3 significant digits)."""
    return f"{stored('llama70b_7b_gsm8k')['fit']['inputs']['sps_block_efficiency']['value']:.3g}"


def test_the_main_job_runs_gsm8k_on_the_pairs_profile_and_says_so():
    """The main job's command as typed (no dataset, no budget): GSM8K's profile, prompt length and 256 new tokens."""
    run, notes = composed("model=llama70b_7b")
    assert run.sim["profile"] == "llama70b_7b_gsm8k" and run.sim["fit"]["task"] == "GSM8K"
    assert run.sim["alpha_easy"] == stored("llama70b_7b_gsm8k")["alpha_easy"]
    assert (run.sim["task"], run.sim["prompt_len"], run.sim["max_new_tokens"]) == ("gsm8k", 650, 256)
    [stand, picked] = [n for n in notes if n.startswith("decisions:")][:2]
    assert "dataset=synthetic stands for gsm8k" in stand and "default_task" in stand
    assert "488 to 812 tokens" in stand and "256 new tokens each" in stand
    assert "dataset.task=cnndm or wmt16 picks another task" in stand and "dataset.task=none none" in stand
    assert "profile llama70b_7b_gsm8k picked for gsm8k" in picked and f"SpS eta {inferred_eta()} inferred" in picked
    dec = trust.record_decisions(run.sim, "speculative", run.dataset, run.hardware, 8, run.max_new_tokens)
    assert dec["kind"] == "profile" and dec["name"] == "llama70b_7b_gsm8k" and dec["label"] == GSM8K
    assert "off_fit" not in dec                       # GSM8K's task, budget and machine: the fitted setting


def test_a_simulated_run_records_its_profile_and_stand_in_prompts(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", *SIM, "strategy=ouroboros", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    recs = read_records(out)
    assert [r["decisions"]["label"] for r in recs] == [GSM8K, GSM8K]
    assert all(488 <= p["prompt_len"] <= 812 for r in recs for p in r["prompts"])
    ours = recs[-1]["decisions"]["band"]
    assert ours["inferred_eta"]["spread"] == stored("llama70b_7b_gsm8k")["fit"]["inferred_eta_spread"]
    assert f"decisions (simulated points): {GSM8K}" in res.out
    assert "note: decisions: dataset=synthetic stands for gsm8k" in res.err


def test_stand_in_prompts_are_the_ones_calibrate_fitted_on():
    """Same prompts as `calibrate measured` cut for the profile's fit (0.75x to 1.25x the task's prompt_len), with
    the task's budget."""
    from dataclasses import replace

    from simulators.lab.calibration.paper_fit import task_pair, task_prompts, text_knobs
    from simulators.lab.figures import load_tasks

    run, _ = composed("model=llama70b_7b")
    prompts = make_pair(run.model, run.hardware, run.sim, seed=run.seed).default_prompts(4, run.seed)
    [task] = [t for t in load_tasks(ROOT / "conf/calibration/llama70b_7b_a800x2.yaml")[0] if t.key == "gsm8k"]
    task = replace(task, text=text_knobs(task, "decisions"))   # calibrate measured's default text
    assert task.prompt_len == run.sim["prompt_len"] == stored("llama70b_7b_gsm8k")["prompt_len"]
    fitted = task_prompts(task_pair(task, 0.9, run.seed), task, 4, run.seed)
    assert [p.ids for p in prompts] == fitted
    assert all(488 <= len(p.ids) <= 812 and p.max_new_tokens == 256 for p in prompts)


@pytest.mark.parametrize("task, length, budget", [("wmt16", 60, 64), ("cnndm", 900, 128)])
def test_dataset_task_picks_another_tasks_profile(task, length, budget):
    run, notes = composed("model=llama70b_7b", f"dataset.task={task}")
    assert run.sim["profile"] == f"llama70b_7b_{task}"
    assert (run.sim["task"], run.sim["prompt_len"], run.sim["max_new_tokens"]) == (task, length, budget)
    assert any(f"stands for {task} here (dataset.task)" in n for n in notes)
    prompts = make_pair(run.model, run.hardware, run.sim).default_prompts(3)
    assert all(round(0.75 * length) <= len(p.ids) <= round(1.25 * length) for p in prompts)


def test_a_typed_budget_wins_and_dataset_task_none_stands_for_nothing():
    run, notes = composed("model=llama70b_7b", "max_new_tokens=32")
    assert run.sim["profile"] == "llama70b_7b_gsm8k" and run.sim["max_new_tokens"] is None   # the run's 32
    assert any("the run's max_new_tokens each (typed)" in n for n in notes)
    run, notes = composed("model=llama70b_7b", "dataset.task=none")
    assert run.sim.get("fit") is None and run.sim["task"] is None and run.sim["prompt_len"] is None
    assert not any("stands for" in n for n in notes) and any("the uncalibrated prior" in n for n in notes)


def test_a_pair_without_default_task_is_unchanged_unless_asked():
    """yi34b_6b names no default_task: its synthetic runs keep the prior and the surrogate's 32-96 token prompts,
    a typed profile included; `+dataset.task=gsm8k` makes them stand for GSM8K on its profile."""
    run, notes = composed("model=yi34b_6b")
    assert run.sim.get("fit") is None and not any("stands for" in n for n in notes)
    run, _ = composed("model=yi34b_6b", "sim=yi34b_6b_gsm8k")
    assert stored("yi34b_6b_gsm8k")["prompt_len"] == 650 and run.sim["prompt_len"] is None   # not lengthened
    assert all(32 <= len(p.ids) <= 96 and p.max_new_tokens is None
               for p in make_pair(run.model, run.hardware, run.sim).default_prompts(4))
    run, notes = composed("model=yi34b_6b", "dataset.task=gsm8k")
    assert run.sim["profile"] == "yi34b_6b_gsm8k" and run.sim["prompt_len"] == 650
    assert any("stands for gsm8k here (dataset.task)" in n for n in notes)


def test_an_unknown_task_is_one_line(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_bytes(b'{"point_id":"old","label":"kept","totals":{}}\n')
    before = out.read_bytes()
    res = run_module("ouroboros.run", *SIM, "dataset.task=gsm8kk", f"out={out}", tmp=tmp_path)
    lines = res.err.strip().splitlines()
    assert res.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), res.err[-2000:]
    assert "dataset.task 'gsm8kk' is no task the simulator knows" in lines[0] and "gsm8k" in lines[0]
    assert "Traceback" not in res.err and out.read_bytes() == before
    with pytest.raises(OuroborosError, match="default_task 'nope'"):
        trust.stand_in_task({}, {"name": "x", "default_task": "nope"}, {"kind": "synthetic"}, set())


# ----------------------------------------------------------------------------------------------- inferred inputs
def test_fitted_to_labels_inferred_inputs_and_lists_every_input():
    gsm8k = stored("llama70b_7b_gsm8k")["fit"]
    text = trust.fitted_to(gsm8k)
    assert text.startswith(f"the pair's GSM8K vanilla token/s, SpS token/s (schedule=hf); SpS eta {inferred_eta()} "
                           "inferred")
    assert f"±{gsm8k['inferred_eta_spread']:.0%}" in text
    cnndm = stored("llama70b_7b_cnndm")["fit"]
    text = trust.fitted_to(cnndm)
    assert text.startswith("the pair's CNN/DM SpS speedup (schedule=hf); vanilla token/s ")
    ins = cnndm["inputs"]
    assert f"vanilla token/s {ins['vanilla_tok_s']['value']:.3g} inferred (hardware roofline)" in text
    assert f"SpS eta {ins['sps_block_efficiency']['value']:.3g} inferred" in text
    assert trust.fit_setting(cnndm) == "SpS speedup, 2x A800, CNN/DM; vanilla token/s and SpS eta inferred"
    mean = {"task": "MT-Bench", "hardware": "a100", "inputs": {"sps_speedup": 1.8, "setting_mean_accepted_tokens": 2.9,
                                                                "sps": "gamma=4"}}
    assert trust.fitted_to(mean) == "the pair's MT-Bench SpS speedup, the setting's mean accepted tokens (gamma=4)"
    given = stored("yi34b_6b_gsm8k")["fit"]                                # eta given: nothing inferred
    assert "inferred" not in trust.fitted_to(given) and trust.fit_setting(given) == "vanilla + SpS, 2x A800, GSM8K"


def test_an_inferred_eta_widens_the_bands_of_strategies_that_run_the_draft():
    """Each draft strategy's band takes, in quadrature, how far that metric moved across the fits the SpS figures
    allow (fit.inferred_spread, measured by calibrate measured); SpS's own speedup hardly moves (it is the fitted
    figure), its eta by the inferred eta's whole spread."""
    prof = {**stored("llama70b_7b_gsm8k"), "tokens": "surrogate"}
    prof.pop("defaults")
    s = prof["fit"]["inferred_eta_spread"]
    spread = prof["fit"]["inferred_spread"]
    assert spread["speculative"]["speedup"] < 0.05 and spread["speculative"]["block_efficiency"] == pytest.approx(s,
                                                                                                                 abs=0.01)
    measured = trust.bands()["profile_measured"]["strategies"]
    ds = {"kind": "synthetic"}
    for name in ("ouroboros", "speculative"):
        band = trust.record_decisions(prof, name, ds)["band"]
        for m in trust.BAND_METRICS:
            b = measured[name].get(m)
            if b is None and (name, m) == ("speculative", "block_efficiency"):
                b = 0.0   # SpS's own eta: fitted when given, so unmeasured; inferred, it is uncertain by s itself
            want = None if b is None else pytest.approx(math.hypot(b, spread[name][m]), abs=1e-4)
            assert band[m] == want, (name, m)
        widened = {m for m in trust.BAND_METRICS if measured[name].get(m) is not None} | (
            {"block_efficiency"} if name == "speculative" else set())
        assert band["inferred_eta"] == {"spread": s, "measured_band": {m: measured[name].get(m) for m in widened},
                                        "by": "measured per strategy"}
    old = {**prof, "fit": {k: v for k, v in prof["fit"].items() if k != "inferred_spread"}}   # an older profile:
    band = trust.record_decisions(old, "ouroboros", ds)["band"]                              # eta's spread bounds it
    assert band["speedup"] == pytest.approx(math.hypot(measured["ouroboros"]["speedup"], s), abs=1e-4)
    for name in ("lookahead", "vanilla"):   # the target's side was fitted to given figures: as measured
        band = trust.record_decisions(prof, name, ds)["band"]
        assert "inferred_eta" not in band and all(band[m] == measured[name].get(m) for m in trust.BAND_METRICS)
    given = {**stored("yi34b_6b_gsm8k"), "tokens": "surrogate"}                 # eta given: as measured
    assert trust.record_decisions(given, "ouroboros", ds)["band"]["speedup"] == measured["ouroboros"]["speedup"]
