"""Nothing lost (issue 59): no file a run writes is another file of the same run or an existing file of another
kind (records, suffix cache, phrase pool, tune preset, analysis and Spec-Bench outputs); `out` is a regular file;
a failed append (a full disk) is one `error:` line and leaves the records file as it was; a save into a missing
folder makes it; a deeply nested saved file is one line; a torn or undecodable records line is reported once,
naming the file, the line and the point it held. In process, on the simulator."""

import errno
import json
import os
import warnings
from pathlib import Path

import pytest
from cli_helper import run_module
from test_inputs import SIM

from ouroboros.errors import OuroborosError
from ouroboros.running.sinks import RecordFile, read_records
from ouroboros.strategies.saved import read_doc, write_doc

OLD = (b'{"schema":2,"point_id":"old1","label":"kept","totals":{}}\n'
       b'{"kind":"prompt_result","of_point":"old2","prompt":{"prompt_id":"1"}}\n'
       b'{"schema":2,"point_id":"old2","label":"also kept","totals":{}}\n')
SUFFIX_DOC = b'{"format":"ouroboros-suffix-cache","version":1,"meta":{},"outputs":[]}'
HYDRA = ("ouroboros.run", "ouroboros.sweep", "ouroboros.tune")


def _run(module: str, tmp: Path, *args: str):
    argv = [*SIM, *args] if module in HYDRA else list(args)
    return run_module(module, *argv, tmp=tmp)


def _refused(res, needle: str) -> str:
    """Exit 2, exactly one stderr line, `error: ...` holding `needle`, no traceback."""
    lines = res.err.strip().splitlines()
    assert res.code == 2, (res.code, res.err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), res.err[-2000:]
    assert needle in lines[0], lines[0]
    assert "Traceback" not in res.err + res.out
    return lines[0]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file() and "hydra" not in p.parts}


# ------------------------------------------------------------------------------- item 1: one file, two outputs
@pytest.mark.parametrize("module,args,needle", [
    ("ouroboros.run", ["strategy=suffix", "strategy.params.cache_save={out}"], "suffix.cache_save: "),
    ("ouroboros.run", ["strategy=ouroboros", "strategy.params.pool_save={out}"], "ouroboros.pool_save: "),
    ("ouroboros.sweep", ["sweep=single", "strategy=suffix", "strategy.params.cache_save={out}"], "suffix.cache_save"),
    ("ouroboros.sweep", ["sweep=single", "strategy=ouroboros", "strategy.params.pool_save={out}"], "pool_save"),
    # the same file under another name: a symlinked folder, a hard link
    ("ouroboros.run", ["strategy=suffix", "strategy.params.cache_save={tmp}/link/r.jsonl"], "suffix.cache_save"),
    ("ouroboros.run", ["strategy=ouroboros", "strategy.params.pool_save={tmp}/hard.jsonl"], "pool_save"),
])
def test_a_save_path_on_the_records_file_is_refused(tmp_path, module, args, needle):
    out = tmp_path / "r.jsonl"
    out.write_bytes(OLD)
    (tmp_path / "link").symlink_to(tmp_path)
    os.link(out, tmp_path / "hard.jsonl")
    res = _run(module, tmp_path, f"out={out}", *[a.format(out=out, tmp=tmp_path) for a in args])
    line = _refused(res, needle)
    assert "exists and is not a" in line and "not a saved document" in line
    assert out.read_bytes() == OLD   # every line kept, none doubled


@pytest.mark.parametrize("save", ["strategy=suffix strategy.params.cache_save={new}",
                                  "strategy=ouroboros strategy.params.pool_save={new}",
                                  "strategy=suffix strategy.params.cache_save={tmp}/link/new.jsonl"])
def test_outputs_that_are_one_new_file_are_refused(tmp_path, save):
    """Neither file exists yet (or the one there is empty): only comparing the paths can tell."""
    new = tmp_path / "new.jsonl"
    (tmp_path / "link").symlink_to(tmp_path)
    res = _run("ouroboros.run", tmp_path, f"out={new}", *save.format(new=new, tmp=tmp_path).split())
    _refused(res, "are the same file")
    assert not new.exists()
    new.write_bytes(b"")   # an existing empty file: allowed as either, but not as both
    res = _run("ouroboros.run", tmp_path, f"out={new}", *save.format(new=new, tmp=tmp_path).split())
    _refused(res, "are the same file")
    assert new.read_bytes() == b""


def test_outputs_in_the_wandb_folder_are_refused(tmp_path):
    out = tmp_path / "w" / "wandb" / "r.jsonl"
    res = _run("ouroboros.run", tmp_path, f"out={out}", "logger.wandb.mode=offline",
               f"logger.wandb.dir={tmp_path / 'w'}")
    _refused(res, "is in the wandb folder")
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("target,args,needle", [
    # a save onto a file of another kind: a dataset, the other saved format, a text file
    ("data.jsonl", ["strategy=suffix", "strategy.params.cache_save={path}"], "(not a saved document)"),
    ("cache.json", ["strategy=ouroboros", "strategy.params.pool_save={path}"],
     "(it holds a 'ouroboros-suffix-cache' document)"),
    ("notes.txt", ["strategy=ouroboros", "strategy.params.pool_save={path}"], "not a phrase pool file"),
    # out onto a file that is not a records file: a saved document, a dataset, a text file
    ("cache.json", ["out={path}"], "out: "),
    ("data.jsonl", ["out={path}"], "is not a records file"),
    ("notes.txt", ["out={path}"], "is not a records file"),
])
def test_an_existing_file_of_another_kind_is_not_overwritten(tmp_path, target, args, needle):
    (tmp_path / "data.jsonl").write_text('{"id": "p1", "prompt": "a b c"}\n{"id": "p2", "prompt": "d e"}\n')
    (tmp_path / "cache.json").write_bytes(SUFFIX_DOC)
    (tmp_path / "notes.txt").write_text("my notes\n")
    out = tmp_path / "r.jsonl"
    out.write_bytes(OLD)
    before = _files(tmp_path)
    argv = [f"out={out}", *[a.format(path=tmp_path / target) for a in args]]
    _refused(_run("ouroboros.run", tmp_path, *argv), needle)
    assert _files(tmp_path) == before


def test_same_kind_files_still_work(tmp_path):
    """An empty or new `out`, a save path that is also the file loaded, a records file with a torn first line."""
    out = tmp_path / "r.jsonl"
    out.write_bytes(b"")
    cache = tmp_path / "c.json"
    res = _run("ouroboros.run", tmp_path, f"out={out}", "strategy=suffix", f"strategy.params.cache_save={cache}")
    assert res.code == 0, res.err[-2000:]
    assert len(read_records(out)) == 2 and json.loads(cache.read_text())["format"] == "ouroboros-suffix-cache"
    res = _run("ouroboros.run", tmp_path, f"out={out}", "strategy=suffix", f"strategy.params.cache_save={cache}",
               f"strategy.params.cache_load={cache}")
    assert res.code == 0, res.err[-2000:]
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(b'{"schema":2,"point_id":"ab')   # killed while writing its first record
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = _run("ouroboros.run", tmp_path, f"out={torn}", "strategy=pld")
    assert res.code == 0 and len(read_records(torn)) == 2, res.err[-2000:]


def test_tune_out_is_neither_another_output_nor_a_foreign_file(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_bytes(OLD)
    _refused(_run("ouroboros.tune", tmp_path, f"out={out}", f"tune.out={out}"), "out and tune.out are the same file")
    mine = tmp_path / "mine.yaml"
    mine.write_text("name: ouroboros\nparams: {gamma: 3}\n")
    _refused(_run("ouroboros.tune", tmp_path, f"out={out}", f"tune.out={mine}"), "was not written by ouroboros.tune")
    assert out.read_bytes() == OLD and mine.read_text() == "name: ouroboros\nparams: {gamma: 3}\n"


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """A records file of two points (vanilla, pld) and its bytes."""
    tmp = tmp_path_factory.mktemp("recs")
    out = tmp / "r.jsonl"
    res = _run("ouroboros.run", tmp, f"out={out}", "strategy=pld")
    assert res.code == 0, res.err[-2000:]
    return out.read_bytes()


def test_analysis_out_never_overwrites_its_input(tmp_path, records):
    table = tmp_path / "table.csv"   # a records file named like one of analysis' tables, in the output folder
    table.write_bytes(records)
    _refused(run_module("analysis", str(table), "--out", str(tmp_path), "--format", "svg"), "would overwrite the input")
    assert table.read_bytes() == records and _files(tmp_path) == {"table.csv": records}


def test_specbench_out_never_overwrites_its_input_or_another_file(tmp_path, records):
    from ouroboros.specbench import answer_path

    recs = tmp_path / "recs"
    recs.mkdir()
    path = answer_path(recs, "m", "pld")       # the records file is named like the answer file of its pld point
    path.write_bytes(records)
    _refused(run_module("ouroboros.specbench", str(recs), "--out", str(recs), "--model-id", "m"),
             "would overwrite the input")
    assert _files(recs) == {path.name: records}
    src = tmp_path / "r.jsonl"
    src.write_bytes(records)
    out = tmp_path / "answers"
    out.mkdir()
    mine = answer_path(out, "m", "vanilla")
    mine.write_text("not an answer\n")
    _refused(run_module("ouroboros.specbench", str(src), "--out", str(out), "--model-id", "m"),
             "is not a Spec-Bench answer file")
    assert _files(out) == {mine.name: b"not an answer\n"}
    mine.unlink()
    res = run_module("ouroboros.specbench", str(src), "--out", str(out), "--model-id", "m")
    assert res.code == 0 and "2 answer file(s)" in res.out, res.err
    res = run_module("ouroboros.specbench", str(src), "--out", str(out), "--model-id", "m")   # its own: rewritten
    assert res.code == 0 and "2 answer file(s)" in res.out, res.err


# ------------------------------------------------------------------------------- item 2: devices, a full disk
@pytest.mark.parametrize("module,dev,needle", [
    ("ouroboros.sweep", "/dev/full", "out: '/dev/full' is a device, not a regular file"),
    ("ouroboros.run", "/dev/null", "out: '/dev/null' is a device, not a regular file (out=null: no records file)"),
    ("ouroboros.run", "{tmp}/fifo", "is a pipe or socket, not a regular file"),
])
def test_out_must_be_a_regular_file(tmp_path, module, dev, needle):
    os.mkfifo(tmp_path / "fifo")
    args = ["sweep=single", "strategy=pld"] if module == "ouroboros.sweep" else []
    _refused(_run(module, tmp_path, f"out={dev.format(tmp=tmp_path)}", *args), needle)


def test_a_device_is_not_read_as_records(tmp_path):
    _refused(run_module("analysis", "/dev/zero", "--out", str(tmp_path / "a")), "'/dev/zero' is a device")


def _enospc(*_a, **_k):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("fail", ["write", "fsync"])
def test_a_failed_append_leaves_the_file_as_it_was(tmp_path, monkeypatch, fail):
    rf = RecordFile(tmp_path / "r.jsonl")
    rf.path.write_bytes(OLD)
    real_write = os.write

    def half_write(fd, data):   # part of the line lands, then the disk is full
        real_write(fd, bytes(data[:10]))
        _enospc()

    monkeypatch.setattr(os, "write", half_write) if fail == "write" else monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(OuroborosError) as e:
        rf.append({"schema": 2, "point_id": "new", "label": "lost", "totals": {}})
    monkeypatch.undo()
    assert str(e.value) == f"out: cannot append to {str(rf.path)!r} (No space left on device); nothing was written"
    assert rf.path.read_bytes() == OLD


@pytest.mark.parametrize("module,args", [("ouroboros.run", ["strategy=pld"]),
                                         ("ouroboros.sweep", ["sweep=single", "strategy=pld"])])
def test_a_full_disk_is_one_error_line_and_loses_nothing(tmp_path, monkeypatch, module, args):
    out = tmp_path / "r.jsonl"
    out.write_bytes(OLD)
    monkeypatch.setattr(os, "fsync", _enospc)
    res = _run(module, tmp_path, f"out={out}", *args)
    monkeypatch.undo()
    errors = [ln for ln in res.err.splitlines() if ln.startswith("error: ")]
    assert res.code == 2, (res.code, res.err[-2000:])
    assert errors == [f"error: out: cannot append to {str(out)!r} (No space left on device); nothing was written"]
    assert all(ln.startswith(("error: ", "note: ")) for ln in res.err.splitlines()), res.err[-2000:]
    assert "Traceback" not in res.err + res.out
    assert out.read_bytes() == OLD
    res = _run(module, tmp_path, f"out={out}", *args)   # the disk has room again: the rerun measures and appends
    assert res.code == 0 and out.read_bytes().startswith(OLD) and len(read_records(out)) == 4, res.err[-2000:]


# ------------------------------------------------------------------------------- item 6: a save in a new folder
@pytest.mark.parametrize("args", [["strategy=suffix", "strategy.params.cache_save={tmp}/new/sub/c.json"],
                                  ["strategy=ouroboros", "strategy.params.pool_save={tmp}/new/sub/c.json"]])
def test_a_save_into_a_missing_folder_makes_it(tmp_path, args):
    out = tmp_path / "r.jsonl"
    res = _run("ouroboros.run", tmp_path, f"out={out}", *[a.format(tmp=tmp_path) for a in args])
    assert res.code == 0, res.err[-2000:]
    doc = json.loads((tmp_path / "new" / "sub" / "c.json").read_text())
    assert doc["format"] in ("ouroboros-suffix-cache", "ouroboros-phrase-pool") and len(read_records(out)) == 2
    assert sorted(p.name for p in (tmp_path / "new" / "sub").iterdir()) == ["c.json"]   # no temp file


def test_a_failed_save_is_one_line_and_keeps_the_previous_document(tmp_path, monkeypatch):
    path = tmp_path / "c.json"
    write_doc(str(path), "ouroboros-suffix-cache", 1, {}, {"outputs": [[1, 2]]})
    before = path.read_bytes()
    monkeypatch.setattr(json, "dump", _enospc)
    with pytest.raises(OuroborosError, match=r"cannot save ouroboros-suffix-cache file .*No space left on device"):
        write_doc(str(path), "ouroboros-suffix-cache", 1, {}, {"outputs": [[3]]})
    monkeypatch.undo()
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["c.json"]
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(OuroborosError, match="cannot save"):   # a folder that cannot be made
        write_doc(str(tmp_path / "f.txt" / "c.json"), "ouroboros-suffix-cache", 1, {}, {"outputs": []})


# ------------------------------------------------------------------------------- item 19: deeply nested JSON
@pytest.mark.parametrize("args", [["strategy=suffix", "strategy.params.cache_load={deep}"],
                                  ["strategy=ouroboros", "strategy.params.pool_load={deep}"]])
def test_a_deeply_nested_saved_file_is_one_line(tmp_path, args):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    out = tmp_path / "r.jsonl"
    out.write_bytes(OLD)
    _refused(_run("ouroboros.run", tmp_path, f"out={out}", *[a.format(deep=deep) for a in args]),
             "is unreadable or corrupt (RecursionError)")
    assert out.read_bytes() == OLD
    with pytest.raises(OuroborosError, match="RecursionError"):
        read_doc(str(deep), "suffix cache", "ouroboros-suffix-cache", 1, {})


# ------------------------------------------------------------------------------- item 17: each bad line once
def test_a_torn_line_is_reported_once_on_a_resume(tmp_path):
    rf = RecordFile(tmp_path / "r.jsonl")
    rf.path.write_bytes(OLD + b'{"schema":2,"point_id":"p9","label":"torn pt","tot')
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert set(rf.index()) == {"old1", "old2"}           # the resume index
        assert rf.finished_prompts("old2") == {"1": {"prompt_id": "1"}}
        rf.append({"schema": 2, "point_id": "p9", "label": "torn pt", "totals": {}})   # cuts the torn line
        rf.append({"schema": 2, "point_id": "p10", "totals": {}})
        assert set(rf.index()) == {"old1", "old2", "p9", "p10"}
    msgs = [str(w.message) for w in seen]
    assert len(msgs) == 1, msgs
    assert msgs[0].startswith(f"{rf.path}: skipped 1 undecodable or incomplete line(s): line 4 (incomplete")
    assert "point p9 (torn pt)" in msgs[0]
    assert rf.path.read_bytes().startswith(OLD) and rf.path.read_bytes().count(b"\n") == 5


def test_a_torn_line_cut_by_a_writer_is_reported_once(tmp_path):
    rf = RecordFile(tmp_path / "r.jsonl")
    rf.path.write_bytes(OLD + b'{"schema":2,"point_id":"p9",')
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rf.append({"schema": 2, "point_id": "p10", "totals": {}})
        rf.index()
    assert [str(w.message) for w in seen] == [f"{rf.path}: dropped a torn record line (28 bytes, point p9) left by an "
                                              "interrupted write"]


def test_an_undecodable_line_names_the_file_the_line_and_the_point(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(OLD + b'{"schema":2,"point_id":"3ed1443f","label":"pld gamma=3","x":"\xff\xfe"}\n'
                     + b'{"kind":"prompt_result","of_point":"old1","prompt":{oops}\n' + OLD[:58])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert [r["point_id"] for r in read_records(path)] == ["old1", "old2", "old1"]
        read_records(path)                                   # read again (a sweep reads per point): no repeat
    assert [str(w.message) for w in seen] == [
        f"{path}: skipped 2 undecodable or incomplete line(s): line 4 (not UTF-8, point 3ed1443f (pld gamma=3)), "
        "line 5 (not JSON, a prompt of point old1)"]
