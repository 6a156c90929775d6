"""Issue 33: numbers that cannot mislead. A sampled run does not look like a losslessness failure; a budget the
context cannot hold is a note and the table shows the budget in effect; a typed grid is a sweep of its own (never
`compare`); analysis prints where it wrote, not the table."""

from cli_helper import run_module

from ouroboros.sinks import read_records


def test_a_sampled_run_says_its_outputs_are_not_compared(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", "strategy=speculative", "sampling.temperature=0.7", "sampling.top_p=0.8",
                     "dataset.num_prompts=2", "max_new_tokens=6", "logger=quiet", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    recs = read_records(out)
    assert all(r["identical_to_baseline"] is None and r["divergences"] == [] for r in recs)
    assert all(r["sampled"].startswith("sampled (T=0.7, top_p=0.8): exactness is distribution-tested") for r in recs)
    assert "differs:" not in res.out and "identical" not in res.out
    assert "sampled (T=0.7, top_p=0.8): exactness is distribution-tested" in res.out


def test_greedy_runs_still_compare_outputs(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", "strategy=pld", "dataset.num_prompts=2", "max_new_tokens=6", "logger=quiet",
                     f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    assert all(r["identical_to_baseline"] == "2/2" and "sampled" not in r for r in read_records(out))


def test_a_budget_past_the_context_is_a_note_and_the_table_shows_the_budget_in_effect(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", "model=llama70b_7b", "hardware=a800x2", "strategy=vanilla", "baseline=null",
                     "dataset.num_prompts=1", "max_new_tokens=1000000000", "logger=quiet", f"out={out}",
                     tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    [rec] = read_records(out)
    room = 4096 - rec["prompts"][0]["prompt_len"]
    assert rec["max_new_tokens"] == room and rec["prompts"][0]["new_tokens"] == room
    assert "note: max_new_tokens=1000000000 does not fit the model context of 4096 tokens" in res.err
    assert f"new tokens per prompt: {room};" in res.out and "1000000000" not in res.out


def test_a_typed_grid_is_a_sweep_of_its_own(tmp_path):
    out = tmp_path / "r.jsonl"
    grid = 'sweep.grid=["strategy=speculative","strategy.params.gamma=2,3"]'
    res = run_module("ouroboros.sweep", "model=llama70b_7b", "hardware=a800x2", "dataset.num_prompts=1",
                     "max_new_tokens=4", "logger=quiet", grid, f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    names = {r["sweep"] for r in read_records(out)}
    assert len(names) == 1 and names.pop().startswith("custom-")
    again = run_module("ouroboros.sweep", "model=llama70b_7b", "hardware=a800x2", "dataset.num_prompts=1",
                       "max_new_tokens=4", "logger=quiet", grid, "sweep.name=mine", f"out={tmp_path / 's.jsonl'}",
                       tmp=tmp_path)
    assert again.code == 0 and {r["sweep"] for r in read_records(tmp_path / "s.jsonl")} == {"mine"}


def test_analysis_prints_where_it_wrote_not_the_table(tmp_path):
    out = tmp_path / "r.jsonl"
    assert run_module("ouroboros.run", "model=llama70b_7b", "hardware=a800x2", "dataset.num_prompts=1",
                      "max_new_tokens=4", "logger=quiet", f"out={out}", tmp=tmp_path).code == 0
    res = run_module("analysis", str(out), "--out", str(tmp_path / "a"), "--format", "png")
    assert res.code == 0, res.err
    assert res.out.count("\n") == 1 and f"written to {tmp_path / 'a'}" in res.out and "|" not in res.out
    assert (tmp_path / "a" / "table.md").read_text().count("\n") == 4   # header, rule, two points
