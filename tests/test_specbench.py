"""Spec-Bench I/O: question.jsonl is checked on read; answer files carry what Spec-Bench's speed.py reads."""

import json

import pytest
from test_sweep import sweep_records

from ouroboros.errors import OuroborosError
from ouroboros.prompts.sources import read_questions
from ouroboros.specbench import main, write_answers

QUESTIONS = [{"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]},
             {"question_id": 421, "category": "translation", "turns": ["Translate: Guten Tag."]}]


def test_read_questions(tmp_path):
    p = tmp_path / "question.jsonl"
    p.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    qs = read_questions(p)
    assert [(q.id, q.category, len(q.turns)) for q in qs] == [("81", "writing", 2), ("421", "translation", 1)]
    p.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": []}) + "\n")
    with pytest.raises(OuroborosError, match="question.jsonl:1: 'turns' must be a non-empty list"):
        read_questions(p)


def speed_py(path):
    """What Spec-Bench's evaluation/speed.py reads from a method's answer file (per question: sum of new_tokens /
    sum of wall_time over turns; accept_lengths pooled)."""
    speeds, accept = [], []
    for line in open(path):
        d = json.loads(line)
        c = d["choices"][0]
        speeds.append(sum(c["new_tokens"]) / sum(c["wall_time"]))
        accept.extend(c["accept_lengths"])
        assert isinstance(d["category"], str) and len(c["turns"]) == len(c["new_tokens"]) == len(c["wall_time"])
    return sum(speeds) / len(speeds), sum(accept) / len(accept)


def test_answers_match_the_records(tmp_path):
    recs = sweep_records(tmp_path / "r.jsonl", "sweep=single", "strategy=speculative")
    paths = write_answers(recs, tmp_path / "ans", model_id="llama70b_7b")
    assert sorted(p.name for p in paths) == ["llama70b_7b-speculative.jsonl", "llama70b_7b-vanilla.jsonl"]
    spec = recs[1]
    mean_speed, mean_accept = speed_py(tmp_path / "ans" / "llama70b_7b-speculative.jsonl")
    assert mean_speed == pytest.approx(spec.totals["mean_tokens_per_s"])   # Spec-Bench's per-prompt mean
    assert mean_accept == pytest.approx(spec.totals["new_tokens"] / spec.totals["target_forwards"])  # eta
    base_speed, base_accept = speed_py(tmp_path / "ans" / "llama70b_7b-vanilla.jsonl")
    assert base_accept == 1.0
    lines = [json.loads(x) for x in open(tmp_path / "ans" / "llama70b_7b-speculative.jsonl")]
    assert [a["question_id"] for a in lines] == sorted(p["prompt_id"] for p in spec.prompts)
    assert all(a["choices"][0]["turns"][0] for a in lines) and lines[0]["clock"] == "modelled"
    from ouroboros.prompts.sources import read_answers  # an answer file is a turn-2 run's `dataset.answers`

    texts = read_answers(str(tmp_path / "ans" / "llama70b_7b-vanilla.jsonl"))
    assert texts == {str(p["prompt_id"]): p["text"] for p in recs[0].prompts} and all(texts.values())


def test_cli_error(tmp_path, capsys):
    assert main([str(tmp_path / "none.jsonl"), "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: no records at")


def test_specbench_questions_decode_on_the_simulator(tmp_path):
    """A real question file on `sim`: the surrogate tokenizer encodes the questions' text (no chat template)."""
    from test_datasets import SPEC

    from simulators.corpus import load_corpus
    from simulators.simconfig import SimConfig

    recs = sweep_records(tmp_path / "r.jsonl", "sweep=single", "strategy=ouroboros", "dataset=specbench",
                         f"dataset.path={SPEC}", "dataset.limit=3",
                         base=["model=llama70b_7b", "max_new_tokens=16", "logger=quiet"])
    tok = load_corpus("code", 4096, SimConfig().pieces).tokenizer  # the surrogate's own pieces
    first = json.loads(open(SPEC).readline())
    assert [r.strategy for r in recs] == ["vanilla", "ouroboros"]
    for r in recs:
        assert r.backend == "sim" and len(r.prompts) == 3
        assert r.prompts[0]["prompt_len"] == len(tok(first["turns"][0])["input_ids"]) > 0
    assert recs[1].identical_to_baseline == "3/3"
