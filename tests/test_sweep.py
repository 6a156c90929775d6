"""The sweep: baselines, resume after a kill (no record lost or duplicated), Hydra -m with the joblib launcher.
Everything runs on the simulator (llama70b_7b profile, 2 prompts x 16 tokens): no download, seconds per point."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ouroboros.config import validate
from ouroboros.running.executor import make_executor
from ouroboros.running.record import Record
from ouroboros.running.sinks import read_records
from ouroboros.sweep import plan, run_points

ROOT = Path(__file__).resolve().parents[1]
CONF = str(ROOT / "conf")
GRID = 'sweep.grid=["strategy=speculative","strategy.params.gamma=2,4"]'
SMALL = ["model=llama70b_7b", "dataset.num_prompts=2", "max_new_tokens=16", "logger=quiet"]


def sweep_records(out: Path, *overrides: str, base: tuple[str, ...] | list[str] = SMALL) -> list[Record]:
    """Run a sweep in this process (as `python -m ouroboros.sweep` does, without the CLI)."""
    ovr = [*base, f"out={out}", *overrides]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=ovr, return_hydra_config=True)
        run = validate(cfg)
        points = plan(ovr, dict(cfg.hydra.runtime.choices), run.sweep)
        return run_points(points, make_executor(run, resume=run.sweep.resume, sweep=run.sweep.name))


def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ouroboros.sweep", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def test_sweep_runs_baseline_once_and_computes_speedups(tmp_path):
    recs = sweep_records(tmp_path / "r.jsonl", "sweep=gamma", GRID)
    assert [r.strategy for r in recs] == ["vanilla", "speculative", "speculative"]
    assert [r.params.get("gamma") for r in recs[1:]] == [2, 4]
    base = recs[0]
    assert base.speedup == 1.0 and all(r.baseline_id == base.point_id for r in recs[1:])
    for r in recs[1:]:
        assert r.speedup == base.totals["elapsed_s"] / r.totals["elapsed_s"]
        assert r.identical_to_baseline == "2/2"
        assert r.backend == "sim" and r.hardware["name"] == "a800x2"
    on_disk = read_records(tmp_path / "r.jsonl")
    assert [r["point_id"] for r in on_disk] == [r.point_id for r in recs]
    # a rerun measures nothing new
    again = sweep_records(tmp_path / "r.jsonl", "sweep=gamma", GRID)
    assert [r.record_id for r in again] == [r.record_id for r in recs]
    assert len(read_records(tmp_path / "r.jsonl")) == 3


def records_in(out: Path) -> int:
    """Whole records in `out` so far (0 while it does not exist: the run's write check makes and removes it)."""
    try:
        return out.read_bytes().count(b'"point_id"')
    except FileNotFoundError:
        return 0


def test_killed_sweep_resumes_without_loss_or_duplicates(tmp_path):
    out = tmp_path / "records.jsonl"
    args = [*SMALL, "max_new_tokens=48", "sweep=k", f"out={out}", f"hydra.run.dir={tmp_path / 'h'}"]
    proc = subprocess.Popen([sys.executable, "-m", "ouroboros.sweep", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    while time.time() < deadline and records_in(out) < 3:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)   # mid-sweep: after 3 records, while the next point is being measured
    proc.wait()
    before = out.read_bytes()
    n_before = before.count(b'"point_id"')   # whole records (points also append a line per finished prompt)
    assert 3 <= n_before < 8, "the sweep finished before it could be killed; make the points longer"
    done = cli(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    recs = read_records(out)
    ids = [r["point_id"] for r in recs]
    assert len(ids) == len(set(ids)) == 8          # 7 values of K + the vanilla baseline, each exactly once
    assert out.read_bytes().startswith(before.rsplit(b"\n", 1)[0])  # finished records untouched
    assert f"{8 - n_before} point(s) measured, {n_before} resumed" in done.stdout
    assert sorted(r["params"]["K"] for r in recs if r["strategy"] == "ouroboros") == [1, 2, 3, 4, 5, 6, 7]


def test_multirun_with_joblib_launcher(tmp_path):
    out = tmp_path / "records.jsonl"
    res = cli("-m", "hydra/launcher=local", *SMALL, "sweep=single", "strategy=speculative",
              "strategy.params.gamma=2,3", f"out={out}", f"hydra.sweep.dir={tmp_path / 'mr'}")
    assert res.returncode == 0, res.stderr[-2000:]
    recs = read_records(out)
    assert sorted(r["label"] for r in recs) == ["speculative gamma=2", "speculative gamma=3", "vanilla"]
    assert "multirun: 3 point(s)" in res.stdout
    assert "Joblib" in res.stdout + res.stderr
    assert sorted(len(json.loads(p.read_text())) for p in (tmp_path / "mr").glob("*/points.json")) == [2, 2]


def test_multirun_validates_every_job_before_running(tmp_path):
    out = tmp_path / "records.jsonl"
    res = cli("-m", *SMALL, "sweep=single", "strategy=speculative", "strategy.params.gamma=2,0", f"out={out}",
              f"hydra.sweep.dir={tmp_path / 'mr'}")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1] == "error: speculative.gamma must be >= 1, got 0"
    assert not out.exists()   # nothing ran


def table_of(stdout: str) -> list[str]:
    """The multirun's one table (its point rows and settings lines), without paths and timings of the launch."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("new tokens per prompt"))
    return [ln for ln in lines[start:] if not ln.startswith(("records", "wandb"))]


def test_multirun_with_submitit_local_matches_the_basic_launcher(tmp_path):
    """Scale-out (issue 33): hydra-submitit-launcher's submitit_local runs the SLURM code path on this machine; its
    records and its one table equal those of Hydra's basic launcher (the simulator is deterministic)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason='pip install -e ".[submitit]"')
    runs = {}
    for name, launcher in (("basic", []), ("submitit", ["hydra/launcher=submitit_local",
                                                       "hydra.launcher.timeout_min=10"])):
        out = tmp_path / f"{name}.jsonl"
        res = cli("-m", *launcher, *SMALL, "sweep=single", "strategy=speculative", "strategy.params.gamma=2,3",
                  f"out={out}", f"hydra.sweep.dir={tmp_path / name}")
        assert res.returncode == 0, res.stderr[-2000:]
        runs[name] = (res.stdout, {r["label"]: (r["totals"]["new_tokens"], r["totals"]["elapsed_s"], r["speedup"])
                                   for r in read_records(out)})
    basic, sub = runs["basic"][1], runs["submitit"][1]   # sums of the same times, added in another order: approx
    assert sub.keys() == basic.keys() and len(basic) == 3
    assert all(sub[k] == pytest.approx(basic[k], rel=1e-12) for k in basic)
    assert sorted(table_of(runs["submitit"][0])) == sorted(table_of(runs["basic"][0]))   # jobs finish in any order
    assert list((tmp_path / "submitit").rglob("*_submitted.pkl"))   # it went through submitit
