"""Ctrl-C (SIGINT to the process group, as a terminal sends it) and SIGTERM stop a sweep with one line and exit
130; every appended record is complete and has its wandb run; a rerun finishes the sweep, no point missing or
doubled. The one test here that needs a subprocess: the exit path itself is under test."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ouroboros.running.sinks import read_records, read_wandb_run

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["model=llama70b_7b", "hardware=a800x2", "dataset.num_prompts=2", "max_new_tokens=48", "sweep=k",
        "logger.console=false"]


def start(tmp: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ouroboros.sweep", *ARGS, f"out={out}",
                             f"logger.wandb.dir={tmp / 'w'}", f"hydra.run.dir={tmp / 'h'}", *extra], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


def record_lines(out: Path) -> list[dict]:
    """The whole records among the file's lines (points also append a line per finished prompt)."""
    recs = []
    for line in out.read_bytes().splitlines() if out.exists() else []:
        try:
            rec = json.loads(line)
        except ValueError:   # a line being written
            continue
        if "point_id" in rec:
            recs.append(rec)
    return recs


def wait_for_records(out: Path, n: int, proc: subprocess.Popen) -> None:
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if len(record_lines(out)) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {n} records before the sweep ended: {proc.stderr.read() if proc.stderr else ''}")


def test_ctrl_c_keeps_whole_records_with_their_wandb_runs_and_resumes(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = start(tmp_path, out)
    wait_for_records(out, 2, proc)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    lines = [json.loads(x) for x in out.read_bytes().splitlines()]   # every line whole
    recs = [r for r in lines if "point_id" in r]
    n = len(recs)
    assert 2 <= n < 8, "the sweep finished before the signal; make the points longer"
    assert err.strip().splitlines()[-1] == f"interrupted: {n} points recorded, rerun to resume"
    assert "Traceback" not in err
    runs = sorted((tmp_path / "w" / "wandb").glob("offline-run-*"))
    assert sorted(read_wandb_run(r)["config"]["point_id"] for r in runs) == sorted(r["point_id"] for r in recs)
    done = subprocess.run([sys.executable, "-m", "ouroboros.sweep", *ARGS, "logger=quiet", f"out={out}",
                           f"hydra.run.dir={tmp_path / 'h2'}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ids = [r["point_id"] for r in read_records(out)]
    assert len(ids) == len(set(ids)) == 8                      # 7 values of K + the vanilla baseline, once each
    assert f"{8 - n} point(s) measured, {n} resumed" in done.stdout


def test_sigterm_is_one_line_and_exit_130(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = start(tmp_path, out, "logger=quiet")
    wait_for_records(out, 1, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    n = len([r for r in map(json.loads, out.read_bytes().splitlines()) if "point_id" in r])
    assert proc.returncode == 130 and n < 8, err[-2000:]
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("note: ")]   # the sim's notes (source, ...)
    assert lines == [f"interrupted: {n} point{'s' if n != 1 else ''} recorded, rerun to resume"]
