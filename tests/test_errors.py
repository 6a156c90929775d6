"""Bad input gets a clear one-line error (OuroborosError), not traceback soup."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import get_model

from ouroboros.backends.hf import HFBackend
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.strategies import build_proposer, make_config


def one_line(exc_info) -> str:
    msg = str(exc_info.value)
    assert "\n" not in msg and msg
    return msg


def test_vocab_mismatch():
    target = HFBackend(get_model("llama", vocab_size=64))
    draft = HFBackend(get_model("llama", vocab_size=80))
    with pytest.raises(OuroborosError) as e:
        build_proposer("speculative", {"gamma": 2}, target, draft)
    assert "vocabularies differ" in one_line(e)


def test_missing_draft_model():
    with pytest.raises(OuroborosError) as e:
        build_proposer("speculative", {}, HFBackend(get_model()), None)
    assert "needs a draft model" in one_line(e)


@pytest.mark.parametrize("prompt,max_new,needle", [
    ([], 5, "empty prompt"),
    ([1, 2], 0, "max_new_tokens must be >= 1"),
    ([1, 2], -3, "max_new_tokens must be >= 1"),
    (list(range(2, 40)) * 20, 5, "does not fit the model context"),
    ([1, 999], 5, "outside the vocabulary"),
])
def test_bad_requests(prompt, max_new, needle):
    target = HFBackend(get_model())
    with pytest.raises(OuroborosError) as e:
        decode(target, build_proposer("vanilla", {}, target), prompt, max_new)
    assert needle in one_line(e)


def test_unknown_strategy_and_option():
    with pytest.raises(OuroborosError) as e:
        make_config("speculativ")
    assert "unknown strategy 'speculativ'" in one_line(e) and "speculative" in str(e.value)
    with pytest.raises(OuroborosError) as e:
        make_config("speculative", {"gama": 3})
    assert "no option 'gama'" in one_line(e)
    with pytest.raises(OuroborosError) as e:
        make_config("pld", {"min_ngram": 3, "max_ngram": 2})
    one_line(e)


def test_cli_prints_one_line_and_exits_2(tmp_path):
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-m", "ouroboros.run", "max_new_tokens=0", "out=null"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "error: max_new_tokens must be >= 1, got 0"
    assert "Traceback" not in proc.stderr
    # Hydra's own folders go under runs/ (issue 59: the tests left outputs/ folders in the repo root)
    assert not (tmp_path / "outputs").exists() and not (tmp_path / "multirun").exists()
    assert {p.name for p in tmp_path.iterdir()} <= {"runs"}
