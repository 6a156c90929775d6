"""Trace record / replay: token decisions recorded from a real run, replayed under another machine's clock.

A trace maps every context a model was asked about to its greedy prediction. Contexts are keyed by
(length, rolling 64-bit hash of the whole token sequence), so a tree of n nodes costs n hash steps.
`Recorder` wraps a real backend (e.g. `hf`) and records each `score`; `TraceLM` is the TokenModel that answers
from the table. Replaying the SAME strategy with the SAME options on the same prompts asks exactly the recorded
questions, so the simulated run makes the real run's decisions forward for forward (same k, same ctx); other
strategies are lossless too, but contexts never recorded get a deterministic filler token.

File format (JSON): {"meta": {...}, "prompts": [{"id", "ids", "max_new_tokens"}], "eos_ids": [...],
"models": {"target": {"vocab_size", "max_context", "conflicts", "entries": [[length, hash, pred], ...]},
            "draft": {...}}}
(conflicts: answers that differed from the same context's earlier one, a bf16 near-tie between forwards of
different shapes; such an entry goes on with forward, answer, forward, answer, ...: see TraceLM).

Knows nothing of costs or strategies.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any

from ouroboros.backends.base import Backend, BackendWrapper, Scores
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.loop.draft import Draft
from ouroboros.prompts.datasets import Prompt

_MASK64 = (1 << 64) - 1


def mix(h: int, token: int) -> int:
    """Rolling hash of a token sequence: h(seq + [t]) = mix(h(seq), t) (splitmix64 finaliser)."""
    z = (h ^ ((token + 1) * 0x9E3779B97F4A7C15)) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


class TraceLM:
    """TokenModel answering from a recorded table; an unrecorded context gets the filler 1 + hash mod (V - 1).

    `history` holds the contexts the recording saw answered two ways (a bf16 near-tie between forwards of
    different shapes): key -> [(forward, answer), ...], each answer from the recorded forward on (1-based count
    of its model's forwards; the first answer's is 0: it holds until the first change). With `counters` (the
    replaying backend's, set by the replay pair) such a context gets the answer of the same forward, so the
    replay makes the real run's decisions even there."""

    def __init__(self, table: dict[tuple[int, int], int], vocab_size: int,
                 history: dict[tuple[int, int], list[tuple[int, int]]] | None = None):
        self.table = table
        self.vocab_size = vocab_size
        self.history = history or {}
        self.counters: Any = None
        self.misses = 0

    def start(self) -> tuple[int, int]:
        return (0, 0)

    def step(self, state: tuple[int, int], token: int) -> tuple[int, int]:
        return (state[0] + 1, mix(state[1], token))

    def predict(self, state: tuple[int, int]) -> int:
        out = self.table.get(state)
        if out is None:
            if self.history and state in self.history:
                return self._answer_at(self.history[state])
            self.misses += 1
            return 1 + state[1] % (self.vocab_size - 1)
        return out

    def _answer_at(self, answers: list[tuple[int, int]]) -> int:
        now = self.counters.forwards if self.counters is not None else answers[-1][0]
        out = answers[0][1]
        for f, pred in answers:
            if f > now:
                break
            out = pred
        return out


class Recorder(BackendWrapper):
    """Wraps a real backend; every prediction it makes is written to `table` under its context key."""

    def __init__(self, inner: Backend):
        super().__init__(inner)
        self.table: dict[tuple[int, int], int] = {}
        self.lm = TraceLM(self.table, inner.vocab_size)
        self.forwards = 0                      # this recorder's score() calls (the replay's forward index)
        self.history: dict[tuple[int, int], list[tuple[int, int]]] = {}  # contexts answered two ways (TraceLM)
        self._states: list[tuple[int, int]] = [self.lm.start()]

    @property
    def clock(self):
        return self.inner.clock

    def _extend(self, tokens: list[int]) -> None:
        st, step = self._states[-1], self.lm.step
        for t in tokens:
            st = step(st, t)
            self._states.append(st)

    def prefill(self, prompt: list[int]) -> None:
        self.inner.prefill(prompt)
        self._states = [self.lm.start()]
        self._extend(list(prompt))

    def score(self, draft: Draft, want_logits: bool = False) -> Scores:
        out = self.inner.score(draft, want_logits)
        self.forwards += 1
        root = self._states[-1]
        self._put(root, out.preds[0])
        states: list[tuple[int, int]] = []
        for i, (t, p) in enumerate(zip(draft.tokens, draft.parents, strict=True)):
            st = self.lm.step(states[p] if p >= 0 else root, t)
            states.append(st)
            self._put(st, out.preds[i + 1])
        return out

    @property
    def conflicts(self) -> int:
        """Answers that differed from the same context's previous one."""
        return sum(len(h) - 1 for h in self.history.values())

    def _put(self, key: tuple[int, int], pred: int) -> None:
        old = self.table.get(key)
        if old is not None and old != pred:  # the first answer holds until the forward that changed it
            self.history.setdefault(key, [(0, old)]).append((self.forwards, pred))
        self.table[key] = pred

    def commit(self, path: list[int], new_tokens: list[int]) -> None:
        self.inner.commit(path, new_tokens)
        self._extend(new_tokens)

    def rollback(self, n: int) -> None:
        self.inner.rollback(n)
        del self._states[len(self.inner.tokens) + 1:]

    def append(self, tokens: list[int]) -> None:
        self.inner.append(tokens)
        self._extend(tokens)


def save_trace(path: str, recorders: dict[str, Recorder], prompts: list[Prompt], eos_ids: tuple[int, ...],
               meta: dict[str, Any] | None = None) -> None:
    models = {name: {"vocab_size": r.vocab_size, "max_context": r.max_context, "conflicts": r.conflicts,
                     "entries": [[k[0], k[1], v, *_flat(r.history.get(k, ()))] for k, v in r.table.items()]}
              for name, r in recorders.items()}
    doc = {"meta": meta or {}, "eos_ids": list(eos_ids), "models": models,
           "prompts": [{"id": p.id, "ids": p.ids, "max_new_tokens": p.max_new_tokens} for p in prompts]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)


def load_trace(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise OuroborosError(f"trace file {path!r} not found (record one with simulators.replay.Recorder)") from None
    except json.JSONDecodeError as e:
        raise OuroborosError(f"trace file {path!r} is not valid JSON: {e.msg} at line {e.lineno}") from None
    if "target" not in doc.get("models", {}):
        raise OuroborosError(f"trace file {path!r} has no target model table")
    return doc


def outputs_only(path: str) -> bool:
    """Whether the trace at `path` holds only a run's outputs (`trace_outputs`). Read once per file version: every
    point's check and every record's decision source ask, and a recorded trace can be megabytes."""
    try:
        return _outputs_only(path, os.stat(path).st_mtime_ns)
    except FileNotFoundError:
        load_trace(path)   # its one-line error
        raise


@functools.lru_cache(maxsize=16)
def _outputs_only(path: str, mtime_ns: int) -> bool:
    return load_trace(path).get("meta", {}).get("source") == "outputs"


def _flat(answers) -> list[int]:
    return [x for fp in answers for x in fp]


def trace_lms(doc: dict[str, Any]) -> dict[str, TraceLM]:
    """One TraceLM per recorded model; an entry longer than [length, hash, pred] (pred: the last answer) goes on
    with the (forward, answer) pairs of a context answered two ways."""
    out = {}
    for name, m in doc["models"].items():
        table = {(e[0], e[1]): e[2] for e in m["entries"] if len(e) == 3}
        history = {(e[0], e[1]): list(zip(e[3::2], e[4::2], strict=True)) for e in m["entries"] if len(e) > 3}
        out[name] = TraceLM(table, int(m["vocab_size"]), history)
    return out


def trace_prompts(doc: dict[str, Any]) -> list[Prompt]:
    return [Prompt(id=p["id"], ids=p["ids"], max_new_tokens=p.get("max_new_tokens")) for p in doc["prompts"]]


# each recorded run's warm-up decode (on the first prompt) before its prompts: the traces hold that warm-up's
# contexts, so it is the recordings' own constant, not the harness' WARMUP_TOKENS (8), which a replay could not answer
WARMUP_TOKENS = 4
# what a recorded run's rows say (`warmup`) when its warm-up decode ran on a throw-away proposer (the harness since
# record schema 2): nothing of it reached the measured proposer, so a replay skips it; rows without it replay it
ISOLATED = "isolated"


def replays_warmup(row: dict[str, Any]) -> bool:
    """Whether a recorded run (its first row) was warmed up on its measured proposer, so a replay warms up too."""
    return row.get("warmup") != ISOLATED


def warm_up(pair, proposer, first_prompt: list[int], tokens: int = WARMUP_TOKENS) -> None:
    """Replay the warm-up of a run recorded before the harness warmed up on a throw-away proposer: one
    `tokens`-token decode of the first prompt with the same proposer, whose state carried its effect (a pool with
    history, the hf draft-length schedule), then the runner's checkpoint."""
    decode(pair.target, proposer, first_prompt, tokens, pair.eos_ids, prompt_id="warmup")
    proposer.checkpoint()


def trace_name(label: str) -> str:
    return "trace-" + re.sub(r"[^A-Za-z0-9_.=-]+", "_", label) + ".json"
