"""Workloads where reuse across requests matters (docs/workloads.md): their pure parts and their record loaders.

- Code edits (`dataset=codeedit`): from a HumanEval problem's prompt + canonical solution, an edit request whose
  answer repeats most of the code: `type_hints` (the code without its annotations, "add type hints"), `docstring`
  (without its docstrings, "add a docstring"), `rename` (a seeded choice of one of the entry point's variables and
  a new name for it), `comments` ("add a comment above each line"). `edit_request` is deterministic in its seed.
- Self-refinement (`dataset=selfrefine`): `REFINE` is the second user turn after the model's own first answer.
- The answers cache: turn-1 answers of a model live in `<cache>/workloads/<key>/<source>.jsonl`, one folder per
  (target model spec, dtype, answer budget) (`answers_key`), written by `python -m ouroboros.answers`.
- The record loaders (`mtbench_multiturn_records`, `selfrefine_records`, `codeedit_records`; the dataset kinds of
  `ouroboros.prompts.datasets.RECORD_LOADERS`): a dataset config's options -> `Record`s, from the packaged HumanEval /
  MT-Bench data and the answers cache; a request whose turn-1 answer is not cached yet awaits it (`Awaited`).

Knows nothing of tokenizers, models, the loop, Hydra or the selection of requests (ouroboros/prompts/datasets.py); reads
files only through ouroboros/prompts/sources.py and `read_meta`.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ouroboros.errors import OuroborosError
from ouroboros.fetch import default_cache_dir
from ouroboros.prompts.sources import (
    Awaited,
    Question,
    Record,
    humaneval_file,
    humaneval_records,
    mtbench_file,
    need_field,
    pick_categories,
    read_answers,
    read_jsonl,
    read_questions,
)

EDITS = ("type_hints", "docstring", "rename", "comments")
SOURCES = ("humaneval", "mtbench")     # where first answers come from (the packaged data)
ORDERS = ("source", "grouped", "shuffled")
# HumanEval's turn 1 as conf/dataset/humaneval.yaml renders it (the answers' prompt; selfrefine's first turn)
HUMANEVAL_TEMPLATE = "Complete the following Python function.\n\n```python\n{prompt}```"
REFINE = {
    "humaneval": "Review your solution above. Fix any mistakes and improve it, then reply with the complete "
                 "improved code.",
    "mtbench": "Review your answer above and improve it. Reply with the complete improved answer.",
}
# new names a rename may pick (one absent from the code, chosen by the seed)
NEW_NAMES = ("value", "item", "result", "total", "count", "current", "element", "entry", "data", "values",
             "acc", "tmp", "idx", "output", "number", "text", "pieces", "collected", "seen", "best")
# model fields that do not change the target's greedy answers: the draft, where files live, simulator sections
NOT_IN_KEY = ("draft", "draft_layers", "draft_noise", "cache_dir", "wheel_dir", "profile", "sim_profiles",
              "sim_category_profiles")
BUILD_COMMAND = "python -m ouroboros.answers"


# ----------------------------------------------------------------------------------------------- code edits
@dataclass(frozen=True)
class EditRequest:
    edit: str          # one of EDITS
    instruction: str
    code: str          # the code the request shows (ends with a newline)

    @property
    def text(self) -> str:
        return f"{self.instruction}\n\n```python\n{self.code}```"


def strip_annotations(code: str) -> str:
    """The code without parameter / return annotations (annotated assignments keep their value).
    Golden: "def f(x: int) -> int:\\n    return x\\n" -> "def f(x):\\n    return x\\n"."""
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node.returns = None
            a = node.args
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                if arg is not None:
                    arg.annotation = None
    return ast.unparse(tree) + "\n"


def strip_docstrings(code: str) -> str:
    """The code without its functions' docstrings (a body left empty gets `pass`)."""
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and ast.get_docstring(node) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree) + "\n"


def rename_candidates(code: str, entry_point: str) -> list[str]:
    """The entry point's parameters and the names it assigns (sorted; `_` and nested functions' names excluded)."""
    fn = next((n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.FunctionDef) and n.name == entry_point),
              None)
    if fn is None:
        return []
    a = fn.args
    names = {arg.arg for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg] if arg is not None}
    names |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    names -= {n.name for n in ast.walk(fn) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    return sorted(names - {"_"})


def all_names(code: str) -> set[str]:
    tree = ast.parse(code)
    out = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    out |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    out |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}
    return out


def edit_request(edit: str, code: str, entry_point: str, rng: random.Random) -> EditRequest | None:
    """One edit request on `code` (a HumanEval prompt + its canonical solution); None where the edit has nothing
    to work on (a rename in a function without variables). Golden: rename on "def f(a):\\n    b = a\\n    return
    b\\n" picks `a` or `b` and a new name from NEW_NAMES that the code does not use."""
    code = code.lstrip("\n")        # some HumanEval prompts open with blank lines
    if edit == "type_hints":
        return EditRequest(edit, "Add type hints to every function parameter and return value in the following "
                                 "Python code. Reply with the complete updated code only.", strip_annotations(code))
    if edit == "docstring":
        return EditRequest(edit, "Add a docstring to every function in the following Python code, with examples. "
                                 "Reply with the complete updated code only.", strip_docstrings(code))
    if edit == "rename":
        cands = rename_candidates(code, entry_point)
        if not cands:
            return None
        old = rng.choice(cands)
        used = all_names(code)
        new = rng.choice([n for n in NEW_NAMES if n not in used] or [f"{old}_renamed"])
        return EditRequest(edit, f"Rename the variable `{old}` to `{new}` in the function `{entry_point}` below. "
                                 "Reply with the complete updated code only.", code)
    if edit == "comments":
        return EditRequest(edit, "Add a short comment above each line of the function bodies in the following "
                                 "Python code, explaining it. Keep the code itself unchanged and reply with the "
                                 "complete commented code only.", code)
    raise ValueError(f"unknown edit {edit!r}")


def edit_rng(seed: int, task_id: str) -> random.Random:
    """A task's own stream (string seeds hash deterministically): its edits do not depend on the other tasks."""
    return random.Random(f"{seed}:{task_id}")


# -------------------------------------------------------------------------------------------- answers cache
def answers_key(model: dict[str, Any], dtype: str, tokens: int) -> str:
    """The cache folder name of a model's turn-1 answers: what can change the target's greedy output (its spec
    without the fields in NOT_IN_KEY, the dtype, the answer budget) -> '<kind>-<dtype>-<tokens>tok-<hash>'."""
    spec = {k: v for k, v in model.items() if k not in NOT_IN_KEY}
    digest = hashlib.sha1(json.dumps([spec, dtype, tokens], sort_keys=True, default=str).encode()).hexdigest()[:10]
    kind = str(model.get("kind") or "model").replace("/", "_")
    return f"{kind}-{dtype}-{tokens}tok-{digest}"


def answers_file(folder: str | Path, source: str) -> Path:
    return Path(folder) / f"{source}.jsonl"


def read_meta(folder: str | Path) -> dict[str, Any] | None:
    p = Path(folder) / "meta.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


# ------------------------------------------------------------------------- record loaders (RECORD_LOADERS)
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


def mtbench_multiturn_records(cfg: dict, seed: int) -> list[Record]:
    """MT-Bench's turn 2 after the model's own turn-1 answer (questions with two turns)."""
    folder, tokens = answers_folder(cfg, "mtbench_multiturn")
    path = mtbench_file(None)
    questions = pick_categories(read_questions(path), cfg.pop("categories", None), path, "mtbench_multiturn")
    answers = built_answers(folder, "mtbench")
    return [after_first_answer(folder, tokens, "mtbench", q, q.turns[1], answers)
            for q in questions if len(q.turns) >= 2]


def selfrefine_records(cfg: dict, seed: int) -> list[Record]:
    """Each source's first turn, the model's own answer, then `REFINE[source]`."""
    sources = str_list(cfg, "sources", SOURCES, "selfrefine")
    folder, tokens = answers_folder(cfg, "selfrefine")
    out = []
    for source in sources:
        answers = built_answers(folder, source)
        out += [after_first_answer(folder, tokens, source, q, REFINE[source], answers)
                for q in first_turns(source)]
    return out


def codeedit_records(cfg: dict, seed: int) -> list[Record]:
    """The `edits` of every HumanEval problem (prompt + canonical solution), each request its own record."""
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
