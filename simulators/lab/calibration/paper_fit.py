"""The fit to a pair's published (or measured) vanilla and speculative (SpS) figures, per task (`calibrate`): what
`python -m simulators calibrate measured` writes as profiles and `python -m simulators check paper` predicts from.

(1) the cost is the spec-sheet roofline of each model on the machine plus one fitted per-forward overhead each (the
target's so simulated vanilla token/s equals the published one; the draft's r x the task's target overhead, one r
for all tasks by least squares in log SpS token/s; draft_overhead="shared": one draft overhead for all tasks);
(2) the surrogate draft's agreement knob (`agreement`) so simulated SpS block efficiency equals the published one;
(3) the SpS draft length, which the paper does not print: sps="hf" (the default) is transformers' assisted-generation
schedule, as the official SpS baseline uses (starts at 5, +2 after a fully accepted draft, else -1); sps="tuned", the
fixed gamma per task that maximises simulated SpS token/s. (2), (3) and the draft overhead are solved on an exact
fast replay of greedy SpS on the surrogate's agreement trace (`sps_plan`), checked against the loop (`run`).
Figures not given (`Task.inferred`; simulators/lab/figures.py): vanilla token/s, from a speedup alone, is the roofline
at the hardware profile's estimated target overhead (`estimated_overheads`); an SpS block efficiency is inferred as the
agreement whose replayed SpS token/s at the fitted overheads equals the given one (`infer_agreement`), the draft
overhead then set by the tasks with a given eta (least squares, as above), else by the setting's mean accepted tokens
(`fit_to_mean`: the inferred etas pool to it), else at the hardware profile's estimated draft / target ratio; each
inferred eta's spread is how far it moves over the draft overhead x RATIO_SPREAD.

Published figures: conf/calibration/yi34b_6b_a800x2.yaml (arXiv 2402.13720, Tables 1-3, and the official
repository's README for CNN/DM and WMT16 token/s). Knows nothing of real models, of tables or of the command line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.strategies import build_proposer, get_spec
from simulators.architectures import load_conf
from simulators.cost_model import CostModel
from simulators.lab.figures import YI_FIGURES, Task, load_tasks
from simulators.pair import answer_budgets, make_pair, prompts_for

METHODS = ("vanilla", "speculative", "lookahead", "ouroboros")
DRAFT_OVERHEADS = ("scaled", "shared")   # the draft's per-forward overhead: r x the task's target one, or one for all
GAMMA_MAX = 20                   # largest SpS draft length the tuned-baseline prior considers


TASKS, _ = load_tasks(YI_FIGURES)   # the paper's Yi-34B/6B figures (conf/calibration/, with their citation)


def base_hardware(name: str = "a800x2", roofline_p: float = 0.0, measured: bool = False) -> dict[str, Any]:
    """The hardware profile with its ESTIMATED per-forward overheads (and any fitted cost models) removed:
    calibration puts fitted overheads in their place on the spec-sheet roofline. `measured` (`measured_clock`): the
    pair's forwards were timed on that machine, so its cost fits stay and are the fit's clock, as they are a run's.
    roofline_p: the roofline's shape (0: the profile's sharp one; cost_model's doc)."""
    hw = {**load_conf("hardware", name), "forward_overhead_s": 0.0, "layer_overhead_s": 0.0}
    if not measured:
        hw["costs"] = None
    return {**hw, "roofline_p": roofline_p} if roofline_p else hw


def agreement(a: float) -> dict[str, float]:
    """One knob for the surrogate draft's agreement: easy stretches agree with rate a, hard ones a^4."""
    return {"alpha_easy": a, "alpha_hard": a**4}


def task_pair(task: Task, a: float, seed: int):
    copy = {} if task.p_copy is None else {"p_copy": task.p_copy}
    hw = base_hardware(task.hardware, task.roofline_p, measured_clock(task))
    return make_pair(load_conf("model", task.model), hw,
                     {"corpus": task.corpus, **copy, **dict(task.text), **dict(task.machine), **agreement(a)},
                     seed=seed)


def measured_clock(task: Task) -> bool:
    """The hardware profile holds measured cost fits of both of the pair's models (`calibrate clock`): its forwards
    already cost what they cost there, fixed overheads included, so a profile adds no overhead of its own."""
    from simulators.architectures import PairProfile
    from simulators.hardware import Hardware

    costs = Hardware.from_dict(load_conf("hardware", task.hardware)).costs or {}
    prof = PairProfile.from_model_cfg(load_conf("model", task.model))
    return prof.target.name in costs and prof.draft.name in costs


def estimated_overheads(task: Task) -> tuple[float, float]:
    """The hardware profile's ESTIMATED per-forward overheads (s) of the pair's target and draft (forward + layers x
    layer overhead, what `base_hardware` removes): the target's stands in for a vanilla token/s not given."""
    from simulators.architectures import PairProfile
    from simulators.hardware import Hardware

    hw = Hardware.from_dict(load_conf("hardware", task.hardware))
    prof = PairProfile.from_model_cfg(load_conf("model", task.model))
    return (hw.forward_overhead_s + prof.target.layers * hw.layer_overhead_s,
            hw.forward_overhead_s + prof.draft.layers * hw.layer_overhead_s)


# `--text decisions`: the surrogate TARGET's text knobs (how the task's text and a real LM continuing it behave:
# copying, runner-up choices, locality) come from the decision profiles fitted to the real Qwen2.5-Coder pair's
# recorded greedy runs on a task of the same kind (simulators/lab/decisions/stats.py); the DRAFT's agreement is still
# fitted to the Yi pair's own SpS figures. No published figure enters these knobs.
TEXT_KNOBS = ("corpus", "induction", "induction_decay", "surprise_copy", "p_copy", "p_top", "pos_grain", "choice_ctx",
              "local_frac", "local_ctx", "local_novel", "forgive", "forgive_run", "vocab", "pieces")
CODE_CORPORA = ("code", "pycode")   # the corpora a code task may run on (pycode: stdlib packages, not REST's modules)
TEXT_PROFILES = {"HumanEval": "qwen_coder_humaneval", "MBPP": "qwen_coder_humaneval", "GSM8K": "qwen_coder_gsm8k",
                 "CNN/DM": "qwen_coder_mtbench", "WMT16": "qwen_coder_mtbench"}
TEXT_BY_CORPUS = {"prose": "qwen_coder_mtbench", "code": "qwen_coder_humaneval", "pycode": "qwen_coder_humaneval"}
# ... a task of another name (Spec-Bench's categories): its corpus' decision profile


def text_profile(task: Task) -> str:
    """The task's own `text_profile` (a figures file may name one), else by its name, else by its corpus."""
    return task.text_profile or TEXT_PROFILES.get(task.name) or TEXT_BY_CORPUS[task.corpus]


def text_knobs(task: Task, source: str) -> tuple[tuple[str, Any], ...]:
    """The surrogate target's text knobs for `task` from `source` ("none": the defaults; "decisions": the task
    kind's decision profile, TEXT_PROFILES). A profile of the same task brings its fitted corpus whatever its kind
    (the real pair answers GSM8K in code-like text); one of another task must be of the same kind."""
    if source == "none":
        return ()
    if source != "decisions":
        raise OuroborosError(f"--text must be none or decisions, got {source!r}")
    from simulators.sim_profiles import load_profile

    prof = load_profile(text_profile(task))
    same_task = str((prof.get("fit") or {}).get("task", "")).lower() == task.name.lower()
    if not same_task and (prof.get("corpus", task.corpus) in CODE_CORPORA) != (task.corpus in CODE_CORPORA):
        raise OuroborosError(f"{text_profile(task)} was fitted on the {prof['corpus']} corpus, "
                             f"{task.name} runs on {task.corpus}")
    return tuple((k, prof[k]) for k in TEXT_KNOBS if k in prof)


def task_prompts(pair, task: Task, n: int, seed: int) -> list[list[int]]:
    """n surrogate prompts cut from the task's corpus, 0.75x to 1.25x the task's typical prompt length (more where
    the task's answers end early: as many new tokens as n at its budget, `prompts_for`)."""
    return pair.target.lm.prompts(prompts_for(n, task.answer_len, task.max_new), seed,
                                  max(8, round(0.75 * task.prompt_len)), round(1.25 * task.prompt_len))


def task_budgets(task: Task, n: int, seed: int) -> list[int]:
    """Each of the n prompts' new tokens: where its answer ends with the task's `answer_len` (as a run's own
    prompts end, simulators.pair.answer_budgets), else the task's budget."""
    return [int(b or task.max_new) for b in answer_budgets(n, seed, task.answer_len, task.max_new)]


@dataclass
class Run:
    """Totals over a task's prompts. Seconds are charged at the overhead-free cost; `tps` adds the overheads."""
    new_tokens: int
    steps: int                   # target forwards after prefill (block efficiency = new tokens / steps)
    target_s: float
    draft_s: float
    target_fw: int               # target forwards, prefill included
    draft_fw: int                # draft forwards, prefill included

    @property
    def eta(self) -> float:
        return self.new_tokens / max(self.steps, 1)

    def tps(self, over_t: float, over_d: float) -> float:
        return self.new_tokens / (self.target_s + over_t * self.target_fw + self.draft_s + over_d * self.draft_fw)


def run(task: Task, strategy: str, params: dict[str, Any], a: float, n_prompts: int, seed: int) -> Run:
    """The real thing: the decode loop on the simulated pair, one proposer per task (Ouroboros keeps history).
    strategy "speculative" with params {"schedule": "hf"} is transformers' schedule, starting at 5 tokens."""
    pair = task_pair(task, a, seed)
    needs = get_spec(strategy).needs_draft_model
    if strategy == "speculative" and params.get("schedule") == "hf":
        params = {"gamma": 5, **params}  # transformers' num_assistant_tokens starts at 5
    proposer = build_proposer(strategy, params, pair.target, pair.draft if needs else None)
    new = steps = 0
    prompts = task_prompts(pair, task, n_prompts, seed)
    for p, budget in zip(prompts, task_budgets(task, len(prompts), seed), strict=True):
        res = decode(pair.target, proposer, p, budget, pair.eos_ids)
        new += res.new_tokens
        steps += len(res.steps)
    t, d = pair.target, pair.draft
    return Run(new, steps, t.busy_s, d.busy_s, t.counters.forwards + len(prompts),  # type: ignore[attr-defined]
               d.counters.forwards + (len(prompts) if needs else 0), )  # type: ignore[attr-defined]


def method_runs(t: Task, a: float, sps: str, n_prompts: int, seed: int, on=run) -> dict[str, Run]:
    """Speculative (at the SpS setting `sps`), lookahead and Ouroboros at the task's held-out settings (W = G, N,
    gamma, K), agreement knob `a`; `on(task, strategy, params, a, n_prompts, seed)` runs one."""
    return {"speculative": on(t, "speculative", {"schedule": "hf"} if sps == "hf" else {"gamma": int(sps)}, a,
                              n_prompts, seed),
            "lookahead": on(t, "lookahead", {"W": t.W, "N": t.N, "G": t.W}, a, n_prompts, seed),
            "ouroboros": on(t, "ouroboros", {"gamma": t.gamma, "W": t.W, "N": t.N, "G": t.W, "K": t.K}, a, n_prompts,
                            seed)}


# ------------------------------------------------------------------------------------- fast SpS replay
class Trace:
    """A task's target greedy paths (independent of the draft) and, per agreement knob, where the draft agrees."""

    def __init__(self, task: Task, n_prompts: int, seed: int):
        pair = task_pair(task, 0.5, seed)
        self.task, self.seed = task, seed
        self.costs: dict[str, CostModel] = pair.costs
        lm = pair.target.lm  # type: ignore[attr-defined]
        self.prompt_lens: list[int] = []
        self.states: list[list[Any]] = []   # per prompt: the target's state before each new token
        prompts = task_prompts(pair, task, n_prompts, seed)
        for p, budget in zip(prompts, task_budgets(task, len(prompts), seed), strict=True):
            st = lm.start()
            for t in p:
                st = lm.step(st, t)
            st = lm.begin(st, p)   # as a run's prefill ends (simulators/backend.py): its answer and the prompt's key
            sts = []
            for _ in range(budget):
                sts.append(st)
                st = lm.step(st, lm.predict(st))
            self.prompt_lens.append(len(p))
            self.states.append(sts)
        self._runs: dict[float, list[list[int]]] = {}
        self._plans: dict[tuple[float, str], Run] = {}

    def plan(self, a: float, setting: str) -> Run:
        """`sps_plan` with its costs, kept per (a, setting): a plan does not depend on the overheads."""
        key = (a, setting)
        if key not in self._plans:
            self._plans[key] = sps_plan(self, a, setting)
        return self._plans[key]

    def runs(self, a: float) -> list[list[int]]:
        """Per prompt and position: how many consecutive positions from there the draft's greedy token equals the
        target's (the surrogate draft is content-bound, so this is exactly what greedy SpS accepts, capped)."""
        out = self._runs.get(a)
        if out is None:
            pair = task_pair(self.task, a, self.seed)
            p_lm, q_lm = pair.target.lm, pair.draft.lm  # type: ignore[attr-defined]
            out = []
            for sts in self.states:
                r = [0] * (len(sts) + 1)
                for i in range(len(sts) - 1, -1, -1):
                    r[i] = r[i + 1] + 1 if q_lm.predict(sts[i]) == p_lm.predict(sts[i]) else 0
                out.append(r[:-1])
            self._runs[a] = out
        return out


def sps_plan(trace: Trace, a: float, setting: str, with_cost: bool = True) -> Run:
    """Greedy SpS replayed on the agreement trace, mirroring the loop step by step: the draft proposes
    min(gamma, remaining - 1) tokens (its first forward feeds 2 pending tokens after the first step), the target
    scores 1 pending + the draft, accepts the agreeing prefix and adds one token. `setting`: "hf" (the HF
    schedule of `speculative` with schedule=hf, kept across prompts) or a fixed draft length as a string ("7")."""
    hf = setting == "hf"
    gamma = 5 if hf else int(setting)
    ct, cd = trace.costs["target"], trace.costs["draft"]
    new = steps = t_fw = d_fw = 0
    t_s = d_s = 0.0
    for plen, runs in zip(trace.prompt_lens, trace.runs(a), strict=True):
        if with_cost:
            t_s += ct.forward_s(plen - 1, 0, logits=1)  # prefills keep the last row's logits
            d_s += cd.forward_s(plen - 1, 0, logits=1)
        t_fw += 1
        d_fw += 1
        pos, pending = 0, 1
        n = len(runs)
        while pos < n:
            g = min(gamma, n - pos - 1)
            m = min(runs[pos], g)
            if hf:
                gamma = gamma + 2 if m == gamma else max(1, gamma - 1)
            if with_cost:
                ctx = plen - 1 + pos
                if g:
                    d_s += cd.forward_s(pending, ctx + 1 - pending, logits=1) + (g - 1) * cd.forward_s(1, ctx + 1)
                t_s += ct.forward_s(1 + g, ctx)
            d_fw += g
            t_fw += 1
            steps += 1
            pos += m + 1
            new += m + 1
            pending = 2
    return Run(new, steps, t_s, d_s, t_fw, d_fw)


def fit_agreement(trace: Trace, setting: str, eta: float, iters: int = 18) -> float | None:
    """Bisection on the agreement knob until replayed SpS block efficiency = `eta`; None if out of reach (the
    surrogate draft's agreements only grow with the knob, so block efficiency is monotone in it)."""
    if sps_plan(trace, 1.0, setting, with_cost=False).eta < eta:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(iters):
        mid = (lo + hi) / 2
        if sps_plan(trace, mid, setting, with_cost=False).eta < eta:
            lo = mid
        else:
            hi = mid
    return hi


def infer_agreement(trace: Trace, setting: str, over_t: float, over_d: float, tps: float,
                    iters: int = 18) -> tuple[float, Run]:
    """Bisection on the agreement knob until replayed SpS token/s at these overheads = `tps`: (knob, plan), the
    closer of the bracket's ends. Where the token/s is out of reach the knob stops at 0 or 1; the caller's residual
    check says so. SpS token/s grows with the knob (more accepted, fewer target forwards), in steps."""
    lo, hi = 0.0, 1.0
    if trace.plan(hi, setting).tps(over_t, over_d) < tps:
        return hi, trace.plan(hi, setting)
    for _ in range(iters):
        mid = (lo + hi) / 2
        if trace.plan(mid, setting).tps(over_t, over_d) < tps:
            lo = mid
        else:
            hi = mid
    # the knob moves the agreements in steps: the closer of the two ends
    return min(((x, trace.plan(x, setting)) for x in (lo, hi)), key=lambda xp: abs(math.log(xp[1].tps(over_t, over_d)
                                                                                              / tps)))


# How far one task's draft overhead strays from a ratio shared by the tasks, as factors on that ratio: the Yi-34B/6B
# fit's per-task ratios (each task's own SpS token/s alone, `own_ratios`: WMT16 0.568 .. GSM8K 1.08) over its shared
# 0.799 (16 prompts, seed 0; tests/test_sim_calibrate_published.py measures them again). An inferred block efficiency
# is given with how far it moves across r x these (`Calibration.spread`).
RATIO_SPREAD = (0.711, 1.352)
ROOFLINE = "hardware roofline: the spec-sheet cost plus the hardware profile's estimated per-forward overhead"
MEASURED_CLOCK = "the hardware profile's measured clock (calibrate clock: forwards timed on that machine)"


@dataclass
class Calibration:
    sps: str                     # "hf" (HF assisted-generation schedule) or "tuned" (best fixed gamma per task)
    over_t: dict[str, float]     # per task: target per-forward overhead (s), from vanilla token/s
    over_d: dict[str, float]     # per task: draft per-forward overhead (s), from SpS token/s (`calibrate`)
    setting: dict[str, str]      # per task: SpS draft-length setting ("hf" or a fixed gamma)
    a: dict[str, float]          # per task: agreement knob
    vanilla: dict[str, Run]
    plans: dict[str, dict[str, tuple[float, Run]]]
    ratio: float | None = None   # draft_overhead="scaled": draft overhead / target overhead, shared by the tasks
    tasks: tuple[Task, ...] = ()  # the tasks as fitted: what was not given filled in (Task.inferred says how)
    spread: dict[str, float] = field(default_factory=dict)  # per task with an inferred eta: its relative uncertainty
    reach: dict[str, tuple[float, float]] = field(default_factory=dict)  # ... its SpS token/s with a draft that never
    #                                                                     agrees and with one that always does
    alternatives: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # per task with an inferred
    #                              eta: (draft overhead factor, agreement knob) at each end of RATIO_SPREAD: the fits
    #                              the SpS figures allow as well
    draft_from: str = "fit"      # how the draft overhead was set: "fit" (least squares in log SpS token/s over the
    #                              tasks with eta and SpS figures), "mean" (the setting's mean accepted tokens) or
    #                              "hardware" (the hardware profile's estimated draft / target overhead)

    def overheads(self) -> str:
        """The fitted draft overheads, for a table's header line."""
        d = self.over_d
        if self.ratio is not None:
            return f"draft per-forward overhead {self.ratio:.3f} x the target's"
        if len(set(d.values())) == 1:
            return f"draft per-forward overhead {next(iter(d.values())) * 1e3:.1f} ms"
        return "draft per-forward overhead ms " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in d.items())


def calibrate(n_prompts: int, seed: int, sps: str = "hf", tasks: tuple[Task, ...] = TASKS,
              draft_overhead: str = "scaled") -> Calibration:
    """Fit the overheads, the agreement knobs and (sps="tuned") the SpS draft lengths; see the module doc.
    draft_overhead: "scaled" (r x each task's target overhead, one r) or "shared" (one draft overhead)."""
    if draft_overhead not in DRAFT_OVERHEADS:
        raise OuroborosError(f"draft overhead must be one of {', '.join(DRAFT_OVERHEADS)}, got {draft_overhead!r}")
    over_t: dict[str, float] = {}
    vanilla: dict[str, Run] = {}
    plans: dict[str, dict[str, tuple[float, Run]]] = {}
    traces: dict[str, Trace] = {}      # the tasks whose SpS block efficiency is inferred
    fitted: list[Task] = []
    for t in tasks:
        v = run(t, "vanilla", {}, 0.5, n_prompts, seed)
        if t.vanilla_tps:
            over = (v.new_tokens / t.vanilla_tps - v.target_s) / v.target_fw
            if over < 0:
                raise OuroborosError(f"{t.name}: the spec-sheet cost alone on {t.hardware} is slower than the measured "
                                     f"vanilla speed ({t.vanilla_tps} tok/s): check the figures and the hardware "
                                     "profile")
        else:   # a speedup alone: vanilla at the hardware profile's estimated overhead
            over = estimated_overheads(t)[0]
            how = MEASURED_CLOCK if measured_clock(t) else ROOFLINE
            t = replace(t, vanilla_tps=v.tps(over, 0.0), inferred=(*t.inferred, ("vanilla_tok_s", how)))
        if t.sps_speedup is not None:
            t = replace(t, sps_tps=t.sps_speedup * t.vanilla_tps)
        over_t[t.name], vanilla[t.name] = over, v
        trace = Trace(t, n_prompts, seed)
        plans[t.name] = {}
        if not t.sps_eta:
            if sps != "hf":
                raise OuroborosError(f"{t.name}: sps={sps} tunes the SpS draft length to a given block efficiency; "
                                     "this task gives none")
            traces[t.name] = trace
            fitted.append(t)
            continue
        settings = [t.sps] if sps == "hf" else [str(g) for g in range(max(1, math.ceil(t.sps_eta) - 1), GAMMA_MAX + 1)]
        for st in settings:
            a = fit_agreement(trace, st, t.sps_eta)
            if a is not None:
                plans[t.name][st] = (a, sps_plan(trace, a, st))
        if not plans[t.name]:
            raise OuroborosError(f"{t.name}: published SpS block efficiency {t.sps_eta} is out of reach")
        fitted.append(t)
    tasks = tuple(fitted)

    scaled = draft_overhead == "scaled"
    given = tuple(t for t in tasks if t.name not in traces)
    mean = next((t.mean_eta for t in tasks if t.mean_eta is not None), None)
    # the hardware's estimated draft overhead (ratio to the target's when scaled); a measured clock (`calibrate
    # clock`: every fixed cost is in its fits) has none to add
    est_t, est_d = estimated_overheads(tasks[0])   # the pair and hardware are the tasks'
    estimate = 0.0 if measured_clock(tasks[0]) else est_d / est_t if scaled else est_d
    if traces and mean is not None:
        x = fit_to_mean(plans, traces, over_t, tasks, scaled, mean, estimate)
        draft_from = "mean"
    elif any(t.sps_tps for t in given):
        x, draft_from = fit_draft_overhead(plans, over_t, given, scaled), "fit"
    else:
        x, draft_from = estimate, "hardware"
    over_d = {t.name: x * over_t[t.name] if scaled else x for t in tasks}
    spread: dict[str, float] = {}
    alternatives: dict[str, list[tuple[float, float]]] = {}
    reach: dict[str, tuple[float, float]] = {}
    for i, t in enumerate(tasks):
        if t.name in traces:
            reach[t.name] = (traces[t.name].plan(0.0, t.sps).tps(over_t[t.name], over_d[t.name]),
                             traces[t.name].plan(1.0, t.sps).tps(over_t[t.name], over_d[t.name]))
            plans[t.name][t.sps] = infer_agreement(traces[t.name], t.sps, over_t[t.name], over_d[t.name],
                                                   float(t.sps_tps or 0.0))
            eta = plans[t.name][t.sps][1].eta
            alts = [(f, infer_agreement(traces[t.name], t.sps, over_t[t.name], f * over_d[t.name],
                                        float(t.sps_tps or 0.0), 12)) for f in RATIO_SPREAD]
            alternatives[t.name] = [(f, a) for f, (a, _) in alts]
            spread[t.name] = max(abs(plan.eta / eta - 1) for _, (_, plan) in alts)
            tasks = (*tasks[:i], replace(t, sps_eta=eta, inferred=(*t.inferred, ("sps_block_efficiency",
                     inferred_eta_how(t, draft_from)))), *tasks[i + 1:])
    setting = {t.name: best_setting(plans[t.name], over_t[t.name], over_d[t.name]) for t in tasks}
    return Calibration(sps, over_t, over_d, setting, {k: plans[k][g][0] for k, g in setting.items()}, vanilla, plans,
                       x if scaled else None, tasks, spread, reach, alternatives, draft_from)


def inferred_eta_how(t: Task, draft_from: str) -> str:
    """How an inferred SpS block efficiency was found (a profile's fit.inputs says it)."""
    what = "speedup" if t.sps_speedup is not None else "token/s"
    draft = {"mean": f"the draft overhead set so the setting's mean accepted tokens {t.mean_eta} holds over its "
                     "tasks",
             "fit": "the draft overhead fitted to the tasks with a given block efficiency",
             "hardware": "the draft overhead at the hardware profile's estimated draft / target ratio"}[draft_from]
    return f"from SpS {what} through the cost model ({draft})"


def fit_to_mean(plans: dict[str, dict[str, tuple[float, Run]]], traces: dict[str, Trace], over_t: dict[str, float],
                tasks: tuple[Task, ...], scaled: bool, mean: float, start: float, iters: int = 12,
                rel: float = 1e-3) -> float:
    """The draft overhead (ratio or seconds) at which the tasks' block efficiencies, each inferred from its own SpS
    token/s (those given stay), pool to the setting's mean accepted tokens: all tasks' new tokens over all their
    target forwards (Spec-Bench's mean over every step). A higher draft overhead needs more acceptance for the same
    token/s, so the pooled mean grows with it: bracketed from `start` (the hardware's estimate) by steps of 1.5x,
    then false position (Illinois) to within `rel` of the mean (the inner searches at 12 halvings of the knob; the
    final one refines)."""
    def pooled(x: float) -> float:
        new = steps = 0
        for t in tasks:
            od = x * over_t[t.name] if scaled else x
            p = (infer_agreement(traces[t.name], t.sps, over_t[t.name], od, float(t.sps_tps or 0.0), 12)[1]
                 if t.name in traces else plans[t.name][t.sps][1])
            new, steps = new + p.new_tokens, steps + p.steps
        return new / max(steps, 1) - mean

    grid = draft_overhead_grid(scaled)
    x = min(max(start, grid[0]), grid[-1])
    lo = hi = x
    f_lo = f_hi = pooled(x)
    while f_lo > 0 and lo > grid[0]:      # bracket the mean: down, or up, by 1.5x to the range's ends
        hi, f_hi = lo, f_lo
        lo = grid[0] if lo / 1.5 < 0.01 * grid[-1] else lo / 1.5
        f_lo = pooled(lo)
    while f_hi < 0 and hi < grid[-1]:
        lo, f_lo = hi, f_hi
        hi = min(hi * 1.5 if hi > 0 else 0.01 * grid[-1], grid[-1])
        f_hi = pooled(hi)
    if not f_lo <= 0 <= f_hi:
        unit = "x the target's" if scaled else "s"
        raise OuroborosError(f"sps.mean_accepted_tokens {mean:g} is out of the cost model's reach: the block "
                             f"efficiencies the tasks' SpS figures imply pool to {f_lo + mean:.3g} with a draft "
                             f"overhead of {lo:g} and {f_hi + mean:.3g} with {hi:g} {unit}: check the figures and the "
                             "hardware profile")
    best = min(((lo, f_lo), (hi, f_hi)), key=lambda xf: abs(xf[1]))
    side = 0
    for _ in range(iters):
        if abs(best[1]) <= rel * mean or f_hi == f_lo:
            break
        x = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        fx = pooled(x)
        best = min(best, (x, fx), key=lambda xf: abs(xf[1]))
        if fx < 0:
            lo, f_lo = x, fx
            f_hi = f_hi / 2 if side == -1 else f_hi   # Illinois: the end kept twice in a row counts half
            side = -1
        else:
            hi, f_hi = x, fx
            f_lo = f_lo / 2 if side == 1 else f_lo
            side = 1
    return best[0]


def own_ratios(cal: Calibration, tasks: tuple[Task, ...]) -> dict[str, float]:
    """Per task with a given block efficiency and SpS token/s: the draft / target overhead ratio its own SpS token/s
    alone would take (the scaled grid), beside the shared one (RATIO_SPREAD's measure)."""
    def own(t: Task) -> float:
        plan, over = cal.plans[t.name][cal.setting[t.name]][1], cal.over_t[t.name]
        return min(draft_overhead_grid(True), key=lambda r: abs(math.log(plan.tps(over, r * over) / (t.sps_tps or 1))))

    return {t.name: own(t) for t in tasks
            if t.sps_tps and t.name in cal.plans and "sps_block_efficiency" not in dict(t.inferred)}


def best_setting(plans: dict[str, tuple[float, Run]], over_t: float, over_d: float) -> str:
    """The SpS setting whose replay is fastest at these overheads (the only one unless --sps tuned)."""
    return max(plans, key=lambda g: plans[g][1].tps(over_t, over_d))


def fit_draft_overhead(plans: dict[str, dict[str, tuple[float, Run]]], over_t: dict[str, float],
                       tasks: tuple[Task, ...], scaled: bool) -> float:
    """The draft's per-forward overhead by least squares in log SpS token/s over `tasks` that have an SpS token/s
    figure: the ratio r to each task's target overhead (scaled), or one overhead in seconds. The loss is piecewise
    smooth (tuned gammas switch), so a grid: 0 .. 3 x the target's, or 0 .. 100 ms."""
    def loss(x: float) -> float:
        return sum(math.log(plans[t.name][best_setting(plans[t.name], over_t[t.name], od)][1]
                            .tps(over_t[t.name], od) / t.sps_tps) ** 2
                   for t in tasks if t.sps_tps for od in (x * over_t[t.name] if scaled else x,))

    if not any(t.sps_tps for t in tasks):
        raise OuroborosError("the draft's overhead is fitted to SpS token/s: give it for at least one task")
    return min(draft_overhead_grid(scaled), key=loss)


def draft_overhead_grid(scaled: bool) -> list[float]:
    """The draft overheads `fit_draft_overhead` tries: 0 .. 3 x the target's (scaled), or 0 .. 100 ms."""
    return [i * 1e-3 for i in range(3001)] if scaled else [i * 1e-4 for i in range(1001)]


def profile_calibration(n_prompts: int, seed: int, tasks: tuple[Task, ...] = TASKS) -> Calibration:
    """The calibration stored in conf/model/yi34b_6b.yaml's per-task profiles (conf/sim/yi34b_6b_<task>.yaml, written
    by `python -m simulators calibrate measured`) instead of a fresh fit: what `run ... sim=<profile>` runs with."""
    over_t: dict[str, float] = {}
    a: dict[str, float] = {}
    over_d: dict[str, float] = {}
    vanilla: dict[str, Run] = {}
    plans: dict[str, dict[str, tuple[float, Run]]] = {}
    for t in tasks:
        prof = yi_profile(t)
        over_t[t.name], a[t.name] = float(prof["target_overhead_s"]), float(prof["alpha_easy"])
        over_d[t.name] = float(prof["draft_overhead_s"])
        vanilla[t.name] = run(t, "vanilla", {}, 0.5, n_prompts, seed)
        plans[t.name] = {"hf": (a[t.name], sps_plan(Trace(t, n_prompts, seed), a[t.name], "hf"))}
    return Calibration("hf", over_t, over_d, {t.name: "hf" for t in tasks}, a, vanilla, plans)


def yi_profile(task: Task) -> dict[str, Any]:
    """The stored yi34b_6b calibration profile of `task` (conf/model/yi34b_6b.yaml's sim_profiles)."""
    from simulators.sim_profiles import PAPER_TASK_KEYS, load_profile, pair_profiles

    key, names = PAPER_TASK_KEYS[task.name], pair_profiles("yi34b_6b")
    if key not in names:
        raise OuroborosError(f"conf/model/yi34b_6b.yaml names no sim profile for {key}")
    return load_profile(names[key])


def profile_tasks(tasks: tuple[Task, ...] = TASKS) -> tuple[Task, ...]:
    """`tasks` with the surrogate target's text knobs their stored yi34b_6b profiles hold (profile_calibration's
    tasks)."""
    return tuple(replace(t, text=tuple((k, p[k]) for k in TEXT_KNOBS if k in p)) for t in tasks
                 for p in (yi_profile(t),))
