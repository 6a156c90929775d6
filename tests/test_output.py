"""What a sweep writes to a log file: no progress-bar escape codes (bars are drawn only on a terminal)."""

from cli_helper import run_module


def test_no_bars_in_a_log_file(tmp_path):
    res = run_module("ouroboros.sweep", "model=llama70b_7b", "sweep=single", "strategy=pld", "dataset.num_prompts=2",
                     "max_new_tokens=8", "logger=quiet", f"out={tmp_path / 'r.jsonl'}", "logger.console=true",
                     tmp=tmp_path)
    assert res.code == 0, res.err
    assert "pld" in res.out                      # the summary lines and the table are still printed
    assert "\r" not in res.out + res.err and "\x1b[" not in res.out + res.err
    assert "it/s" not in res.err and "point/s" not in res.err


def test_multirun_prints_one_table_and_writes_one_summary_run(tmp_path):
    """A `-m` run: each job prints its point lines only; the multirun prints one table, its notes once, and writes
    one summary wandb run (offline) beside one run per measured point; labels show the swept gamma=4 (default)."""
    import subprocess
    import sys
    from pathlib import Path

    out, wb = tmp_path / "r.jsonl", tmp_path / "wb"
    res = subprocess.run([sys.executable, "-m", "ouroboros.sweep", "-m", "model=llama70b_7b", "sweep=single",
                          "strategy=speculative", "strategy.params.gamma=2,4", "dataset.num_prompts=2",
                          "max_new_tokens=8", f"out={out}", f"logger.wandb.dir={wb}", f"hydra.sweep.dir={tmp_path}/mr"],
                         capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert res.returncode == 0, res.stderr[-2000:]
    header = [ln for ln in res.stdout.splitlines() if ln.startswith("point ")]
    assert len(header) == 1
    assert "speculative gamma=4" in res.stdout
    assert res.stderr.count("note: simulating the default hardware") == 1
    runs = sorted((wb / "wandb").glob("offline-run-*"))
    assert len(runs) == 4   # vanilla, gamma=2, gamma=4, and the one summary run
