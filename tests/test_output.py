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
