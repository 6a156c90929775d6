"""Issue 33: numbers that cannot mislead. A sampled run does not look like a losslessness failure; a budget the
context cannot hold is a note and the table shows the budget in effect; a typed grid is a sweep of its own (never
`compare`); analysis prints where it wrote, not the table."""

import time

import pytest
from cli_helper import run_module

from ouroboros.running.sinks import read_records


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


class SlowerClock:
    """A wall clock whose speed the test sets per 'process': a speedup built from two processes' times shows."""

    factor = 1.0

    def now(self) -> float:
        return time.perf_counter() * SlowerClock.factor


def test_a_wall_clock_speedup_never_pairs_two_processes_times(tmp_path, monkeypatch):
    from ouroboros.backends.base import WallClock

    monkeypatch.setattr(WallClock, "now", lambda self: SlowerClock().now())
    out = tmp_path / "r.jsonl"
    tiny = ["model=tiny", "backend=hf", "dataset.num_prompts=2", "max_new_tokens=4", "logger=quiet", f"out={out}"]
    SlowerClock.factor = 1.0
    assert run_module("ouroboros.run", *tiny, "strategy=pld", tmp=tmp_path).code == 0        # process A
    SlowerClock.factor = 10.0                                                                  # process B: 10x
    res = run_module("ouroboros.sweep", *tiny, 'sweep.grid=["strategy=speculative","strategy.params.gamma=2,3"]',
                     tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    recs = read_records(out)
    vanillas = [r for r in recs if r["strategy"] == "vanilla"]
    assert len(vanillas) == 2 and vanillas[0]["point_id"] == vanillas[1]["point_id"]   # measured again in B
    b_vanilla = vanillas[1]
    for r in recs:
        assert r["paired_processes"] is True and len(set(r["processes"].values())) == 1
    for r in (r for r in recs if r["strategy"] == "speculative"):
        assert set(r["processes"].values()) == set(b_vanilla["processes"].values())
        base = sum(p["elapsed_s"] for p in b_vanilla["prompts"])
        assert r["speedup"] == pytest.approx(base / sum(p["elapsed_s"] for p in r["prompts"]))
    # the pld point of process A (its own vanilla alongside) is reused as measured: one process's times
    again = run_module("ouroboros.sweep", *tiny, "sweep=single", "strategy=pld", tmp=tmp_path)
    assert again.code == 0 and "0 point(s) measured, 2 resumed from records" in again.out


def test_a_stopped_wall_clock_point_keeps_only_prompts_paired_with_its_baselines(tmp_path):
    """A prompt of a point kept from an earlier process only where its baseline's same prompt came from that
    process too; the rest are decoded again, the baseline's with them."""
    from ouroboros.running.sinks import RecordFile, prompt_line

    out = tmp_path / "r.jsonl"
    tiny = ["model=tiny", "backend=hf", "dataset.num_prompts=3", "max_new_tokens=4", "logger=quiet", f"out={out}",
            "sweep=single", "strategy=pld"]
    assert run_module("ouroboros.sweep", *tiny, tmp=tmp_path).code == 0
    recs = read_records(out)
    base, pld = (next(r for r in recs if r["strategy"] == s) for s in ("vanilla", "pld"))
    # a stop as an earlier process 'old' left it: vanilla's prompts 0-1 and pld's 0 by 'old', pld's 1 by 'other'
    rf = RecordFile(tmp_path / "s.jsonl")
    for pid, prompts, proc in ((base["point_id"], base["prompts"][:2], "old"), (pld["point_id"], pld["prompts"][:1],
                                                                              "old"),
                               (pld["point_id"], pld["prompts"][1:2], "other")):
        for p in prompts:
            keys = ("prompt_id", "prompt_len", "output", "elapsed_s", "prefill_s", "stop_reason", "proposer_stats")
            rf.append(prompt_line(pid, {**{k: p[k] for k in keys}, "steps": []}, proc, base["versions"]["code"]))
    res = run_module("ouroboros.sweep", *tiny[:-3], f"out={tmp_path / 's.jsonl'}", "sweep=single", "strategy=pld",
                     tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    new = {r["strategy"]: r for r in read_records(tmp_path / "s.jsonl")}
    ids = [p["prompt_id"] for p in base["prompts"]]
    for r in new.values():
        assert r["processes"][ids[0]] == "old" and r["processes"][ids[1]] != "old" and r["paired_processes"]
