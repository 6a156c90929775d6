"""Nothing lost, nothing silently changed when a run is stopped and run again (issue 59):
- a point of a strategy that keeps state across prompts (suffix's global tree, recycling's matrix, Ouroboros' pool)
  stopped inside is measured whole again: the rerun's record equals an uninterrupted run's; a stateless one (pld)
  still resumes at prompt granularity;
- a wall-clock record whose prompts two processes timed says so (record fields, a table line, the resumed count);
- `python -m ouroboros.run` stopped says what a rerun does (it measures again; the sweep resumes);
- the table never cuts a point's name; warnings print as one `warning:` line;
- a record names the baseline record its speedup used, and the table shows that one's times.
In process, on the simulator (llama70b_7b) or the tiny real model."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import runpy
import sys
import warnings
from pathlib import Path

import pytest
from cli_helper import HYDRA_MODULES, Result, run_module

from ouroboros.cli import entry
from ouroboros.run import RERUN
from ouroboros.running.record import Record
from ouroboros.running.sinks import RecordFile, prompt_line, read_records
from ouroboros.running.store import FileStore
from ouroboros.running.table import format_table
from ouroboros.strategies import carries_state

SIM = ["model=llama70b_7b", "hardware=a800x2", "logger=quiet", "sweep=single"]
# sums of modelled times whose clock started elsewhere (the rerun decodes no vanilla first): equal to the last bits
TIMES = {"elapsed_s", "tokens_per_s", "mean_tokens_per_s", "verify_s", "prefill_s", "draft_s", "propose_s"}


def prompt_lines(out: Path, pid: str) -> int:
    return sum(json.loads(x).get("of_point") == pid for x in out.read_text().splitlines())


def stop_after_first_prompt(monkeypatch) -> list[str]:
    """Stop the run (as Ctrl-C would) right after the first prompt of the second point (the strategy's; the first
    is its vanilla baseline) was kept in the records."""
    real, kept = FileStore.keep_prompt, []

    def keep(self, point_id, prompt, process):
        real(self, point_id, prompt, process)
        kept.append(point_id)
        if len(set(kept)) == 2:
            raise KeyboardInterrupt
    monkeypatch.setattr(FileStore, "keep_prompt", keep)
    return kept


def assert_same_measurement(got: dict, want: dict) -> None:
    assert [p["output"] for p in got["prompts"]] == [p["output"] for p in want["prompts"]]
    assert got["totals"].keys() == want["totals"].keys()
    for k, v in want["totals"].items():
        assert got["totals"][k] == (pytest.approx(v, rel=1e-12) if k in TIMES else v), k
    assert got["speedup"] == pytest.approx(want["speedup"], rel=1e-12)
    assert got["identical_to_baseline"] == want["identical_to_baseline"]


def test_which_strategies_carry_state_across_prompts():
    assert carries_state("ouroboros", {}) and not carries_state("ouroboros", {"history": False})
    assert carries_state("recycling", {}) and not carries_state("recycling", {"keep_history": False})
    assert carries_state("suffix", {}) and not carries_state("suffix", {"suffix_decoding_max_cached_requests": 0})
    assert carries_state("speculative", {"schedule": "hf"}) and not carries_state("speculative", {})
    for name in ("vanilla", "pld", "lookahead", "cascade", "rest", "hf_pld", "hf_assisted"):
        assert not carries_state(name, {}), name


@pytest.mark.parametrize("strategy", ["suffix", "recycling", "ouroboros"])
def test_a_stateful_point_stopped_inside_is_measured_whole_again(tmp_path, monkeypatch, strategy):
    """Stopped after its first prompt, then rerun: the record equals an uninterrupted run's (resumed at prompt
    granularity it started prompts 2-4 with an empty tree / matrix / pool: another eta and speedup)."""
    args = [*SIM, f"strategy={strategy}", "dataset.num_prompts=4", "max_new_tokens=32"]
    out = tmp_path / "r.jsonl"
    stop_after_first_prompt(monkeypatch)
    res = run_module("ouroboros.sweep", *args, f"out={out}", tmp=tmp_path)
    assert res.code == 130 and [r["strategy"] for r in read_records(out)] == ["vanilla"], res.err
    monkeypatch.undo()
    res = run_module("ouroboros.sweep", *args, f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err
    resumed = read_records(out)[-1]
    assert resumed["strategy"] == strategy and len(resumed["prompts"]) == 4
    clean = tmp_path / "clean.jsonl"
    assert run_module("ouroboros.sweep", *args, f"out={clean}", tmp=tmp_path).code == 0
    assert_same_measurement(resumed, read_records(clean)[-1])
    assert prompt_lines(out, resumed["point_id"]) == 1 + 4          # its one kept prompt decoded again, with the rest
    assert f"{strategy} keeps state across prompts, so the 1 prompt(s) a stopped run finished" in res.err
    assert "1 point(s) measured, 1 resumed from records" in res.out


def test_stateful_points_stopped_inside_an_interleaved_round_are_measured_whole_again(tmp_path, monkeypatch):
    """The interleaved path (interleave=true: two suffix points decode prompt by prompt in turn): stopped after the
    first suffix prompt kept, the rerun decodes every prompt of both again and records what an uninterrupted run
    does."""
    args = [*SIM, "interleave=true", "dataset.num_prompts=4", "max_new_tokens=32",
            'sweep.grid=["strategy=suffix","strategy.params.suffix_decoding_max_spec_factor=1.0,2.0"]']
    out = tmp_path / "r.jsonl"
    stop_after_first_prompt(monkeypatch)
    assert run_module("ouroboros.sweep", *args, f"out={out}", tmp=tmp_path).code == 130
    monkeypatch.undo()
    res = run_module("ouroboros.sweep", *args, f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err
    clean = tmp_path / "clean.jsonl"
    assert run_module("ouroboros.sweep", *args, f"out={clean}", tmp=tmp_path).code == 0
    got, want = read_records(out)[-2:], read_records(clean)[-2:]
    assert [r["strategy"] for r in got] == ["suffix", "suffix"] and [r["label"] for r in got] == [r["label"]
                                                                                                  for r in want]
    for g, w in zip(got, want, strict=True):
        assert_same_measurement(g, w)
        assert prompt_lines(out, g["point_id"]) in (4, 1 + 4)       # the stop kept one prompt of the first


def test_a_stateless_point_still_resumes_at_prompt_granularity(tmp_path, monkeypatch):
    args = [*SIM, "strategy=pld", "dataset.num_prompts=4", "max_new_tokens=32"]
    out = tmp_path / "r.jsonl"
    stop_after_first_prompt(monkeypatch)
    assert run_module("ouroboros.sweep", *args, f"out={out}", tmp=tmp_path).code == 130
    monkeypatch.undo()
    res = run_module("ouroboros.sweep", *args, f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err
    resumed = read_records(out)[-1]
    assert prompt_lines(out, resumed["point_id"]) == 1 + 3          # only the 3 it had not finished
    assert "keeps state" not in res.err
    clean = tmp_path / "clean.jsonl"
    assert run_module("ouroboros.sweep", *args, f"out={clean}", tmp=tmp_path).code == 0
    assert_same_measurement(resumed, read_records(clean)[-1])


def test_a_wall_clock_point_timed_by_two_processes_says_so(tmp_path):
    """Real (tiny) models: a stop left vanilla's and pld's prompts 0-1 timed by an earlier process 'old' (paired,
    so kept); the rerun times prompt 2 of both. Each record names the two processes; pld's gives each process's own
    speedup; the table names them and the resumed count counts both points."""
    tiny = ["model=tiny", "backend=hf", "dataset.num_prompts=3", "max_new_tokens=4", "logger=quiet", "sweep=single",
            "strategy=pld"]
    first = tmp_path / "r.jsonl"
    assert run_module("ouroboros.sweep", *tiny, f"out={first}", tmp=tmp_path).code == 0
    base, pld = (next(r for r in read_records(first) if r["strategy"] == s) for s in ("vanilla", "pld"))
    out = tmp_path / "s.jsonl"
    rf = RecordFile(out)
    keys = ("prompt_id", "prompt_len", "output", "elapsed_s", "prefill_s", "stop_reason", "proposer_stats")
    for rec in (base, pld):
        for p in rec["prompts"][:2]:
            rf.append(prompt_line(rec["point_id"], {**{k: p[k] for k in keys}, "steps": []}, "old",
                                  rec["versions"]["code"]))
    res = run_module("ouroboros.sweep", *tiny, f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    new = {r["strategy"]: r for r in read_records(out)}
    ids = [p["prompt_id"] for p in base["prompts"]]
    this = new["pld"]["processes"][ids[2]]
    for r in new.values():
        assert r["processes"] == {ids[0]: "old", ids[1]: "old", ids[2]: this} and r["timed_in_processes"] == 2
    assert "process_speedups" not in new["vanilla"]              # its own baseline: nothing to divide
    b = {p["prompt_id"]: p["elapsed_s"] for p in new["vanilla"]["prompts"]}
    t = {p["prompt_id"]: p["elapsed_s"] for p in new["pld"]["prompts"]}
    per = new["pld"]["process_speedups"]
    assert per["old"] == pytest.approx((b[ids[0]] + b[ids[1]]) / (t[ids[0]] + t[ids[1]]))
    assert per[this] == pytest.approx(b[ids[2]] / t[ids[2]])
    assert "0 point(s) measured, 2 resumed from records (2 in part" in res.out
    line = next(ln for ln in res.out.splitlines() if ln.startswith("resumed: pld:"))
    assert f"2 by process old ({per['old']:.2f}x), 1 by process {this} ({per[this]:.2f}x)" in line
    assert f"mean of the per-process speedups is {(per['old'] + per[this]) / 2:.2f}x" in line
    assert "resumed: vanilla: its 3 prompts were timed by 2 processes (2 by process old, 1 by process" in res.out


def test_an_interrupted_run_says_that_a_rerun_measures_again(tmp_path, monkeypatch):
    """`ouroboros.run` never resumes: stopped, it says so (not "rerun to resume"); rerun, it measures both points
    again; the sweep it names resumes from the records it left."""
    import ouroboros.running.harness as harness

    args = [*SIM[:3], "strategy=pld", "dataset.num_prompts=1", "max_new_tokens=4"]
    out = tmp_path / "r.jsonl"
    real, calls = harness.decode, []

    def stopping(*a, **kw):
        if kw.get("prompt_id") is not None:
            calls.append(kw["prompt_id"])
            if len(calls) == 2:   # vanilla's prompt, then pld's
                raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(harness, "decode", stopping)
    res = run_module("ouroboros.run", *args, f"out={out}", tmp=tmp_path)
    assert res.code == 130 and [r["strategy"] for r in read_records(out)] == ["vanilla"]
    assert res.err.strip().splitlines()[-1] == f"interrupted: 1 point recorded, {RERUN}"
    assert "rerun to resume" not in res.err
    monkeypatch.undo()
    again = run_module("ouroboros.run", *args, f"out={out}", tmp=tmp_path)
    assert again.code == 0, again.err
    assert [r["strategy"] for r in read_records(out)] == ["vanilla", "vanilla", "pld"]   # measured again
    swept = run_module("ouroboros.sweep", *args, "sweep=single", f"out={out}", tmp=tmp_path)
    assert swept.code == 0 and "0 point(s) measured, 2 resumed from records" in swept.out, swept.err


def table_record(label: str, seconds: float, **kw) -> Record:
    return Record(record_id=kw.pop("record_id", label), point_id=kw.pop("point_id", label), label=label,
                  backend="hf", strategy=label.split()[0], hardware={"cpu": "x"}, max_new_tokens=8,
                  totals={"new_tokens": 8, "elapsed_s": seconds, "tokens_per_s": 8 / seconds, "block_efficiency": 1.0,
                          "accepted_length": 0.0, "match_per_forward": 0.0}, **kw)


def test_the_table_never_cuts_a_point_name():
    a = "suffix suffix_decoding_max_tree_depth=1000000000 suffix_decoding_max_spec_factor=1.0"
    b = "suffix suffix_decoding_max_tree_depth=1000000000 suffix_decoding_max_spec_factor=2.0"
    table = format_table([table_record(a, 2.0), table_record(b, 3.0)])
    rows = [ln for ln in table.splitlines() if ln.startswith("suffix ")]
    assert [r.split("  ")[0] for r in rows] == [a, b]
    head = next(ln for ln in table.splitlines() if ln.startswith("point"))
    assert head.index("tokens") + len("tokens") == len(b) + 1 + 8    # the column widened to the longest name
    short = format_table([table_record("pld", 2.0)]).splitlines()
    assert next(ln for ln in short if ln.startswith("point")).index("tokens") == 44 + 2   # as before: 44 + "  "


def run_module_warnings(module: str, *args: str, tmp: Path) -> Result:
    """`run_module`, but with Python's warnings shown (the helper silences them)."""
    argv = [module, *args, *([f"hydra.run.dir={tmp}/hydra", "hydra.output_subdir=null"]
                             if module in HYDRA_MODULES else [])]
    out, err = io.StringIO(), io.StringIO()
    saved, sys.argv = sys.argv, argv
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("always")
            # runpy's own, before the entry point runs: the module was imported by an earlier test (in process only)
            warnings.filterwarnings("ignore", "'ouroboros.* found in sys.modules", RuntimeWarning)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv = saved
    return Result(code, out.getvalue(), err.getvalue())


def test_a_warning_is_one_line(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_bytes(b'{"kind":"prompt_result","of_point":"x","pro')   # a line torn by a kill mid-write
    res = run_module_warnings("ouroboros.sweep", *SIM, "strategy=pld", "dataset.num_prompts=1", "max_new_tokens=4",
                              f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err
    assert any(ln.startswith("warning: ") for ln in res.err.splitlines()), res.err   # the torn line's, Hydra's
    assert ".py:" not in res.err and "warnings.warn" not in res.err and "Warning:" not in res.err
    err = io.StringIO()
    with contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("always")
        entry(lambda: warnings.warn("two\nlines", stacklevel=1))
    assert err.getvalue() == "warning: two lines\n"


def test_a_resumed_table_shows_the_baseline_its_speedup_used(tmp_path):
    """pld measured against vanilla record A; vanilla measured again since (record B, slower here: its times
    doubled). The resumed sweep's table shows A's row beside B's, and the speedup pld's record holds is A's time
    over pld's; the table alone (without A) says which record the speedup used."""
    args = [*SIM, "strategy=pld", "dataset.num_prompts=2", "max_new_tokens=8"]
    out = tmp_path / "r.jsonl"
    assert run_module("ouroboros.sweep", *args, f"out={out}", tmp=tmp_path).code == 0
    a, pld = (Record.from_json(r) for r in read_records(out))
    assert pld.baseline_record == a.record_id and a.baseline_record is None
    b = dataclasses.replace(a, record_id="b" * 32, time=a.time + 1,
                            totals={**a.totals, "elapsed_s": 2 * a.totals["elapsed_s"]})
    RecordFile(out).append(b.to_json())
    res = run_module("ouroboros.sweep", *args, f"out={out}", tmp=tmp_path)
    assert res.code == 0 and "0 point(s) measured, 2 resumed from records" in res.out, res.err
    rows = {ln.split("  ")[0]: ln.split() for ln in res.out.splitlines() if ln.startswith(("vanilla", "pld"))}
    used = f"vanilla (record {a.record_id[:8]}: pld's baseline)"
    assert float(rows["vanilla"][2]) == pytest.approx(b.seconds, abs=1e-3)
    assert float(rows[used][-11]) == pytest.approx(a.seconds, abs=1e-3)
    assert rows["pld"][4] == f"{pld.speedup:.2f}x" and pld.speedup == pytest.approx(a.seconds / pld.seconds)
    alone = format_table([b, pld])
    assert f"baseline: pld: its speedup is against vanilla record {a.record_id[:8]}, not the vanilla row shown " \
           f"(record bbbbbbbb" in alone
    assert not [ln for ln in format_table([a, pld]).splitlines() if ln.startswith("baseline:")]
    older = format_table([b, dataclasses.replace(pld, baseline_record=None)])   # a record that names none
    assert f"baseline: pld: its speedup {pld.speedup:.2f}x is not the vanilla row's time over its own " \
           f"({b.seconds / pld.seconds:.2f}x)" in older


def other_code(out: Path) -> None:
    """Rewrite `out` as an earlier version of the code would have left it: every record's and prompt line's code
    fingerprint another one."""
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    for ln in lines:
        if "point_id" in ln:
            ln["versions"] = {**ln["versions"], "code": "0" * 16, "git": "abc1234"}
        elif ln.get("kind") == "prompt_result":
            ln["code"] = "0" * 16
    out.write_text("".join(json.dumps(ln) + "\n" for ln in lines))


def test_a_resume_reuses_only_records_of_the_code_that_runs_now(tmp_path):
    """A record an earlier version of the code measured (a default, a kernel or a fix changed since) is not this
    code's figure: the rerun measures the point again, says so once, and keeps the old lines;
    sweep.resume_any_code=true reuses them and says their figures are not this code's."""
    out = tmp_path / "r.jsonl"
    args = [*SIM, "strategy=pld", "dataset.num_prompts=2", "max_new_tokens=8", f"out={out}"]
    assert run_module("ouroboros.sweep", *args, tmp=tmp_path).code == 0
    first = read_records(out)
    assert len(first) == 2 and all(len(r["versions"]["code"]) == 16 for r in first)
    same = run_module("ouroboros.sweep", *args, tmp=tmp_path)
    assert "0 point(s) measured, 2 resumed" in same.out and "other code" not in same.err
    other_code(out)
    again = run_module("ouroboros.sweep", *args, tmp=tmp_path)
    assert again.code == 0 and "2 point(s) measured, 0 resumed" in again.out
    assert "2 point(s) have records or prompts made by other code (git abc1234" in again.err
    assert "measured again" in again.err
    recs = read_records(out)
    assert len(recs) == 4 and {r["versions"]["code"] for r in recs[2:]} == {first[0]["versions"]["code"]}
    other_code(out)
    kept = run_module("ouroboros.sweep", *args, "sweep.resume_any_code=true", tmp=tmp_path)
    assert "0 point(s) measured, 2 resumed" in kept.out and "their figures are not this code's" in kept.err


def test_prompt_lines_of_other_code_are_not_resumed(tmp_path):
    """A stopped run's prompt lines carry the code that decoded them; a store expecting another code reads none
    of them back and names the point as stale, with the git commit of its last record."""
    rf = RecordFile(tmp_path / "r.jsonl")
    rf.append(prompt_line("p1", {"prompt_id": "0"}, "proc", "a" * 16))
    rf.append(prompt_line("p2", {"prompt_id": "0"}, "proc", "b" * 16))
    rf.append({"point_id": "p3", "versions": {"code": "a" * 16, "git": "abc1234"}})
    store = FileStore(rf, resume=True)
    for pid in ("p1", "p2", "p3"):
        store.expect(pid, "b" * 16)
    assert store.finished_processes("p1") == {} and store.finished_processes("p2") == {"0": "proc"}
    assert store.done("p3") is None
    assert store.stale(["p1", "p2", "p3"]) == {"p1": "unknown", "p3": "abc1234"}
    anything = FileStore(rf, resume=True, any_code=True)
    anything.expect("p1", "b" * 16)
    assert anything.finished_processes("p1") == {"0": "proc"}


def test_the_code_fingerprint_follows_the_source(tmp_path, monkeypatch):
    """The fingerprint changes with any source file of a package (not with its byte-code cache)."""
    import types

    from ouroboros.running import point

    pkg = types.ModuleType("fp_pkg")
    pkg.__path__ = [str(tmp_path)]
    monkeypatch.setitem(sys.modules, "fp_pkg", pkg)
    (tmp_path / "a.py").write_text("X = 1\n")

    def fingerprint() -> str:
        point._code_hash.cache_clear()
        return point._code_hash(("fp_pkg",), True)

    one = fingerprint()
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython.pyc").write_bytes(b"junk")
    assert fingerprint() == one
    (tmp_path / "a.py").write_text("X = 2\n")
    assert fingerprint() != one
    point._code_hash.cache_clear()
