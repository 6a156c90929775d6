"""`make_pair(model, hardware, sim, seed)`: a simulated (target, draft) backend pair on one shared modelled clock,
from the plain dicts of the Hydra groups `model` (with its `profile:` section), `hardware` and `sim`.

Cost (which seconds each forward is charged), in order of precedence:
  1. sim.t_target_s / sim.t_draft_s: a user's measured single-token forward times (t_T, t_S); the shape in k
     and ctx comes from the spec-sheet model unless sim.shape == "flat";
  2. hardware.costs[<model name>]: a fitted cost model written by `python -m simulators.calibrate`;
  3. the spec-sheet roofline (`cost_model.from_spec`) of the model profile on the hardware profile.
Tokens (sim.tokens): `surrogate` (n-gram target + bursty draft), `iid` (draft agrees with probability
sim.alpha, i.i.d.), `replay` (sim.trace: a trace recorded by `simulators.replay`), `proxy` (sim.proxy_model:
a real pair loaded by `ouroboros.models.load_pair` decides the tokens).

Knows nothing of strategies or the loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ouroboros.backends.base import Backend, OuroborosError
from ouroboros.datasets import Prompt
from ouroboros.strategies import check_type
from simulators.backend import ProxyBackend, SimBackend, SimClock
from simulators.cost_model import CostModel, check_fits, from_spec, scaled_to
from simulators.hardware import Hardware
from simulators.profiles import PairProfile
from simulators.surrogate import IIDDraftLM, NGramLM, NoisyDraftLM
from simulators.tokens import MODES, prompt_tokenizer, real_tokenizer_dir

# The surrogate target's text knobs are the text prior (conf/sim/default.yaml says how it was fitted).
SIM_DEFAULTS: dict[str, Any] = {
    "tokens": "surrogate",        # surrogate | iid | replay | proxy
    "corpus": "code",             # surrogate corpus: code | pycode (stdlib packages only) | prose
    "vocab": 8192,                # surrogate vocabulary
    "pieces": "bpe",              # surrogate tokenizer: words (spaces apart) | bpe (words carry their leading space)
                                  # | real (the pair's own tokenizer: the surrogate speaks real token ids)
    "order": 4,                   # n-gram order of the surrogate target
    "p_top": 0.75,                # how often the surrogate target takes its table's top continuation
    "p_copy": 0.2,                # how often it copies what followed the last two tokens earlier (induction)
    "copy_window": 256,           # how far back it copies from (tokens)
    "induction": 0.2,             # match-length copying (0: off): P(copy | the last token alone matched earlier)
    "induction_decay": 1.0,       # ... P(copy | L matched) = 1 - (1 - induction) * induction_decay^(L - 1)
    "surprise_copy": 1.0,         # ... times this right after a token the target would not have written (1: off)
    "pos_grain": 16,              # its varied choices depend on the position in blocks of this many tokens
    "choice_ctx": 0,              # ... and on this many last tokens (0: all tail_len = 8)
    "local_frac": 0.2,            # share of contexts whose next token the last `local_ctx` tokens alone decide
    "local_ctx": 3,               # ... that many last tokens (1..order)
    "local_novel": False,         # ... only where those tokens did not occur earlier (phrases without loops)
    "forgive": 0.0,               # P(the target reads a wrong token as its own one and goes on as it would have)
    "forgive_run": 3,             # ... only after at least this many tokens it would have written itself
    "recall": 0.0,                # P(the target goes on with text it knows (recall_text) right after a wrong token)
    "recall_min": 6,              # ... where its last this many tokens occur in that text
    "recall_text": None,          # the text it knows: a REST datastore (.npz) in the simulator's token ids
    "alpha_easy": 0.92,           # surrogate draft agreement in easy stretches
    "alpha_hard": 0.45,           # ... in hard stretches
    "hard_frac": 0.25,            # fraction of positions in hard stretches
    "burst_len": 24,              # length of an easy / hard stretch (tokens)
    "p_shift": 0.5,               # share of mismatches that are "one token too early" (else the runner-up)
    "alpha_copy": None,           # draft agreement where the target copies by induction (null: as elsewhere)
    "alpha": 0.8,                 # iid draft agreement
    "dtype": "fp16",
    "placement": None,            # override the hardware's placement: single | pipeline | tensor
    "devices": None,              # override the hardware's device count
    "ctx": 4096,                  # context the memory check reserves KV for
    "t_target_s": None,           # measured t_T (seconds per single-token target forward)
    "t_draft_s": None,            # measured t_S
    "ctx_ref": 256,               # context at which t_T / t_S were measured
    "shape": "spec",              # shape of the measured cost in k and ctx: spec | flat
    "trace": None,                # replay: path of a recorded trace (JSON)
    "proxy_model": None,          # proxy: a model dict for ouroboros.models.load_pair
    "proxy_dtype": "float32",
    "target_overhead_s": None,    # fitted per-forward overhead of the target (s), replacing the hardware's estimated
    "draft_overhead_s": None,     # forward_overhead_s + layers x layer_overhead_s (spec-sheet cost only); ... draft's
    "prompt_tokens": "surrogate",  # how real prompts get tokens: surrogate | tokenizer | ratio (simulators/tokens.py)
    "tokenizer": None,            # prompt_tokens=tokenizer: a tokenizer directory (null: the pair's fetched one)
    "chars_per_token": None,      # prompt_tokens=ratio: characters per token measured with the pair's tokenizer
    "pair": None,                 # a calibration profile's pair (conf/model name); another model is refused
    "profile": None,              # a calibration profile's own name (conf/sim/<profile>.yaml)
    "fit": None,                  # a calibration profile's provenance: what it was fitted to, by which command
}


@dataclass
class SimPair:
    target: Backend
    draft: Backend
    clock: SimClock
    tokenizer: Any = None
    eos_ids: tuple[int, ...] = ()
    costs: dict[str, CostModel] = field(default_factory=dict)
    profile: PairProfile | None = None
    hardware: Hardware | None = None
    _prompt_fn: Callable[[int, int], list[Prompt]] | None = None

    def default_prompts(self, n: int, seed: int = 0) -> list[Prompt]:
        """n embedded prompts (no download); surrogate tokens only."""
        if self._prompt_fn is None:
            raise OuroborosError("this simulated pair has no embedded prompts (token source is not a surrogate)")
        return self._prompt_fn(n, seed)


# the types of the options unset (null) by default; every other option takes the type of its default
OPTIONAL_TYPES: dict[str, Any] = {"alpha_copy": float | None, "devices": int | None, "t_target_s": float | None,
                                  "t_draft_s": float | None, "target_overhead_s": float | None,
                                  "draft_overhead_s": float | None, "chars_per_token": float | None}


def sim_options(sim: dict[str, Any] | None) -> dict[str, Any]:
    opts = dict(SIM_DEFAULTS)
    for k, v in (sim or {}).items():
        if k not in SIM_DEFAULTS:
            raise OuroborosError(f"sim has no option {k!r}; options: {', '.join(sorted(SIM_DEFAULTS))}")
        opts[k] = v
    for k, default in SIM_DEFAULTS.items():
        hint = OPTIONAL_TYPES.get(k, type(default))
        if default is None and k not in OPTIONAL_TYPES:
            continue
        try:
            check_type(opts[k], hint)
        except TypeError as e:
            raise OuroborosError(f"sim.{k} must be {e}, got {opts[k]!r}") from None
    if opts["devices"] is not None and int(opts["devices"]) < 1:
        raise OuroborosError(f"sim.devices must be >= 1 (or null: the hardware profile's count), got {opts['devices']}")
    for k in ("target_overhead_s", "draft_overhead_s"):
        if opts[k] is not None and float(opts[k]) < 0:
            raise OuroborosError(f"sim.{k} must be >= 0, got {opts[k]}")
    if opts["prompt_tokens"] not in MODES:
        raise OuroborosError(f"sim.prompt_tokens must be one of {', '.join(MODES)}, got {opts['prompt_tokens']!r}")
    if opts["prompt_tokens"] == "ratio" and not (opts["chars_per_token"] and float(opts["chars_per_token"]) > 0):
        raise OuroborosError(f"sim.prompt_tokens=ratio needs sim.chars_per_token > 0, got {opts['chars_per_token']}")
    if opts["tokens"] not in ("surrogate", "iid", "replay", "proxy"):
        raise OuroborosError(f"unknown sim.tokens {opts['tokens']!r}; known: surrogate, iid, replay, proxy")
    return opts


def pair_costs(prof: PairProfile, hw: Hardware, opts: dict[str, Any]) -> dict[str, CostModel]:
    fitted = hw.costs or {}
    out = {}
    for side, m in (("target", prof.target), ("draft", prof.draft)):
        t1 = opts[f"t_{side}_s"]
        over = opts[f"{side}_overhead_s"]
        if over is not None:
            if t1 is not None or m.name in fitted:
                raise OuroborosError(f"sim.{side}_overhead_s replaces the spec-sheet cost's overheads; it cannot be "
                                     f"combined with a measured or fitted cost for {m.name}")
            out[side] = from_spec(m, replace(hw, forward_overhead_s=float(over), layer_overhead_s=0.0), opts["dtype"])
        elif t1 is not None:
            if opts["shape"] not in ("spec", "flat"):
                raise OuroborosError(f"sim.shape must be 'spec' or 'flat', got {opts['shape']!r}")
            base = from_spec(m, hw, opts["dtype"]) if opts["shape"] == "spec" else None
            out[side] = scaled_to(float(t1), base, int(opts["ctx_ref"]), name=f"{m.name}@{hw.name}/measured")
        elif m.name in fitted:
            out[side] = CostModel.from_dict({**fitted[m.name], "name": f"{m.name}@{hw.name}/fitted"})
        else:
            out[side] = from_spec(m, hw, opts["dtype"])
    return out


def pair_setup(model: dict[str, Any], hardware: dict[str, Any],
               sim: dict[str, Any] | None = None) -> tuple[dict[str, Any], PairProfile, Hardware, dict[str, Any]]:
    """(options, pair profile, hardware with its placement, cost models): everything `make_pair` checks before it
    builds a token source (the profile's pair, the placement, the memory fit, the cost models); cheap, so
    `ouroboros.config.validate` runs it for every point before anything is measured."""
    opts = sim_options(sim)
    prof = PairProfile.from_model_cfg(model)
    names = {prof.name, str(model.get("kind"))}
    if opts["pair"] is not None and opts["pair"] not in names | {n.replace("-", "_") for n in names}:
        own = ", ".join(sorted((model.get("sim_profiles") or {}).values())) or "none"
        raise OuroborosError(f"sim profile was fitted for pair {opts['pair']!r}, not for model {prof.name!r} (its "
                             f"profiles: {own}); set sim.pair=null to force it")
    hw = Hardware.from_dict(hardware)
    if opts["placement"] or opts["devices"]:
        hw = hw.with_placement(opts["placement"], opts["devices"])
    check_fits(prof.target, prof.draft, hw, opts["dtype"], int(opts["ctx"]))
    return opts, prof, hw, pair_costs(prof, hw, opts)


def check_serving_fit(model: dict[str, Any], hardware: dict[str, Any], sim: dict[str, Any] | None,
                      kv_tokens: int, concurrency: int, with_draft: bool) -> None:
    """Serving: the weights plus the KV caches of the `concurrency` largest requests decoding at once
    (`kv_tokens`: their prompt + budget tokens summed; the draft's too when the strategy runs it) must fit the
    machine's memory; else one line saying what would."""
    opts = sim_options(sim)
    prof = PairProfile.from_model_cfg(model)
    hw = Hardware.from_dict(hardware)
    if opts["placement"] or opts["devices"]:
        hw = hw.with_placement(opts["placement"], opts["devices"])
    try:
        check_fits(prof.target, prof.draft if with_draft else None, hw, opts["dtype"], kv_tokens)
    except OuroborosError as e:
        raise OuroborosError(f"serve.concurrency={concurrency}: the KV caches of {concurrency} requests at once "
                             f"({kv_tokens} tokens) do not fit: {e}") from None


def recall_memory(path: str | None) -> Any:
    """sim.recall_text: the REST datastore the surrogate target knows (loaded once per file), or None."""
    if not path:
        return None
    import os

    from ouroboros.datastore import Datastore

    full = os.path.abspath(os.path.expanduser(str(path)))
    key = (full, os.path.getmtime(full) if os.path.exists(full) else None)
    if key not in _MEMORIES:
        try:
            _MEMORIES[key] = Datastore.load(full)
        except OuroborosError as e:
            raise OuroborosError(f"sim.recall_text: {e}") from None
    return _MEMORIES[key]


_MEMORIES: dict[tuple[str, float | None], Any] = {}


def make_pair(model: dict[str, Any], hardware: dict[str, Any], sim: dict[str, Any] | None = None,
              seed: int = 0) -> SimPair:
    opts, prof, hw, costs = pair_setup(model, hardware, sim)
    clock = SimClock()
    kind = opts["tokens"]
    if kind in ("surrogate", "iid"):
        real_dir = str(real_tokenizer_dir(opts, model)) if opts["pieces"] == "real" else None
        lm = NGramLM(opts["corpus"], int(opts["vocab"]), int(opts["order"]), p_top=float(opts["p_top"]), seed=seed,
                     p_copy=float(opts["p_copy"]), copy_window=int(opts["copy_window"]), pieces=str(opts["pieces"]),
                     pos_grain=int(opts["pos_grain"]), choice_ctx=int(opts["choice_ctx"]),
                     local_frac=float(opts["local_frac"]), local_ctx=int(opts["local_ctx"]), tokenizer_dir=real_dir,
                     induction=float(opts["induction"]), induction_decay=float(opts["induction_decay"]),
                     surprise_copy=float(opts["surprise_copy"]), local_novel=bool(opts["local_novel"]),
                     forgive=float(opts["forgive"]), forgive_run=int(opts["forgive_run"]),
                     recall=float(opts["recall"]), recall_min=int(opts["recall_min"]),
                     memory=recall_memory(opts["recall_text"]))
        q: Any
        if kind == "iid":
            q = IIDDraftLM(lm, float(opts["alpha"]), seed=seed + 1)
        else:
            q = NoisyDraftLM(lm, float(opts["alpha_easy"]), float(opts["alpha_hard"]), float(opts["hard_frac"]),
                             int(opts["burst_len"]), p_shift=float(opts["p_shift"]), seed=seed + 1,
                             alpha_copy=None if opts["alpha_copy"] is None else float(opts["alpha_copy"]))
        ctx = min(prof.target.max_context, prof.draft.max_context)
        target = SimBackend(lm, costs["target"], clock, ctx, name=prof.target.name)
        draft = SimBackend(q, costs["draft"], clock, ctx, name=prof.draft.name)

        def prompts(n: int, s: int) -> list[Prompt]:
            return [Prompt(id=f"sim-{opts['corpus']}-{i}", ids=ids, category=opts["corpus"],
                           text=lm.corpus.tokenizer.decode(ids)) for i, ids in enumerate(lm.prompts(n, s))]

        tok = prompt_tokenizer(opts, model, lm.corpus.tokenizer)
        return SimPair(target, draft, clock, tok, (lm.corpus.tokenizer.eos_id,), costs, prof, hw, prompts)
    if kind == "replay":
        return replay_pair(opts, prof, hw, costs, clock)
    if kind == "proxy":
        return proxy_pair(opts, prof, hw, costs, clock)
    raise OuroborosError(f"unknown sim.tokens {kind!r}; known: surrogate, iid, replay, proxy")


def replay_pair(opts: dict[str, Any], prof, hw, costs, clock):
    """make_pair's `replay` token source: SimBackends answering from the trace at sim.trace."""
    from simulators.replay import TraceLM, load_trace, trace_lms, trace_prompts

    if not opts.get("trace"):
        raise OuroborosError("sim.tokens=replay needs sim.trace (a trace file recorded from a real run)")
    doc = load_trace(str(opts["trace"]))
    lms = trace_lms(doc)
    ctx = int(doc["models"]["target"]["max_context"])
    target = SimBackend(lms["target"], costs["target"], clock, ctx, name=prof.target.name)
    dlm = lms.get("draft", TraceLM({}, lms["target"].vocab_size))
    draft = SimBackend(dlm, costs["draft"], clock, ctx, name=prof.draft.name)
    for b in (target, draft):   # contexts answered two ways get the answer of the same forward
        b.lm.counters = b.counters  # type: ignore[attr-defined]
    recorded = trace_prompts(doc)

    def prompts(n: int, seed: int) -> list[Prompt]:
        return recorded[:n]

    return SimPair(target, draft, clock, None, tuple(doc.get("eos_ids", ())), costs, prof, hw, prompts)


def proxy_pair(opts: dict[str, Any], prof: PairProfile, hw: Hardware, costs: dict[str, CostModel],
               clock: SimClock) -> SimPair:
    from ouroboros.backends.hf import HFBackend
    from ouroboros.models import load_pair

    if not opts["proxy_model"]:
        raise OuroborosError("sim.tokens=proxy needs sim.proxy_model (a model config, e.g. the tiny pair)")
    real = load_pair(dict(opts["proxy_model"]), dtype=opts["proxy_dtype"])
    if real.draft is None:
        raise OuroborosError("sim.proxy_model has no draft model")
    target = ProxyBackend(HFBackend(real.target, name="proxy-target"), costs["target"], clock, prof.target.name)
    draft = ProxyBackend(HFBackend(real.draft, name="proxy-draft"), costs["draft"], clock, prof.draft.name)
    return SimPair(target, draft, clock, real.tokenizer, tuple(real.eos_ids), costs, prof, hw, None)
