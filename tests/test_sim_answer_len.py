"""Where the simulator's own answers end (sim.answer_len): a task's real answers end at their EOS, tens of tokens
for a translation and hundreds for a chat answer, where a budget of 1,024 is only a cap. Each own prompt's budget is
drawn log-uniform from 0.5x to 2x of answer_len (median answer_len), seeded, at most the run's budget; a figures
file's task carries its answer length into the profile `calibrate measured` writes, whose fit runs its prompts at
the same budgets a run's own prompts get; a bad value is one line."""

import statistics
from pathlib import Path

import pytest
import yaml
from cli_helper import run_module

from ouroboros.running.sinks import read_records
from simulators.lab.calibration.paper_fit import task_budgets
from simulators.lab.figures import load_tasks
from simulators.pair import ANSWER_SPREAD, answer_budgets

SIM = ["model=llama70b_7b", "hardware=a800x2", "backend=sim", "logger=quiet", "sweep=single", "strategy=pld",
       "dataset.num_prompts=6", "sim.prompt_len=100"]
FIGURES = """model: llama70b_7b
hardware: a800x2
source: measured by hand
sps: {gamma: 4}
tasks:
  translation: {corpus: prose, prompt_len: 80, max_new_tokens: 256, answer_len: 30, vanilla_tok_s: 8,
                sps_tok_s: 12, sps_block_efficiency: 2.2}
"""


def test_answer_budgets_are_seeded_spread_around_the_length_and_capped():
    draws = answer_budgets(400, 3, 40, None)
    assert draws == answer_budgets(400, 3, 40, None) and draws != answer_budgets(400, 4, 40, None)
    assert all(40 / ANSWER_SPREAD - 1 <= d <= 40 * ANSWER_SPREAD + 1 for d in draws)   # type: ignore[operator]
    assert statistics.median(draws) == pytest.approx(40, rel=0.15)
    assert max(answer_budgets(400, 3, 40, 50)) == 50 and min(answer_budgets(400, 3, 40, 50)) == min(draws)
    assert answer_budgets(3, 0, None, 64) == [64, 64, 64] and answer_budgets(2, 0, None, None) == [None, None]


def test_a_run_s_own_answers_end_near_answer_len_within_its_budget(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.sweep", *SIM, "max_new_tokens=48", "sim.answer_len=30", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    for rec in read_records(out):
        got = [len(p["output"]) for p in rec["prompts"]]
        assert got == [b for b in answer_budgets(6, 0, 30, 48)]          # the run's seed, capped at 48
        assert len(set(got)) > 1 and max(got) <= 48 and rec["max_new_tokens"] == sorted(set(got))
    whole = tmp_path / "w.jsonl"
    assert run_module("ouroboros.sweep", *SIM, "max_new_tokens=48", f"out={whole}", tmp=tmp_path).code == 0
    assert all(len(p["output"]) == 48 for r in read_records(whole) for p in r["prompts"])


def test_a_figures_task_s_answer_len_reaches_the_fit_and_the_profile(tmp_path):
    path, out = tmp_path / "f.yaml", tmp_path / "out"
    path.write_text(FIGURES)
    (task,) = load_tasks(path)[0]
    assert task.answer_len == 30 and task_budgets(task, 4, 0) == answer_budgets(4, 0, 30, 256)
    res = run_module("simulators", "calibrate", "measured", "--from", str(path), "--prompts", "3", "--out-dir",
                     str(out), "--no-spread")
    assert res.code == 0, res.err[-2000:]
    prof = yaml.safe_load((out / "llama70b_7b_translation.yaml").read_text())
    assert prof["answer_len"] == 30 and prof["prompt_len"] == 80


@pytest.mark.parametrize("value, needle", [(0, "answer_len must be"), ("'x'", "answer_len must be")])
def test_a_bad_answer_len_is_one_line(tmp_path, value, needle):
    path, out = tmp_path / "f.yaml", tmp_path / "out"
    path.write_text(FIGURES.replace("answer_len: 30", f"answer_len: {value}"))
    res = run_module("simulators", "calibrate", "measured", "--from", str(path), "--prompts", "3", "--out-dir",
                     str(out), "--no-spread")
    lines = res.err.strip().splitlines()
    assert res.code == 2 and len(lines) == 1 and needle in lines[0], res.err[-2000:]
    assert not out.exists() or not list(out.iterdir())
    bad = run_module("ouroboros.run", *SIM[:3], "sim.answer_len=0", "out=null", tmp=tmp_path)
    assert bad.code == 2 and "sim.answer_len must be >= 1" in bad.err


def test_figures_files_answer_lens_are_measured_medians_or_absent():
    """Every answer_len a shipped figures file holds says where it was measured (its header names the runs)."""
    for f in sorted((Path(__file__).resolve().parents[1] / "conf" / "calibration").glob("*.yaml")):
        doc = yaml.safe_load(f.read_text())
        tasks = (doc or {}).get("tasks") or {}
        if any((t or {}).get("answer_len") for t in tasks.values()):
            assert "answer_len" in f.read_text().split("\nmodel:")[0], f"{f.name}: its header does not say"
