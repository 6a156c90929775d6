"""`SimConfig`: every simulator option (`sim.<key>=<value>`), one frozen dataclass and its single source.

Each field carries its group, its doc (what real measurement or choice it stands for) and its valid range in its
metadata; `__post_init__` checks the ranges (one error line naming the valid range) and `from_dict` the names and
types of a Hydra `sim` group. conf/sim/default.yaml and the options table in docs/simulator.md are generated from it
(`python -m simulators write-options`; tests/test_sim_config.py checks that the committed files agree).

Options that no profile sets and that did not move held-out error went (`REMOVED`: the value the simulator keeps);
records written with them still load, and `from_dict(..., legacy=True)` drops them. Knows nothing of surrogates,
costs or strategies: it only describes and checks the options.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Any

from ouroboros.checks import in_range, range_words
from ouroboros.errors import OuroborosError

COPY_FROM = ("context", "prompt")
TAIL_LEN = 8     # tokens of context the surrogate target's choices read (its n-gram order is at most this)
P_SHIFT = 0.5    # share of the surrogate draft's mismatches that are "one token too early" (else the runner-up)
TOKEN_SOURCES = ("surrogate", "iid", "replay", "proxy")
PROMPT_TOKENS = ("surrogate", "tokenizer", "ratio")
CORPORA = ("code", "pycode", "prose")
PIECES = ("words", "bpe", "real")
PLACEMENTS = ("single", "pipeline", "tensor")
SHAPES = ("spec", "flat")

# group -> what its options describe (a header line in conf/sim/default.yaml and docs/simulator.md)
GROUPS = {
    "source": "where the token decisions come from",
    "prompts": "the simulator's own prompts (dataset=synthetic with surrogate tokens): the task they stand for, set "
               "by the run from dataset.task or the model YAML's default_task (simulators/trust.py)",
    "text": "the text prior: how the surrogate target writes and reads text. Fitted by `python -m simulators "
            "calibrate prior` to the real Qwen2.5-Coder pair's recorded greedy runs of HumanEval, GSM8K and MT-Bench "
            "(fit prompts only; no published figure); a profile fitted to a pair's own recordings overrides them",
    "draft": "draft agreement: how often the surrogate draft writes the target's token (a profile fits these to the "
             "pair's SpS block efficiency or to its recorded decisions)",
    "clock": "the clock: which seconds each forward is charged (simulators/cost_model.py)",
    "machine": "the machine the pair is placed on (overrides of the hardware profile; the memory check)",
    "provenance": "a calibration profile's identity and what it was fitted to (written by `python -m simulators "
                  "calibrate`)",
}


def opt(default: Any, group: str, doc: str, lo: float | None = None, hi: float | str | None = None,
        hi_open: bool = False, choices: tuple[Any, ...] | None = None) -> Any:
    """A SimConfig field: its default, group, doc and valid range (numbers: [lo, hi], or [lo, hi) with hi_open; hi
    may name another field; strings: one of `choices`; None is always valid for an optional field)."""
    return field(default=default, metadata={"group": group, "doc": doc, "lo": lo, "hi": hi, "hi_open": hi_open,
                                            "choices": choices})


@dataclass(frozen=True)
class SimConfig:
    # ------------------------------------------------------------------------------------------ source
    tokens: str = opt("surrogate", "source", "what decides the tokens: surrogate (the text prior and draft agreement "
                      "below) | iid (the draft agrees with probability alpha, i.i.d.) | replay (a real run's recorded "
                      "decisions, sim.trace) | proxy (a small real pair, sim.proxy_model)", choices=TOKEN_SOURCES)
    trace: str | None = opt(None, "source", "a real run's recorded trace (tokens=replay; JSON, simulators.replay): "
                            "the real pair's decisions, forward for forward")
    proxy_model: dict[str, Any] | None = opt(None, "source", "a small real pair deciding the tokens (tokens=proxy; a "
                                             "model dict for ouroboros.backends.models.load_pair); the clock "
                                             "charges the large one")
    proxy_dtype: str = opt("float32", "source", "the dtype the proxy pair runs in (tokens=proxy)")
    prompt_tokens: str = opt("surrogate", "source", "how real prompts get their tokens: surrogate (its own tokenizer) "
                             "| tokenizer (as many as the pair's real tokenizer gives, chat template included) | "
                             "ratio (len(text) / chars_per_token); simulators/tokens.py", choices=PROMPT_TOKENS)
    tokenizer: str | None = opt(None, "source", "the pair's tokenizer directory (prompt_tokens=tokenizer, "
                                "pieces=real; null: the fetched pair's)")
    chars_per_token: float | None = opt(None, "source", "characters per token (prompt_tokens=ratio): measured on "
                                        "the dataset with the pair's real tokenizer", lo=1e-9)
    by_category: dict[str, str] | None = opt(None, "source", "per prompt category (the dataset's own, e.g. MT-Bench's "
                                             "writing ... humanities), the profile whose text and draft options "
                                             "decide that category's prompts; others get these options: the real "
                                             "pair's block efficiency differs up to 1.6x between MT-Bench categories "
                                             "(docs/simulator.md); set from the model YAML's sim_category_profiles")
    # ------------------------------------------------------------------------------------------ own prompts
    task: str | None = opt(None, "prompts", "the task the simulator's own prompts stand for (null: none): its profile "
                           "decides their tokens, and they get its length and budget below; the run sets it from "
                           "dataset.task (none: no task) or the model YAML's default_task")
    prompt_len: int | None = opt(None, "prompts", "the simulator's own prompts' typical length (tokens): each is cut "
                                 "from the corpus at 0.75x to 1.25x of it, as `calibrate measured` cut its fit's; a "
                                 "measured profile holds its task's, the run sets the task's (null: 32 to 96 tokens)",
                                 lo=1)
    max_new_tokens: int | None = opt(None, "prompts", "the simulator's own prompts' new-token budget (null: the run's "
                                     "max_new_tokens): the run sets the task's (GSM8K 256, CNN/DM 128, WMT16 64, "
                                     "HumanEval 512) unless max_new_tokens is typed", lo=1)
    answer_len: int | None = opt(None, "prompts", "where the simulator's own prompts' answers end (tokens), as a "
                                 "task's real answers end at their EOS (translation's in tens of tokens, a chat "
                                 "answer's in hundreds): each prompt's budget is drawn log-uniform from 0.5x to 2x of "
                                 "it, at most the run's budget; a figures file's task holds the median its real "
                                 "answers were measured at (null: every prompt runs the whole budget)", lo=1)
    # ------------------------------------------------------------------------------------------ text prior
    corpus: str = opt("code", "text", "the text the target continues: code (stdlib top-level modules) | pycode "
                      "(stdlib packages only, none of REST's stdlib datastore) | prose (the interpreter's help "
                      "topics); a profile picks the one its task's recorded text behaves like", choices=CORPORA)
    vocab: int = opt(8192, "text", "surrogate vocabulary: the most frequent pieces of the corpus (pieces=real: "
                     "unused); fitted with the prior", lo=99)
    pieces: str = opt("bpe", "text", "surrogate tokenizer: words (spaces are pieces of their own) | bpe (words carry "
                      "their leading space: about 3-4 characters per token, as the real tokenizers measured give) | "
                      "real (the pair's own tokenizer: the surrogate reads and writes real ids)", choices=PIECES)
    order: int = opt(4, "text", "n-gram order of the target's back-off table: how many last tokens its ordinary "
                     "continuations rest on; not fitted, but it moves held-out error (docs/simulator.md)", lo=1,
                     hi=TAIL_LEN)
    p_top: float = opt(0.75, "text", "how often the target takes its back-off table's top continuation (else a "
                       "runner-up): the real pair's share of predictable tokens, fitted to its recorded runs",
                       lo=0.0, hi=1.0)
    p_copy: float = opt(0.2, "text", "how often it copies what followed its last two tokens earlier: real text's copy "
                        "rate (code 0.40, prose 0.32 on HumanEval / MT-Bench answers: check copy-rate); fitted "
                        "with the prior", lo=0.0, hi=1.0)
    copy_window: int = opt(256, "text", "how far back the target copies and matches from (tokens): the span of context "
                           "a real LM copies from; not fitted, but it moves held-out error (docs/simulator.md)", lo=3)
    copy_from: str = opt("context", "text", "what the target copies from (p_copy, induction): context (the prompt "
                         "and its own output) | prompt (the prompt's text only; a chat template's special tokens, "
                         "mapped to EOS, are never copied): 79% of the real pair's greedy HumanEval output 8-grams "
                         "occur in its prompt, none only earlier in the output (docs/simulator.md)",
                         choices=COPY_FROM)
    induction: float = opt(0.2, "text", "match-length copying (0: off; checked first): the longest earlier match of "
                           "the context's suffix (L tokens) is continued with P = 1 - (1 - induction) * "
                           "induction_decay^(L - 1), as the real pair copied its prompt (recorded runs)",
                           lo=0.0, hi=1.0, hi_open=True)
    induction_decay: float = opt(1.0, "text", "... longer matches are copied more surely when below 1 (1: the same "
                                 "P at every L): the real pair's copy rate by match length", lo=0.0, hi=1.0)
    surprise_copy: float = opt(1.0, "text", "... P scaled by 1 - (1 - surprise_copy) / 2^k, k steps after a token the "
                               "target would not have written (1: off): the real pair copied about half as often "
                               "right after a wrong draft token", lo=0.0, hi=1.0)
    pos_grain: int = opt(16, "text", "its varied choices (runner-up, copy) hash the position in blocks of this many "
                         "tokens (1: every position): a real LM continues a phrase the same way a few tokens later "
                         "(the Jacobi and pool hit rates of the recorded runs)", lo=1)
    choice_ctx: int = opt(0, "text", f"... and this many last tokens (0: all {TAIL_LEN}): a real LM's choice rests "
                          "mostly on the last few tokens, so a guess made after a wrong token is still right",
                          lo=0, hi=TAIL_LEN)
    local_frac: float = opt(0.2, "text", "share of contexts whose next token their last local_ctx tokens alone decide: "
                            "a real LM's confident continuations, right after a wrong earlier token too (the recorded "
                            "Jacobi-cell and drafter hit rates)", lo=0.0, hi=1.0)
    local_ctx: int = opt(3, "text", "... that many last tokens", lo=1, hi="order")
    local_novel: bool = opt(False, "text", "... only where those tokens are new in the context, so the text never "
                            "loops (a recurring context follows the other rules)")
    loop_guard: bool = opt(False, "text", "the target never writes a span of up to 16 tokens a third time back to "
                           "back: real greedy text does not cycle (0.5% of the real pair's tokens; docs/simulator.md); "
                           "off where a profile was fitted before it (the prior, its recordings not refitted since)")
    self_guard: bool = opt(False, "text", "the target never writes an 8-gram its output already holds unless its "
                           "prompt does: real greedy text restates its prompt but does not repeat itself (none of the "
                           "real pair's HumanEval output 8-grams, 0.9% of its MT-Bench ones; docs/simulator.md)")
    topic: float = opt(0.0, "text", "how often, where its back-off table would decide, the target instead goes on "
                       "as its answer's topic passage does (topic_len corpus tokens its prompt picks; 0: off): real "
                       "answers to different prompts share few phrases (cross4: 0.7% of the real pair's MT-Bench "
                       "answer 4-grams occur in an earlier answer), one n-gram table alone writes the same ones",
                       lo=0.0, hi=1.0)
    topic_len: int = opt(2048, "text", "... the passage's length (tokens)", lo=16)
    forgive: float = opt(0.0, "text", "how often the target reads a token it would not have written (a wrong draft or "
                         "Jacobi guess) as its own and goes on as it would have (0: off): the real pair's Jacobi "
                         "guesses stay right after a wrong cell", lo=0.0, hi=1.0)
    forgive_run: int = opt(3, "text", "... only after at least this many tokens it would have written itself (not in "
                           "prompts)", lo=1)
    recall: float = opt(0.0, "text", "how often, right after a token it would not have written, it goes on with text "
                        "it knows (recall_text; without it, off): Qwen2.5-Coder-1.5B predicts REST's stdlib datastore "
                        "at 55% top-1, so a real target keeps agreeing with a REST draft past its first wrong token",
                        lo=0.0, hi=1.0)
    recall_min: int = opt(6, "text", "... where its last this many tokens occur in that text", lo=1, hi=TAIL_LEN)
    recall_text: str | None = opt(None, "text", "the text it knows: a REST datastore (.npz, python -m ouroboros."
                                  "rest_datastore) in the simulator's ids, e.g. the run's strategy.params.datastore; "
                                  "check / calibrate decisions give a REST run its own")
    # ------------------------------------------------------------------------------------------ draft agreement
    alpha_easy: float = opt(0.92, "draft", "surrogate draft agreement in easy stretches", lo=0.0, hi=1.0)
    alpha_hard: float = opt(0.45, "draft", "... in hard stretches", lo=0.0, hi=1.0)
    hard_frac: float = opt(0.25, "draft", "share of positions in hard stretches", lo=0.0, hi=1.0)
    burst_len: int = opt(24, "draft", "length of an easy / hard stretch (tokens): how bursty the real pair's "
                         "mismatches are (its per-position acceptance)", lo=1)
    alpha_copy: float | None = opt(None, "draft", "draft agreement where the target copies by induction (null: the "
                                   "stretches'): the real pair's draft agreed on every copied HumanEval token",
                                   lo=0.0, hi=1.0)
    alpha: float = opt(0.8, "draft", "the draft's i.i.d. agreement (tokens=iid): Leviathan et al.'s alpha, for "
                       "their closed form", lo=0.0, hi=1.0, hi_open=True)
    # ------------------------------------------------------------------------------------------ clock
    dtype: str = opt("fp16", "clock", "weights' dtype: bytes read per parameter and the memory check")
    t_target_s: float | None = opt(None, "clock", "a measured t_T, seconds per single-token target forward (null: from "
                                   "the cost model)", lo=1e-12)
    t_draft_s: float | None = opt(None, "clock", "a measured t_S, likewise", lo=1e-12)
    ctx_ref: int = opt(256, "clock", "context at which t_T / t_S were measured", lo=0)
    shape: str = opt("spec", "clock", "shape in k and ctx of a measured t_T / t_S: spec (the spec-sheet model's) | "
                     "flat", choices=SHAPES)
    target_overhead_s: float | None = opt(None, "clock", "the target's per-forward overhead (s), replacing the "
                                          "hardware's estimate: a profile's fit to the pair's vanilla token/s", lo=0.0)
    draft_overhead_s: float | None = opt(None, "clock", "... the draft's: a profile's fit to its SpS token/s", lo=0.0)
    # ------------------------------------------------------------------------------------------ machine
    placement: str | None = opt(None, "machine", "override the hardware's placement: single | pipeline (device_map="
                                "auto) | tensor", choices=PLACEMENTS)
    devices: int | None = opt(None, "machine", "override the hardware's device count", lo=1)
    ctx: int = opt(4096, "machine", "context the memory check reserves KV cache for (tokens)", lo=0)
    # ------------------------------------------------------------------------------------------ provenance
    pair: str | None = opt(None, "provenance", "a profile's pair (conf/model name); running it with another model is "
                           "an error")
    profile: str | None = opt(None, "provenance", "a profile's own name (conf/sim/<profile>.yaml): records name it as "
                              "their decisions' source")
    fit: dict[str, Any] | None = opt(None, "provenance", "a profile's provenance: the inputs of its fit, the command, "
                                     "the commit")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check_option(f, getattr(self, f.name), self)
        if self.prompt_tokens == "ratio" and self.chars_per_token is None:
            raise OuroborosError("sim.prompt_tokens=ratio needs sim.chars_per_token > 0, got None")

    @classmethod
    def from_dict(cls, sim: dict[str, Any] | None, legacy: bool = False) -> SimConfig:
        """A Hydra `sim` group (or any subset of it) as a SimConfig: unknown keys and wrong types are one error line.
        legacy: drop the keys of options that were removed (REMOVED), as records written with them hold them."""
        hints, out = type_hints(), {}
        for k, v in (sim or {}).items():
            if k not in hints:
                if legacy and k in REMOVED:
                    continue
                gone = f" (removed; the simulator keeps {REMOVED[k]!r})" if k in REMOVED else ""
                raise OuroborosError(f"sim has no option {k!r}{gone}; options: {', '.join(sorted(hints))}")
            out[k] = checked_type(k, v, hints[k])
        return cls(**out)

    def as_dict(self) -> dict[str, Any]:
        """Every option by name (the shape of conf/sim/default.yaml)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


# Options that went: no profile set them and they did not move held-out error by a point (docs/simulator.md gives
# what each measured); the value the simulator keeps for each. Records written with them still load
# (`from_dict(legacy=True)`).
REMOVED: dict[str, Any] = {"p_shift": P_SHIFT}


@functools.cache
def type_hints() -> dict[str, Any]:
    return typing.get_type_hints(SimConfig)


def summary(name: str) -> str:
    """An option's doc up to its first ": " outside parentheses (what it is, without what it models)."""
    doc, depth = SimConfig.__dataclass_fields__[name].metadata["doc"], 0
    for i, ch in enumerate(doc):
        depth += (ch == "(") - (ch == ")")
        if ch == ":" and depth == 0 and doc[i + 1: i + 2] == " ":
            return doc[:i]
    return doc


def checked_type(name: str, value: Any, hint: Any) -> Any:
    from ouroboros.strategies import check_type

    if hint in (dict[str, Any], dict[str, Any] | None):   # nested dicts (a model config, a provenance block)
        if value is None or isinstance(value, dict):
            return value
        raise OuroborosError(f"sim.{name} must be a mapping, got {value!r}")
    if hint == dict[str, str] | None:   # names by name (by_category)
        if value is None or isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                            for k, v in value.items()):
            return None if value is None else dict(value)
        raise OuroborosError(f"sim.{name} must be a mapping of names to names, got {value!r}")
    try:
        return check_type(value, hint)
    except TypeError as e:
        raise OuroborosError(f"sim.{name} must be {e}, got {value!r}") from None


def range_in_words(f: dataclasses.Field, cfg: SimConfig | None = None) -> str:
    """The field's numeric range as ouroboros.checks words it ("in [0, 1)", ">= 1", "> 0"; a `hi` naming another
    field reads "in [1, order]", or "in [1, order=3]" given the config). A tiny positive `lo` stands for "> 0"."""
    m = f.metadata
    lo, hi, hi_name = m["lo"], m["hi"], None
    if isinstance(hi, str):
        hi_name, hi = hi, (getattr(cfg, hi) if cfg is not None else None)
    positive = lo is not None and 0 < lo < 1e-6
    return range_words(0 if positive else lo, hi, lo_open=positive, hi_open=m["hi_open"], hi_name=hi_name)


def valid_range(f: dataclasses.Field) -> str:
    """The field's valid values in words ("" when any value of its type is)."""
    m = f.metadata
    if m["choices"]:
        return " | ".join(map(str, m["choices"]))
    return "" if m["lo"] is None else range_in_words(f).removeprefix("in ")


def check_option(f: dataclasses.Field, v: Any, cfg: SimConfig) -> None:
    m = f.metadata
    if v is None or isinstance(v, (bool, dict)):
        return
    if m["choices"]:
        if v not in m["choices"]:
            raise OuroborosError(f"unknown sim.{f.name} {v!r}; known: {', '.join(m['choices'])}")
        return
    hi = getattr(cfg, m["hi"]) if isinstance(m["hi"], str) else m["hi"]
    if not in_range(v, m["lo"], hi, hi_open=m["hi_open"]):
        raise OuroborosError(f"sim.{f.name} must be {range_in_words(f, cfg)}, got {v}")
