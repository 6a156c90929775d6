"""The typed record: `Record.to_json` writes the JSONL layout byte for byte as read, and a record written before
(fields missing, keys this version does not know) still loads, reads and goes back out unchanged."""

import json

from test_sweep import sweep_records

from ouroboros.running.record import Record
from ouroboros.running.table import format_table

OLD = {"schema": 1, "record_id": "r0", "point_id": "p0", "baseline_id": None, "time": 5.0, "sweep": "single",
       "label": "vanilla", "strategy": "vanilla", "params": {}, "backend": "hf", "hardware": {"cpu": "x"},
       "config": {"max_new_tokens": 8, "model": {"kind": "tiny"}, "dataset": {"name": "code"}},
       "totals": {"new_tokens": 8, "elapsed_s": 2.0, "tokens_per_s": 4.0, "block_efficiency": 1.0,
                  "accepted_length": 0.0, "match_per_forward": 0.0},
       "speedup": 1.0, "identical_to_baseline": None,
       "prompts": [{"prompt_id": "a", "prompt_len": 3, "output": [1, 2], "elapsed_s": 2.0, "prefill_s": 0.1,
                    "stop_reason": "budget"}],
       "note_from_elsewhere": {"kept": True}}   # no max_new_tokens, speedup_specbench or divergences


def test_a_record_file_round_trips_byte_for_byte(tmp_path):
    out = tmp_path / "r.jsonl"
    recs = sweep_records(out, "sweep=single", "strategy=pld")
    lines = [ln for ln in out.read_text().splitlines() if '"point_id"' in ln]
    assert len(lines) == len(recs) == 2
    for line, rec in zip(lines, recs, strict=True):
        assert json.dumps(Record.from_json(json.loads(line)).to_json(), separators=(",", ":")) == line
        assert Record.from_json(json.loads(line)) == rec and not rec.extra


def test_an_older_record_still_loads():
    rec = Record.from_json(OLD)
    assert rec.extra == {"note_from_elsewhere": {"kept": True}}
    assert rec.max_new_tokens is None and rec.budget == 8 and rec.speedup_specbench is None
    assert (rec.seconds, rec.rate, rec.clock, rec.model_name, rec.dataset_name) == (2.0, 4.0, "wall", "tiny", "code")
    assert rec.band() is None and rec.result().prompts[0].output == [1, 2]
    back = rec.to_json()
    assert back["note_from_elsewhere"] == {"kept": True} and "serving" not in back and "sampled" not in back
    assert {k: v for k, v in back.items() if k in OLD} == OLD
    row = format_table([rec]).splitlines()[3]
    assert row.split()[:4] == ["vanilla", "8", "2.000", "4.0"]


def test_git_commit_marks_a_dirty_checkout(monkeypatch):
    """Records and profiles name the commit the code came from, "-dirty" when tracked files differ from it."""
    import subprocess
    from types import SimpleNamespace

    from ouroboros.running import session

    def fake(diff_rc):
        def run(cmd, **_):
            if "rev-parse" in cmd:
                return SimpleNamespace(stdout="abc1234\n", returncode=0)
            return SimpleNamespace(stdout="", returncode=diff_rc)
        return run

    monkeypatch.setattr(subprocess, "run", fake(1))
    assert session.git_commit() == "abc1234-dirty"
    monkeypatch.setattr(subprocess, "run", fake(0))
    assert session.git_commit() == "abc1234"

    def broken(cmd, **_):
        raise OSError("no git")

    monkeypatch.setattr(subprocess, "run", broken)
    assert session.git_commit() is None
    from simulators.sim_profiles import git_commit
    assert git_commit() == "unknown"
