"""`make_pair(model, hardware, sim, seed)`: a simulated (target, draft) backend pair on one shared modelled clock,
from the plain dicts of the Hydra groups `model` (with its `profile:` section), `hardware` and `sim`.

Cost (which seconds each forward is charged), in order of precedence:
  1. sim.t_target_s / sim.t_draft_s: a user's measured single-token forward times (t_T, t_S); the shape in k
     and ctx comes from the spec-sheet model unless sim.shape == "flat";
  2. hardware.costs[<model name>]: a fitted cost model written by `python -m simulators calibrate clock`;
  3. the spec-sheet roofline (`cost_model.from_spec`) of the model profile on the hardware profile;
plus, per decode step, the strategy's host time where hardware.proposer_costs has the pair's target (host.py).
Tokens (sim.tokens): `surrogate` (n-gram target + bursty draft), `iid` (draft agrees with probability
sim.alpha, i.i.d.), `replay` (sim.trace: a trace recorded by `simulators.replay`), `proxy` (sim.proxy_model:
a real pair loaded by `ouroboros.backends.models.load_pair` decides the tokens). A surrogate pair's own prompts
(`default_prompts`, what a synthetic dataset decodes on the simulator) are cut from its corpus, 0.75x to 1.25x
sim.prompt_len tokens long (`prompt_span`: how `calibrate measured` cuts a task's; without it 32 to 96), each with
sim.max_new_tokens new tokens where set (a task stand-in: simulators/trust.py), or, with sim.answer_len, its answer
ending near that many (`answer_budgets`: a task's real answers end at their EOS).

Knows nothing of strategies or the loop.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ouroboros.backends.base import Backend
from ouroboros.errors import OuroborosError
from ouroboros.prompts.datasets import Prompt
from simulators.architectures import PairProfile
from simulators.backend import ProxyBackend, SimBackend, SimClock
from simulators.cost_model import CostModel, check_fits, from_spec, scaled_to
from simulators.hardware import Hardware
from simulators.host import HostCharging, HostTimes, check_strategies
from simulators.simconfig import SimConfig
from simulators.stand_in import rest_stand_in as stand_in
from simulators.stand_in import target_knows
from simulators.surrogate import IIDDraftLM, NGramLM, NoisyDraftLM
from simulators.tokens import prompt_tokenizer, real_tokenizer_dir

# Every option at its default, by name (derived from SimConfig: conf/sim/default.yaml is generated from it too).
SIM_DEFAULTS: dict[str, Any] = SimConfig().as_dict()


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
    # sim.by_category: category -> (profile name, its target and draft token sources); `route` assigns the prompts
    by_category: dict[str, tuple[str, Any, Any]] = field(default_factory=dict)

    def route(self, prompts: Sequence[Prompt]) -> dict[str, int]:
        """Each prompt of a category that sim.by_category names is decided by that category's profile (target and
        draft both); the others by the run's options. Returns profile name -> prompts it decides."""
        counts: dict[str, int] = {}
        for p in prompts:
            if p.category in self.by_category:
                name, lm, q = self.by_category[p.category]
                for backend, source in ((self.target, lm), (self.draft, q)):
                    assert isinstance(backend, SimBackend)
                    backend.routes[tuple(p.ids)] = source
                counts[name] = counts.get(name, 0) + 1
        return counts

    def default_prompts(self, n: int, seed: int = 0) -> list[Prompt]:
        """n embedded prompts (no download); surrogate tokens only."""
        if self._prompt_fn is None:
            raise OuroborosError("this simulated pair has no embedded prompts (token source is not a surrogate)")
        return self._prompt_fn(n, seed)


def prompt_span(prompt_len: int | None) -> tuple[int, int]:
    """(shortest, longest) tokens of the simulator's own prompts: 0.75x to 1.25x sim.prompt_len (at least 8), as
    `calibrate measured` cuts its fit's (simulators/lab/calibration/paper_fit.py task_prompts); the surrogate's 32 to 96
    without one."""
    if prompt_len is None:
        return 32, 96
    return max(8, round(0.75 * prompt_len)), max(8, round(1.25 * prompt_len))


ANSWER_SPREAD = 2.0   # the simulator's own answers end between answer_len / this and answer_len x this


def answer_budgets(n: int, seed: int, answer_len: int | None, cap: int | None) -> list[int | None]:
    """Each of n own prompts' new-token budget: where its answer ends when sim.answer_len is set (a task's real
    answers end at their EOS, short or long by task): log-uniform from answer_len / ANSWER_SPREAD to answer_len x
    ANSWER_SPREAD (so the median is answer_len), seeded, at most `cap` (the run's budget); without answer_len
    `cap` for all (None: the run's). `calibrate measured` cuts its fit's the same way
    (simulators/lab/calibration/paper_fit.py)."""
    if answer_len is None:
        return [cap] * n
    rng = random.Random(f"answer_len {seed} {answer_len}")
    out: list[int | None] = []
    for _ in range(n):
        length = max(1, round(answer_len * ANSWER_SPREAD ** rng.uniform(-1.0, 1.0)))
        out.append(length if cap is None else min(cap, length))
    return out


def prompts_for(n: int, answer_len: int | None, budget: int) -> int:
    """How many own prompts a measurement of a task takes to decode as many new tokens as n prompts at its whole
    budget would, where its answers end near answer_len (at most 16 x n): short answers need more prompts for the
    same precision (`calibrate measured`'s fit, `calibrate bands`' sweeps)."""
    if not answer_len or answer_len >= budget:
        return n
    return min(16 * n, max(n, -(-n * budget // answer_len)))


def sim_options(sim: dict[str, Any] | SimConfig | None) -> SimConfig:
    """The `sim` group as a checked SimConfig (unknown keys, types and ranges are one error line)."""
    return sim if isinstance(sim, SimConfig) else SimConfig.from_dict(sim)


def pair_costs(prof: PairProfile, hw: Hardware, opts: SimConfig) -> dict[str, CostModel]:
    fitted = hw.costs or {}
    out = {}
    for side, m in (("target", prof.target), ("draft", prof.draft)):
        t1 = getattr(opts, f"t_{side}_s")
        over = getattr(opts, f"{side}_overhead_s")
        if over is not None:
            if t1 is not None or m.name in fitted:
                raise OuroborosError(f"sim.{side}_overhead_s replaces the spec-sheet cost's overheads; it cannot be "
                                     f"combined with a measured or fitted cost for {m.name}")
            out[side] = from_spec(m, replace(hw, forward_overhead_s=float(over), layer_overhead_s=0.0), opts.dtype)
        elif t1 is not None:
            base = from_spec(m, hw, opts.dtype) if opts.shape == "spec" else None
            out[side] = scaled_to(float(t1), base, int(opts.ctx_ref), name=f"{m.name}@{hw.name}/measured")
        elif m.name in fitted:
            out[side] = CostModel.from_dict({**fitted[m.name], "name": f"{m.name}@{hw.name}/fitted"})
        else:
            out[side] = from_spec(m, hw, opts.dtype)
    return out


# What a category's profile decides (sim.by_category): its text prior and draft agreement; the source, clock and
# machine stay the run's. Its surrogate must read the prompts' ids as the run's does: these options are shared.
ROUTED_GROUPS = ("text", "draft")
SHARED_TEXT = ("corpus", "vocab", "pieces", "tokenizer")


def category_options(opts: SimConfig) -> dict[str, SimConfig]:
    """sim.by_category as category -> the options that category's prompts are decided with: the run's, with the
    named profile's text and draft options wherever the run has its own profile's (or, with none, the default) value:
    a sim.<key> typed on the command line wins on every prompt. Unknown profiles, another pair's, one whose
    surrogate would read the prompt ids otherwise, and a token source other than the surrogate are one error line."""
    if not opts.by_category:
        return {}
    from simulators.sim_profiles import check_profile_name, load_profile

    if opts.tokens not in ("surrogate", "iid"):
        raise OuroborosError(f"sim.by_category picks a surrogate's options per prompt category; sim.tokens="
                             f"{opts.tokens} decides every prompt from its own source: set sim.by_category=null")
    base = {**SIM_DEFAULTS, **(load_profile(opts.profile) if opts.profile else {})}
    routed = [f.name for f in dataclasses.fields(SimConfig) if f.metadata["group"] in ROUTED_GROUPS]
    made: dict[str, SimConfig] = {}
    for name in sorted(set(opts.by_category.values())):
        check_profile_name(name)
        prof = {**SIM_DEFAULTS, **load_profile(name)}
        if opts.pair is not None and prof.get("pair") != opts.pair:
            raise OuroborosError(f"sim.by_category names profile {name!r} of pair {prof.get('pair')!r}; this run's "
                                 f"options are pair {opts.pair!r}'s")
        own = opts.as_dict()
        cat = sim_options({**own, **{k: prof[k] for k in routed if own[k] == base[k]},
                           "profile": name, "fit": prof.get("fit"), "by_category": None})
        differ = [f"{k} {getattr(cat, k)!r} there, {getattr(opts, k)!r} here" for k in SHARED_TEXT
                  if getattr(cat, k) != getattr(opts, k)]
        if differ:
            raise OuroborosError(f"sim.by_category: profile {name!r} reads prompt ids otherwise than this run's "
                                 f"options ({'; '.join(differ)}); a category profile must share them")
        made[name] = cat
    return {c: made[n] for c, n in opts.by_category.items()}


def specials_eos(opts: SimConfig) -> bool:
    """Whether prompts read the real tokenizer's special tokens as the surrogate's EOS (`RealCountTokenizer`): where
    the run's options or any sim.by_category profile copy from the prompt (sim.copy_from=prompt), so that no
    surrogate copies a chat template's tokens into its answer. One rule for every prompt: a prompt's ids are read
    before its category routes it."""
    return opts.copy_from == "prompt" or any(o.copy_from == "prompt" for o in category_options(opts).values())


def pair_setup(model: dict[str, Any], hardware: dict[str, Any], sim: dict[str, Any] | SimConfig | None = None
               ) -> tuple[SimConfig, PairProfile, Hardware, dict[str, Any]]:
    """(options, pair profile, hardware with its placement, cost models): everything `make_pair` checks before it
    builds a token source (the profile's pair, the placement, the memory fit, the cost models); cheap, so
    `ouroboros.config.validate` runs it for every point before anything is measured."""
    opts = sim_options(sim)
    prof = PairProfile.from_model_cfg(model)
    names = {prof.name, str(model.get("kind"))}
    if opts.pair is not None and opts.pair not in names | {n.replace("-", "_") for n in names}:
        own = ", ".join(sorted((model.get("sim_profiles") or {}).values())) or "none"
        raise OuroborosError(f"sim profile was fitted for pair {opts.pair!r}, not for model {prof.name!r} (its "
                             f"profiles: {own}); set sim.pair=null to force it")
    hw = Hardware.from_dict(hardware)
    check_strategies(hw.name, hw.proposer_costs)
    if opts.placement or opts.devices:
        hw = hw.with_placement(opts.placement, opts.devices)
    check_fits(prof.target, prof.draft, hw, opts.dtype, opts.ctx)
    category_options(opts)
    return opts, prof, hw, pair_costs(prof, hw, opts)


def check_source(sim: dict[str, Any] | SimConfig | None, strategy: str) -> None:
    """A trace of a run's outputs only (`simulators trace`) decides exactly the strategies whose drafts depend on
    the context alone; any other would read filler answers off the output path as if they were the target's."""
    from ouroboros.strategies import REGISTRY, get_spec
    from simulators.replay import outputs_only

    opts = sim_options(sim)
    if opts.tokens != "replay" or not opts.trace or getattr(get_spec(strategy), "context_only", False):
        return
    if outputs_only(str(opts.trace)):
        ok = ", ".join(n for n, spec in REGISTRY.items() if spec.context_only)
        raise OuroborosError(f"sim.trace {opts.trace} holds only a real run's outputs: strategy {strategy!r} drafts "
                             "from predictions off them (a draft model's, the target's Jacobi or top-k ones); it "
                             f"replays {ok}; record {strategy} with `python -m simulators check clock`")


def check_serving_fit(model: dict[str, Any], hardware: dict[str, Any], sim: dict[str, Any] | SimConfig | None,
                      kv_tokens: int, concurrency: int, with_draft: bool) -> None:
    """Serving: the weights plus the KV caches of the `concurrency` largest requests decoding at once
    (`kv_tokens`: their prompt + budget tokens summed; the draft's too when the strategy runs it) must fit the
    machine's memory; else one line saying what would."""
    opts = sim_options(sim)
    prof = PairProfile.from_model_cfg(model)
    hw = Hardware.from_dict(hardware)
    if opts.placement or opts.devices:
        hw = hw.with_placement(opts.placement, opts.devices)
    try:
        check_fits(prof.target, prof.draft if with_draft else None, hw, opts.dtype, kv_tokens)
    except OuroborosError as e:
        raise OuroborosError(f"serve.concurrency={concurrency}: the KV caches of {concurrency} requests at once "
                             f"({kv_tokens} tokens) do not fit: {e}") from None


def recall_memory(path: str | None) -> Any:
    """sim.recall_text: the REST datastore the surrogate target knows (loaded once per file), or None."""
    if not path:
        return None
    import os

    from ouroboros.strategies.datastore import Datastore

    full = os.path.abspath(os.path.expanduser(str(path)))
    key = (full, os.path.getmtime(full) if os.path.exists(full) else None)
    if key not in _MEMORIES:
        try:
            _MEMORIES[key] = Datastore.load(full)
        except OuroborosError as e:
            raise OuroborosError(f"sim.recall_text: {e}") from None
    return _MEMORIES[key]


_MEMORIES: dict[tuple[str, float | None], Any] = {}


def make_pair(model: dict[str, Any], hardware: dict[str, Any], sim: dict[str, Any] | SimConfig | None = None,
              seed: int = 0, rest_stand_in: bool = False, budget: int | None = None) -> SimPair:
    """`rest_stand_in`: the pair serves a REST run on the simulator's stand-in datastore (simulators/stand_in.py);
    with sim.recall on and no sim.recall_text its target knows the stand-in's text. `budget`: the run's new-token
    budget, which caps where the own prompts' answers end (sim.answer_len)."""
    opts, prof, hw, costs = pair_setup(model, hardware, sim)
    pair = _make_pair(opts, prof, hw, costs, model, seed, rest_stand_in, budget)
    if isinstance(pair.target, HostCharging):   # the strategies' measured host time, charged per step (host.py)
        pair.target.host = HostTimes.of(hw, prof.target.name)
    return pair


def _make_pair(opts: SimConfig, prof: PairProfile, hw: Hardware, costs: dict[str, CostModel], model: dict[str, Any],
               seed: int, rest_stand_in: bool, budget: int | None = None) -> SimPair:
    clock = SimClock()
    kind = opts.tokens
    if kind in ("surrogate", "iid"):
        real_dir = str(real_tokenizer_dir(opts.tokenizer, model)) if opts.pieces == "real" else None
        memory = recall_memory(opts.recall_text)
        if rest_stand_in and target_knows(opts):
            memory = stand_in(opts, model).datastore
        lm = NGramLM(opts, seed=seed, memory=memory, tokenizer_dir=real_dir)
        q: Any = (IIDDraftLM if kind == "iid" else NoisyDraftLM)(lm, opts, seed=seed + 1)
        ctx = min(prof.target.max_context, prof.draft.max_context)
        target = SimBackend(lm, costs["target"], clock, ctx, name=prof.target.name)
        draft = SimBackend(q, costs["draft"], clock, ctx, name=prof.draft.name)
        per_cat = category_options(opts)
        sources: dict[str, tuple[str, Any, Any]] = {}
        for cat_opts in per_cat.values():   # one token source per category profile
            name = str(cat_opts.profile)
            if name not in sources:
                c_lm = NGramLM(cat_opts, seed=seed, memory=memory, tokenizer_dir=real_dir)
                sources[name] = (name, c_lm, (IIDDraftLM if kind == "iid" else NoisyDraftLM)(c_lm, cat_opts,
                                                                                            seed=seed + 1))
        by_category = {c: sources[str(o.profile)] for c, o in per_cat.items()}

        def prompts(n: int, s: int) -> list[Prompt]:
            ends = answer_budgets(n, s, opts.answer_len, opts.max_new_tokens or budget)
            return [Prompt(id=f"sim-{opts.corpus}-{i}", ids=ids, max_new_tokens=ends[i] if opts.answer_len else
                           opts.max_new_tokens, category=opts.corpus, text=lm.corpus.tokenizer.decode(ids))
                    for i, ids in enumerate(lm.prompts(n, s, *prompt_span(opts.prompt_len)))]

        tok = prompt_tokenizer(opts, model, lm.corpus.tokenizer, specials_eos(opts))
        return SimPair(target, draft, clock, tok, (lm.corpus.tokenizer.eos_id,), costs, prof, hw, prompts, by_category)
    if kind == "replay":
        return replay_pair(opts, prof, hw, costs, clock)
    return proxy_pair(opts, prof, hw, costs, clock)


def replay_pair(opts: SimConfig, prof: PairProfile, hw: Hardware, costs: dict[str, CostModel], clock: SimClock
                ) -> SimPair:
    """make_pair's `replay` token source: SimBackends answering from the trace at sim.trace."""
    from simulators.replay import TraceLM, load_trace, trace_lms, trace_prompts

    if not opts.trace:
        raise OuroborosError("sim.tokens=replay needs sim.trace (a trace file recorded from a real run)")
    doc = load_trace(str(opts.trace))
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


def proxy_pair(opts: SimConfig, prof: PairProfile, hw: Hardware, costs: dict[str, CostModel],
               clock: SimClock) -> SimPair:
    from ouroboros.backends.hf import HFBackend
    from ouroboros.backends.models import load_pair

    if not opts.proxy_model:
        raise OuroborosError("sim.tokens=proxy needs sim.proxy_model (a model config, e.g. the tiny pair)")
    real = load_pair(dict(opts.proxy_model), dtype=opts.proxy_dtype)
    if real.draft is None:
        raise OuroborosError("sim.proxy_model has no draft model")
    target = ProxyBackend(HFBackend(real.target, name="proxy-target"), costs["target"], clock, prof.target.name)
    draft = ProxyBackend(HFBackend(real.draft, name="proxy-draft"), costs["draft"], clock, prof.draft.name)
    return SimPair(target, draft, clock, real.tokenizer, tuple(real.eos_ids), costs, prof, hw, None)
