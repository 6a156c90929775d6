"""Sinks: atomic JSONL appends (a torn line is cut, never read), the resume index, the wandb mirror's offline run
directory (read back: it holds the metrics), disabled mode, the console line."""

import glob
import json
import warnings
from pathlib import Path

import pytest
from test_sweep import sweep_records

from ouroboros.running.sinks import (
    RecordFile,
    WandbMirror,
    _log_chunks,
    _parse,
    read_records,
    read_wandb_run,
    summary_line,
)


def test_append_index_and_torn_tail(tmp_path):
    rf = RecordFile(tmp_path / "r.jsonl")
    rf.append({"point_id": "a", "x": 1})
    rf.append({"point_id": "b", "x": 2})
    with open(rf.path, "ab") as f:              # a writer killed mid-line
        f.write(b'{"point_id": "c", "x"')
    with pytest.warns(UserWarning, match="incomplete"):
        assert [r["point_id"] for r in rf.records()] == ["a", "b"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # the read above already reported that line: its cut is not reported again
        rf.append({"point_id": "c", "x": 3})
    assert rf.path.read_bytes().count(b"\n") == 3
    assert [r["x"] for r in read_records(rf.path)] == [1, 2, 3]
    rf.append({"point_id": "a", "x": 4})       # a re-measurement: the index keeps the latest
    assert rf.index()["a"]["x"] == 4 and len(rf.index()) == 3


def test_claim_sees_a_record_finished_meanwhile(tmp_path):
    rf = RecordFile(tmp_path / "r.jsonl")
    with rf.claim("p") as done:
        assert done is None
    rf.append({"point_id": "p"})
    with rf.claim("p") as done:
        assert done == {"point_id": "p"}


@pytest.fixture(scope="module")
def ouroboros_records(tmp_path_factory):
    out = tmp_path_factory.mktemp("rec") / "r.jsonl"
    return sweep_records(out, "sweep=single", "strategy=ouroboros")


def test_wandb_offline_run_holds_the_metrics(tmp_path, ouroboros_records):
    from wandb.proto import wandb_internal_pb2 as pb

    base, rec = ouroboros_records
    mirror = WandbMirror("offline", dir=str(tmp_path), group="test")
    run_dir = mirror.log_point(rec)
    assert run_dir is not None and run_dir.startswith(str(tmp_path / "wandb" / "offline-run-"))
    got = read_wandb_run(run_dir)
    s, t = got["summary"], rec.totals
    assert s["tokens_per_s"] == pytest.approx(t["tokens_per_s"])
    assert s["speedup"] == pytest.approx(rec.speedup)
    for k in ("block_efficiency", "accepted_length", "match_per_forward"):
        assert s[k] == pytest.approx(t[k])
    assert s["time/verify_s"] == pytest.approx(t["verify_s"]) and "time/draft_frac" in s
    assert any(k.startswith("pool/") and k.endswith("hit_rate") for k in s)         # pool hit rates
    assert any(k.startswith("pool/") and "acceptance:pool" in k for k in s)        # suffix acceptance by source
    assert any(k.startswith("accepted_by_source/") for k in s)
    rates = [h["acceptance/rate"] for h in got["history"] if "acceptance/rate" in h]
    assert len(rates) == len(t["position_proposed"]) and all(0 <= r <= 1 for r in rates)
    assert got["config"]["strategy"]["name"] == "ouroboros" and got["config"]["point_id"] == rec.point_id
    # a file read mid-flush ends inside a record: its prefix reads as the records complete so far, never as
    # a corrupt one (the CI failure of stop 28), and the full set comes back once the rest is written
    whole = Path(glob.glob(f"{run_dir}/run-*.wandb")[0]).read_bytes()
    n_whole = len(list(_log_chunks(whole)))
    counts = []
    for cut in range(8, len(whole), max(1, len(whole) // 300)):
        counts.append(len([_parse(pb, c) for c in _log_chunks(whole[:cut])]))
    assert counts == sorted(counts) and counts[-1] <= n_whole and counts[0] < n_whole
    media = mirror.log_sweep("test", [{"point": "a", "speedup": 1.5}], {})
    assert media is not None and glob.glob(f"{media}/files/media/table/*.table.json")


def test_wandb_disabled_writes_nothing(tmp_path, ouroboros_records):
    mirror = WandbMirror("disabled", dir=str(tmp_path))
    assert mirror.log_point(ouroboros_records[1]) is None
    assert not list(tmp_path.iterdir())


def test_summary_line(ouroboros_records):
    line = summary_line(ouroboros_records[1], 2, 2)
    assert line.startswith("[2/2] ouroboros: ") and "modelled s" in line and "\n" not in line
    assert f"{ouroboros_records[1].speedup:.2f}x" in line
    json.dumps(ouroboros_records[1].to_json())   # records are plain JSON
