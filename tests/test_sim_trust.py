"""Issue 32: every simulated number says where its decisions come from and how far off it may be; a pair's profile
for the dataset's task is used by default; `calibrate measured` builds a profile from a pair's vanilla + SpS figures
(the Yi profiles are that command on the paper's figures); the bands come from measured held-out errors."""

import json
from pathlib import Path

import pytest
import yaml
from cli_helper import run_module
from hydra import compose, initialize_config_dir

from ouroboros.config import apply_explicit, explicit_notices, validate
from ouroboros.errors import OuroborosError
from ouroboros.running.record import Record
from ouroboros.running.sinks import read_records
from ouroboros.running.table import format_table, speedup_ranks
from simulators import trust
from simulators.lab.calibration.bands import quantile, summarise
from simulators.lab.calibration.measured import calibrate_measured
from simulators.lab.figures import YI_FIGURES, load_tasks, make_task, records_task

ROOT = Path(__file__).resolve().parents[1]
CONF = str(ROOT / "conf")


def composed(*overrides: str):
    ovr = list(overrides)
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        run = apply_explicit(validate(compose("config", overrides=ovr)), ovr)
    return run, explicit_notices(run, ovr)


# ----------------------------------------------------------------------------------------------- tasks
@pytest.mark.parametrize("dataset, task", [
    ({"kind": "humaneval"}, "humaneval"),
    ({"kind": "mtbench", "categories": ["coding"]}, "mtbench"),
    ({"kind": "specbench", "categories": ["math_reasoning"]}, "gsm8k"),
    ({"kind": "specbench", "categories": ["translation"]}, "wmt16"),
    ({"kind": "specbench", "categories": ["writing", "coding", "stem"]}, "mtbench"),   # MT-Bench's categories
    ({"kind": "specbench", "categories": ["translation", "qa"]}, None),                # two tasks: no single one
    ({"kind": "specbench"}, None),                                                     # all six
    ({"kind": "synthetic"}, None),
    ({"kind": "jsonl", "task": "gsm8k"}, "gsm8k"),
])
def test_dataset_task(dataset, task):
    assert trust.dataset_task(dataset) == task


# ----------------------------------------------------------------------------------------------- profiles by default
def test_the_pairs_profile_for_the_task_is_used_by_default_with_a_note():
    """dataset=humaneval renders its template through the chat template: the pair's HumanEval profile fitted on that
    rendering is picked; with bare prompts (dataset.template='{prompt}'), the one fitted on bare prompts."""
    for extra, name in (((), "qwen_coder_humaneval_chat"), (("dataset.template='{prompt}'",), "qwen_coder_humaneval")):
        run, notes = composed("model=qwen_coder", "backend=sim", "dataset=humaneval", "hardware=h100", *extra)
        assert run.sim["profile"] == name
        assert run.sim["alpha_easy"] == yaml.safe_load((ROOT / f"conf/sim/{name}.yaml").read_text())["alpha_easy"]
        [note] = [n for n in notes if n.startswith("decisions: profile")]   # its prompts were rendered so too
        assert f"profile {name} picked for humaneval" in note and "recorded real runs" in note
        assert "sim=default opts out" in note


def test_sim_default_opts_out_and_says_it_runs_on_the_prior():
    run, notes = composed("model=qwen_coder", "backend=sim", "dataset=humaneval", "hardware=h100", "sim=default")
    assert run.sim["profile"] is None and run.sim["fit"] is None
    [note] = [n for n in notes if n.startswith("decisions:")]
    assert "uncalibrated prior" in note and "simulators calibrate measured --model qwen_coder" in note


def test_a_typed_sim_option_wins_over_the_default_profile():
    run, _ = composed("model=qwen_coder", "backend=sim", "dataset=humaneval", "hardware=h100", "sim.alpha_easy=0.5")
    assert run.sim["profile"] == "qwen_coder_humaneval_chat" and run.sim["alpha_easy"] == 0.5


def test_a_pair_without_a_profile_for_the_task_runs_on_the_prior_and_names_the_ones_it_has():
    run, notes = composed("model=qwen_coder", "backend=sim", "dataset=specbench",
                          f"dataset.path={ROOT / 'tests/fixtures/specbench_sample.jsonl'}",
                          "dataset.categories=[summarization]", "hardware=h100")
    assert run.sim["fit"] is None
    [note] = [n for n in notes if n.startswith("decisions:")]
    assert "qwen_coder has no profile for cnndm" in note and "humaneval -> qwen_coder_humaneval" in note


def test_a_default_profile_that_needs_the_fetched_tokenizer_says_how_to_get_it(tmp_path):
    """qwen_coder's profiles count real prompts with the pair's tokenizer: without it, one line naming the fetch."""
    res = run_module("ouroboros.run", "model=qwen_coder", f"model.cache_dir={tmp_path}", "backend=sim",
                     "hardware=h100", "dataset=humaneval", "dataset.ids=[HumanEval/0]", "logger=quiet",
                     f"out={tmp_path / 'r.jsonl'}", tmp=tmp_path)
    assert res.code == 2 and res.err.strip().splitlines() == [res.err.strip()], res.err
    assert "python -m ouroboros.fetch qwen-coder" in res.err and not (tmp_path / "r.jsonl").exists()


def test_real_backends_are_untouched():
    run, notes = composed("model=tiny", "backend=hf")
    assert run.sim.get("fit") is None and not any(n.startswith("decisions:") for n in notes)


# ----------------------------------------------------------------------------------------------- records, table
def test_every_simulated_record_line_and_table_names_its_source_and_band(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", "model=llama70b_7b", "strategy=speculative", "dataset.num_prompts=1",
                     "dataset.task=none", "max_new_tokens=8", "logger=quiet", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    recs = read_records(out)
    bands = yaml.safe_load((ROOT / "conf/calibration/bands.yaml").read_text())
    want = bands["prior"]["strategies"]["speculative"]
    for r in recs:
        assert r["decisions"]["kind"] == "prior" and r["decisions"]["label"] == "prior"
    spec = next(r for r in recs if r["strategy"] == "speculative")
    assert spec["decisions"]["band"]["speedup"] == want["speedup"]
    assert spec["decisions"]["band"]["block_efficiency"] == want["block_efficiency"]
    assert "decisions: the uncalibrated prior" in res.err
    assert "decisions (simulated points): prior" in res.out
    assert f"±{want['speedup']:.0%}" in res.out and "rank" in res.out


def rec(label, speedup, band, baseline="b"):
    return Record.from_json({"label": label, "strategy": label, "speedup": speedup, "baseline_id": baseline,
                             "decisions": {"band": None if band is None else {"speedup": band}}})


def test_overlapping_bands_rank_as_a_tie_and_only_disjoint_ones_as_an_order():
    recs = [rec("a", 2.0, 0.1), rec("b", 1.9, 0.1), rec("c", 1.2, 0.1), rec("d", 3.0, None), Record.from_json({
        "label": "real", "strategy": "x", "speedup": 1.5, "baseline_id": "b"})]
    assert speedup_ranks(recs) == ["=1", "=1", "3", "?", "-"]


def test_real_tables_keep_their_columns():
    r = {"label": "vanilla", "strategy": "vanilla", "params": {}, "totals": {
        "new_tokens": 8, "elapsed_s": 1.0, "tokens_per_s": 8.0, "block_efficiency": 1.0, "accepted_length": 0.0,
        "match_per_forward": 0.0}, "speedup": 1.0, "speedup_specbench": 1.0, "identical_to_baseline": "1/1",
        "backend": "hf", "hardware": {"cpu": "x"}, "max_new_tokens": 8}
    table = format_table([Record.from_json(r)])
    assert "rank" not in table and "±" not in table and "decisions" not in table


# ----------------------------------------------------------------------------------------------- calibrate measured
def test_the_yi_profiles_are_calibrate_measured_on_the_papers_figures(tmp_path):
    """Same numbers as the committed profiles (their fit: blocks name this command)."""
    tasks, source = load_tasks(YI_FIGURES)
    calibrate_measured(tasks, 16, 0, source, "test", tmp_path, text="decisions", out=lambda s: None)
    for t in tasks:
        name = f"yi34b_6b_{t.key}"
        new = yaml.safe_load((tmp_path / f"{name}.yaml").read_text())
        old = yaml.safe_load((ROOT / "conf/sim" / f"{name}.yaml").read_text())
        assert {k: v for k, v in new.items() if k != "fit"} == {k: v for k, v in old.items() if k != "fit"}
        assert new["fit"]["inputs"] == old["fit"]["inputs"]
        assert old["fit"]["command"].startswith("python -m simulators calibrate measured --from "
                                                "conf/calibration/yi34b_6b_a800x2.yaml")   # a command that runs


def test_calibrate_measured_from_flags_writes_a_profile_that_reproduces_its_vanilla_speed(tmp_path):
    from simulators.lab.calibration.paper_fit import run

    res = run_module("simulators", "calibrate", "measured", "--model", "llama70b_7b", "--task", "gsm8k", "--hardware",
                     "a800x2", "--vanilla-tok-s", "8", "--sps-tok-s", "14", "--sps-accepted-length", "2.5",
                     "--sps-gamma", "4", "--max-new-tokens", "64", "--prompt-len", "300", "--prompts", "3",
                     "--out-dir", str(tmp_path))
    assert res.code == 0, res.err
    prof = yaml.safe_load((tmp_path / "llama70b_7b_gsm8k.yaml").read_text())
    assert prof["pair"] == "llama70b_7b" and prof["profile"] == "llama70b_7b_gsm8k" and prof["corpus"] == "prose"
    fit = prof["fit"]
    assert fit["method_kind"] == "measured" and fit["hardware"] == "a800x2"
    assert fit["inputs"] == {"vanilla_tok_s": 8.0, "sps_tok_s": 14.0, "sps_block_efficiency": 3.5, "sps": "gamma=4"}
    assert "--sps-gamma 4" in fit["command"]
    t = make_task("gsm8k", {"vanilla_tok_s": 8, "sps_block_efficiency": 3.5, "max_new_tokens": 64,
                            "prompt_len": 300}, "llama70b_7b", "a800x2", "4", "test")
    v = run(t, "vanilla", {}, prof["alpha_easy"], 3, 0)
    assert v.tps(prof["target_overhead_s"], 0.0) == pytest.approx(8.0, rel=1e-4)
    assert trust.decision_source({**prof, "tokens": "surrogate"})["fitted_to"] == (
        "the pair's gsm8k vanilla token/s, SpS token/s, SpS eta (gamma=4)")


def test_calibrate_measured_reads_a_real_runs_records(tmp_path):
    def record(pid, strategy, tps, eta, baseline, params):
        return {"point_id": pid, "strategy": strategy, "backend": "hf", "baseline_id": baseline, "time": 1.0,
                "params": params, "max_new_tokens": 64, "config": {"sampling": {"temperature": 0.0}},
                "totals": {"tokens_per_s": tps, "block_efficiency": eta},
                "prompts": [{"prompt_len": 100}, {"prompt_len": 140}]}
    path = tmp_path / "records.jsonl"
    recs = (record("v", "vanilla", 2.0, 1.0, "v", {}),
            record("s", "speculative", 2.6, 3.2, "v", {"gamma": 4, "schedule": "constant"}))
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    t = records_task(str(path), "qwen_coder", "humaneval", "h100", None)
    assert (t.vanilla_tps, t.sps_tps, t.sps_eta, t.sps, t.prompt_len, t.max_new, t.corpus) == (
        2.0, 2.6, 3.2, "4", 120, 64, "code")


@pytest.mark.parametrize("d, msg", [
    ({"sps_block_efficiency": 6.0}, r"more than gamma \+ 1 = 5"),
    ({"sps_block_efficiency": 3.0, "sps_accepted_length": 2.0}, "one of them"),
    ({"sps_block_efficiency": 0.5}, "is >= 1"),
    ({"sps_block_efficiency": 3.0, "vanilla_tok_s": -1}, "vanilla_tok_s must be a positive number"),
    ({"sps_block_efficiency": 3.0, "corpus": "poetry"}, "corpus must be one of"),
    ({"sps_block_efficiency": 3.0, "held_out_typo": 1}, "unknown key 'held_out_typo'"),
])
def test_bad_figures_are_one_line(d, msg):
    base = {"vanilla_tok_s": 10, "max_new_tokens": 64, "prompt_len": 100}
    with pytest.raises(OuroborosError, match=msg):
        make_task("gsm8k", {**base, **d}, "llama70b_7b", "h100", "4", "x")


@pytest.mark.parametrize("args, msg", [
    (["--model", "llama70b_7b", "--task", "gsm8k", "--hardware", "h100", "--vanilla-tok-s", "20", "--sps-eta", "3",
      "--max-new-tokens", "64", "--prompt-len", "100"], "its gamma (draft tokens per step) or schedule hf"),
    (["--model", "nope", "--task", "gsm8k", "--hardware", "h100", "--vanilla-tok-s", "20"], "unknown model 'nope'"),
    (["--from", "conf/calibration/yi34b_6b_a800x2.yaml", "--vanilla-tok-s", "20"], "give the figures one way"),
    ([], "give the figures one way"),
    (["--from", "nope.yaml"], "does not exist"),
])
def test_calibrate_measured_refuses_bad_inputs_in_one_line(tmp_path, args, msg):
    res = run_module("simulators", "calibrate", "measured", *args, "--out-dir", str(tmp_path))
    assert res.code == 2 and res.err.count("\n") == 1 and msg in res.err, res.err
    assert not list(tmp_path.iterdir())


# ----------------------------------------------------------------------------------------------- bands
def test_quantile_and_the_band_summary():
    assert quantile([0.1, 0.2, 0.3, 0.4, 0.5], 0.8) == pytest.approx(0.42)
    cells = [{"strategy": "ouroboros", "metric": "speedup", "error": e} for e in (-0.3, 0.1, 0.2, -0.05, 0.4)]
    s = summarise(cells)["ouroboros"]
    assert s["speedup"] == pytest.approx(0.32) and s["cells"]["speedup"] == 5 and s["coverage"]["speedup"] == 0.8
    assert summarise(cells)["vanilla"] == {"block_efficiency": 0.0, "speedup": 0.0}
    # fewer than 3 cells: no band (one or two errors are not a spread; a lone cell is inside its own "band")
    two = [{"strategy": "pld", "metric": "speedup", "error": e, "setting": "s", "task": "t"} for e in (0.036, -0.048)]
    assert "pld" not in summarise(two)
    three = summarise([*two, {**two[0], "error": 0.01}])["pld"]
    assert three["speedup"] == pytest.approx(0.0432) and three["cells"]["speedup"] == 3   # q80 of .01, .036, .048


def test_the_committed_bands_are_measured_on_held_out_figures_only():
    doc = yaml.safe_load((ROOT / "conf/calibration/bands.yaml").read_text())
    cells = doc["profile_measured"]["cells"]
    # a setting's own fit inputs (its SpS figures) are scored only as such: marked fitted, how far the sweep
    # reproduces them; vanilla's token/s (fitted, or inferred from the roofline) is no cell at all
    assert all(c.get("fitted") is True for c in cells if c["strategy"] == "speculative")
    assert not [c for c in cells if c["strategy"] != "speculative" and c.get("fitted")]
    assert not [c for c in cells if c["strategy"] == "vanilla"]
    # every cell comes from a figures file with held-out figures, several pairs x machines
    settings = {c["setting"] for c in cells}
    assert len(settings) >= 5 and all((ROOT / "conf/calibration" / f"{s}.yaml").is_file() for s in settings)
    for src in ("profile_measured", "prior"):
        for m, e in doc[src]["strategies"].items():
            for metric, n in (e.get("cells") or {}).items():
                errs = [abs(c["error"]) for c in doc[src]["cells"] if c["strategy"] == m and c["metric"] == metric]
                assert len(errs) == n and e[metric] == pytest.approx(quantile(errs, 0.8), abs=1e-4)


def test_wandb_metrics_carry_the_band():
    from ouroboros.running.sinks import point_metrics

    rec = {"totals": {k: 1.0 for k in ("tokens_per_s", "mean_tokens_per_s", "new_tokens", "elapsed_s",
                                       "block_efficiency", "accepted_length", "match_per_forward", "target_forwards",
                                       "draft_forwards", "draft_tokens", "draft_s", "verify_s", "other_s",
                                       "prefill_s")},
           "speedup": 2.0, "decisions": {"band": {"speedup": 0.24, "block_efficiency": None, "cells": {"speedup": 5}}}}
    m = point_metrics(Record.from_json(rec))
    assert m["band/speedup"] == 0.24 and "band/block_efficiency" not in m and "band/cells" not in m


def test_a_profile_fitted_on_other_prompt_formats_keeps_no_band_and_says_why():
    """The qwen_coder profiles were fitted on recordings of bare prompts (template '{prompt}'); dataset=humaneval's
    own template makes the instruct target rewrite the whole function (real pld eta 6.74 against 1.22 bare: 4
    prompts each, docs/results.md), so on it the profile's measured bands do not hold."""
    from simulators.sim_profiles import load_profile

    prof = load_profile("qwen_coder_humaneval")
    assert prof["fit"]["inputs"]["prompt_format"] == {"chat": "auto", "template": "{prompt}"}
    templated = {"kind": "humaneval", "chat": "auto", "template": "Complete:\n{prompt}"}
    bare = {"kind": "humaneval", "chat": "auto", "template": "{prompt}"}
    other = trust.record_decisions(prof, "pld", templated)
    same = trust.record_decisions(prof, "pld", bare)
    assert other["band"] is None and "other prompt format" in other["label"]
    assert same["band"] is not None and "other prompt format" not in same["label"]
    assert trust.record_decisions(prof, "vanilla", templated)["band"] is not None   # 1 by definition
    notes = trust.source_notes(prof, {"name": "qwen_coder"}, templated, set())
    assert len(notes) == 2 and "no measured band holds here" in notes[1] and "'Complete:\\n{prompt}' here" in notes[1]
    assert len(trust.source_notes(prof, {"name": "qwen_coder"}, bare, set())) == 1


def test_keep_recorded_carries_the_traced_cells_and_drops_the_sweep_ones(tmp_path):
    from simulators.lab.calibration.bands import kept_cells

    doc = {"profile_recorded": {"command": "python -m simulators calibrate bands --recorded x", "commit": "abc",
                                "cells": [{"strategy": "pld", "error": 0.1},
                                          {"strategy": "pld", "error": 0.2, "from": "sweep records"}]}}
    path = tmp_path / "bands.yaml"
    path.write_text(yaml.safe_dump(doc))
    [kept] = kept_cells(path)
    assert kept["error"] == 0.1 and kept["kept_from"] == "python -m simulators calibrate bands --recorded x at abc"
    path.write_text(yaml.safe_dump({"profile_recorded": {"cells": [kept]}}))
    assert kept_cells(path)[0]["kept_from"] == kept["kept_from"]     # kept twice: still the first measurement
    with pytest.raises(OuroborosError, match="no bands file"):
        kept_cells(tmp_path / "none.yaml")


def test_keep_records_carries_the_sweep_cells_and_a_new_cell_of_any_of_their_prompts_replaces_them(tmp_path):
    from simulators.lab.calibration.bands import kept_cells, replaced

    swept = [{"strategy": s, "error": e, "from": "sweep records", "prompts": ps}
             for s, e, ps in (("pld", 0.2, ["1", "3"]), ("suffix", 0.3, ["1", "3"]), ("pld", -0.1, ["5", "7"]))]
    path = tmp_path / "bands.yaml"
    path.write_text(yaml.safe_dump({"profile_recorded": {"command": "c", "commit": "abc",
                                                         "cells": [{"strategy": "pld", "error": 0.1}, *swept]}}))
    kept = kept_cells(path, traces=False, records=True)
    assert [c["error"] for c in kept] == [0.2, 0.3, -0.1] and {c["kept_from"] for c in kept} == {"c at abc"}
    assert len(kept_cells(path, traces=True, records=True)) == 4
    new = [{"strategy": "pld", "error": 0.05, "prompts": ["1", "3"]}]
    assert [c["error"] for c in replaced(kept, new)] == [0.3, -0.1]     # pld on 1, 3 measured again
    # the same prompts measured again in other groups (one sweep per group): every kept cell they overlap goes
    regrouped = [{"strategy": "pld", "error": 0.0, "prompts": ["1"]}, {"strategy": "pld", "error": 0.0,
                                                                       "prompts": ["3", "9"]}]
    assert [c["error"] for c in replaced(kept, regrouped)] == [0.3, -0.1]
    assert [c["error"] for c in replaced(kept, [{"strategy": "pld", "prompts": ["9"]}])] == [0.2, 0.3, -0.1]
    with pytest.raises(OuroborosError, match="--keep-records: no bands file"):
        kept_cells(tmp_path / "none.yaml", traces=False, records=True)


def test_speedup_cells_score_a_held_out_sweep_against_its_simulated_sweeps(tmp_path):
    """`calibrate bands --speedups TASK=REAL:SIM,...`: one profile_recorded speedup cell per strategy (seeds pooled:
    tokens over seconds summed); refused in one line each: simulated points in REAL, a SIM not decided by a recorded
    profile, other prompts, a prompt the profile was fitted to."""
    from simulators.lab.calibration.bands import replaced, speedup_cells

    def write(name, backend, times, ids=("96", "98"), decisions=None):
        lines = []
        for label, sec in times.items():
            r = {"point_id": label + name, "label": label, "strategy": label, "backend": backend,
                 "max_new_tokens": 64, "config": {"dataset": {"ids": list(ids)}}, "hardware": {"name": "cpu_x"},
                 "totals": {"new_tokens": 100, "elapsed_s": sec}}
            if backend == "sim":
                r["decisions"] = decisions or {"kind": "profile", "method": "recorded", "label": "profile p",
                                               "name": "qwen_coder_mtbench_open"}
            lines.append(json.dumps(r) + "\n")
        (tmp_path / name).write_text("".join(lines))
        return str(tmp_path / name)

    real = write("real.jsonl", "hf", {"vanilla": 20.0, "pld": 10.0})                    # 2.00x
    s0 = write("s0.jsonl", "sim", {"vanilla": 18.0, "pld": 8.0})
    s1 = write("s1.jsonl", "sim", {"vanilla": 22.0, "pld": 12.0})                        # pooled 40 / 20: 2.00x
    s2 = write("s2.jsonl", "sim", {"vanilla": 20.0, "pld": 8.0})
    said: list[str] = []
    cells = speedup_cells([f"mtbench={real}:{s0},{s1}", f"mtbench={real}:{s2}"], said.append)
    assert [(c["strategy"], c["metric"], c["error"]) for c in cells] == [("pld", "speedup", 0.0),
                                                                       ("pld", "speedup", 0.25)]
    assert cells[0]["task"] == "mtbench (96..98)" and cells[0]["hardware"] == ["cpu_x"]
    assert "pld speedup real 2.00x, modelled 2.50x (+25.0%)" in said[1]
    eta = {"strategy": "pld", "metric": "block_efficiency", "prompts": ["96"], "error": 0.1}
    assert replaced([eta], cells) == [eta]             # a speedup cell replaces speedup cells only
    assert "held_out_unchecked" not in cells[0]           # qwen_coder_mtbench_open lists its fit prompts
    bare = write("bare.jsonl", "sim", {"vanilla": 20.0, "pld": 8.0}, decisions={
        "kind": "profile", "method": "recorded", "label": "profile q", "name": "qwen_coder_gsm8k"})
    cells = speedup_cells([f"gsm8k={real}:{bare}"], said.append)
    assert cells[0]["held_out_unchecked"] == ["qwen_coder_gsm8k"] and "is not checked here" in said[-2]
    prior = write("prior.jsonl", "sim", {"vanilla": 20.0, "pld": 8.0}, decisions={"kind": "prior"})
    other = write("other.jsonl", "sim", {"vanilla": 20.0, "pld": 8.0}, ids=("96", "99"))
    fitted = write("fitted.jsonl", "sim", {"vanilla": 20.0, "pld": 8.0}, ids=("81", "96"))
    real_fitted = write("real_fitted.jsonl", "hf", {"vanilla": 20.0, "pld": 8.0}, ids=("81", "96"))
    for spec, why in ((f"m={s0}:{s1}", "holds simulated points"),
                      (f"m={real}:{prior}", "not a simulated run decided"),
                      (f"m={real}:{other}", "ran other prompts"),
                      (f"m={real_fitted}:{fitted}", "fitted to prompt(s) 81"),
                      (f"m={real}", "takes TASK=REAL:SIM"), (f"m={real}:{tmp_path / 'no.jsonl'}", "no such file")):
        with pytest.raises(OuroborosError, match=why.replace("(", r"\(").replace(")", r"\)")):
            speedup_cells([spec], said.append)


def test_a_recorded_profiles_speedup_band_is_shown_only_on_a_clock_fitted_to_the_loops_forwards():
    """The recorded profiles' speedup cells were measured on a clock fitted by `calibrate clock --records` on the
    machine that ran the held-out sweeps: on any other clock (a spec sheet, an isolated calibration) the speedup band
    is `?`, the eta band stays."""
    run, _ = composed("model=qwen_coder", "backend=sim", "dataset=humaneval", "hardware=h100", "strategy=pld")
    stored = trust.bands()["profile_recorded"]["strategies"]["pld"]
    other = trust.record_decisions(run.sim, "pld", run.dataset, run.hardware)
    fitted = trust.record_decisions(run.sim, "pld", run.dataset, {
        **run.hardware, "source": "timed; Qwen2.5-Coder-1.5B-Instruct refitted by calibrate clock --records to the "
                                  "loop's forwards (4064 steps, 118 points; its LM-head row kept)"})
    assert other["kind"] == fitted["kind"] == "profile" and other["method"] == "recorded"
    assert other["band"]["speedup"] is None and other["band"]["block_efficiency"] == stored["block_efficiency"]
    assert fitted["band"]["speedup"] == stored["speedup"] > 0
    said = trust.source_notes(run.sim, run.model, run.dataset, set(), run.hardware)
    assert any("speedup band was measured on a clock fitted" in n and "hardware=h100 is not" in n for n in said)
    assert not any("speedup band" in n for n in trust.source_notes(run.sim, run.model, run.dataset, set(), {
        **run.hardware, "source": "x refitted by calibrate clock --records to the loop's forwards"}))
