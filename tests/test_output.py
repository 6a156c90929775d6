"""What a sweep writes to a log file: no progress-bar escape codes (bars are drawn only on a terminal)."""

import json

from cli_helper import run_module


def test_no_bars_in_a_log_file(tmp_path):
    res = run_module("ouroboros.sweep", "model=llama70b_7b", "sweep=single", "strategy=pld", "dataset.num_prompts=2",
                     "max_new_tokens=8", "logger=quiet", f"out={tmp_path / 'r.jsonl'}", "logger.console=true",
                     tmp=tmp_path)
    assert res.code == 0, res.err
    assert "pld" in res.out                      # the summary lines and the table are still printed
    assert "\r" not in res.out + res.err and "\x1b[" not in res.out + res.err
    assert "it/s" not in res.err and "point/s" not in res.err


def test_no_weight_loading_bars_in_a_log_file(tmp_path):
    """A real pair loaded from local folders (transformers draws a bar per model) writes no bar to a log file."""
    from test_models import save_tiny

    t, d = save_tiny(tmp_path / "t"), save_tiny(tmp_path / "d", seed=1)
    res = run_module("ouroboros.run", "model=hf", f"model.target={t}", f"model.draft={d}", "dataset.num_prompts=1",
                     "dataset.prompt_len=8", "max_new_tokens=4", "logger=quiet", "out=null", tmp=tmp_path)
    assert res.code == 0, res.err
    assert "Loading weights" not in res.err and "\r" not in res.err


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


def test_a_point_two_sweeps_share_is_in_both(tmp_path):
    """Sweep A measures speculative gamma=2; sweep B resumes it (no second measurement, no second record); the
    analysis sees it in both sweeps, under each sweep's label."""
    from analysis.report import table_rows
    from ouroboros.running.sinks import load_sweep_records, read_records

    out = tmp_path / "r.jsonl"
    common = ["model=llama70b_7b", "dataset.num_prompts=2", "max_new_tokens=8", "logger=quiet", f"out={out}"]
    for name in ("first", "second"):
        res = run_module("ouroboros.sweep", *common, "sweep=single", f"sweep.name={name}", "strategy=speculative",
                         "strategy.params.gamma=2", tmp=tmp_path)
        assert res.code == 0, res.err
    assert len(read_records(out)) == 2                       # vanilla + gamma=2, measured once
    rows = table_rows(load_sweep_records(out))
    assert sorted((r["sweep"], r["point"]) for r in rows) == [("first", "speculative gamma=2"), ("first", "vanilla"),
                                                              ("second", "speculative gamma=2"), ("second", "vanilla")]


def test_a_stopped_point_resumes_at_prompt_granularity(tmp_path, monkeypatch):
    """A sweep stopped in the middle of a point keeps the prompts it finished (one line each); the rerun decodes
    only the rest and records the whole point, with the same outputs as an uninterrupted run."""
    import ouroboros.running.harness as harness
    from ouroboros.running.sinks import read_records

    common = ["model=llama70b_7b", "dataset.num_prompts=4", "dataset.task=none", "max_new_tokens=8", "logger=quiet",
              "sweep=single",
              "strategy=speculative"]
    real_decode, calls = harness.decode, []

    def stopping(*a, **kw):
        calls.append(kw.get("prompt_id"))
        if len([c for c in calls if c is not None]) == 7:   # vanilla's 4 prompts, then 2 of speculative's
            raise KeyboardInterrupt
        return real_decode(*a, **kw)

    out = tmp_path / "r.jsonl"
    monkeypatch.setattr(harness, "decode", stopping)
    res = run_module("ouroboros.sweep", *common, f"out={out}", tmp=tmp_path)
    assert res.code == 130 and [r["strategy"] for r in read_records(out)] == ["vanilla"]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert sum(x.get("kind") == "prompt_result" for x in lines) == 6   # 4 of vanilla, 2 of speculative
    calls.clear()
    monkeypatch.setattr(harness, "decode", lambda *a, **kw: calls.append(kw.get("prompt_id")) or real_decode(*a, **kw))
    res = run_module("ouroboros.sweep", *common, f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err
    assert [c for c in calls if c is not None] == ["sim-code-2", "sim-code-3"]   # (the warm-up has no prompt id)
    resumed = read_records(out)[-1]
    clean = tmp_path / "clean.jsonl"
    assert run_module("ouroboros.sweep", *common, f"out={clean}", tmp=tmp_path).code == 0
    assert [p["output"] for p in resumed["prompts"]] == [p["output"] for p in read_records(clean)[-1]["prompts"]]
    assert resumed["identical_to_baseline"] == "4/4" and len(resumed["prompts"]) == 4


def test_a_real_pair_says_it_is_loading_before_the_long_wait(tmp_path):
    """Issue 59: a real run sat for minutes with no output while its weights converted and loaded; it now says what
    it loads first (one plain stderr line, console on), and nothing with logger.console=false."""
    from test_models import save_tiny

    t = save_tiny(tmp_path / "t")
    args = ["model=hf", f"model.target={t}", "model.draft=null", "strategy=vanilla", "baseline=null",
            "dataset.num_prompts=1", "dataset.prompt_len=8", "max_new_tokens=4", "logger=quiet", "out=null"]
    res = run_module("ouroboros.run", *args, "logger.console=true", tmp=tmp_path)
    assert res.code == 0, res.err
    assert f"loading {t} (float32 on cpu) ..." in res.err.splitlines()
    quiet = run_module("ouroboros.run", *args, tmp=tmp_path)
    assert quiet.code == 0 and "loading" not in quiet.err
