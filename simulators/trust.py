"""Where a simulated run's token decisions come from, and how far its numbers can be off.

- `dataset_task(dataset)`: the task a dataset config stands for (humaneval, mtbench, gsm8k, ...), Spec-Bench
  categories included (math_reasoning -> gsm8k, summarization -> cnndm, translation -> wmt16, MT-Bench's eight
  -> mtbench, qa -> nq, rag -> rag); None when the prompts span several tasks or none (`dataset.task=none`).
- Task stand-ins: a synthetic dataset on the simulator decodes the simulator's own prompts, cut from its surrogate's
  corpus; they stand for `dataset.task`, else the model YAML's `default_task` (llama70b_7b: gsm8k, the main job),
  unless `dataset.task=none`: the run then takes the task's profile, its prompt length (the `prompt_len`
  `calibrate measured` writes into each profile: 0.75x to 1.25x of it, as that fit cut its prompts) and its
  budget (GSM8K 256, ...; a typed max_new_tokens wins), as sim.task / sim.prompt_len / sim.max_new_tokens, and one
  `note:` says which task, from where, and how to pick another or none (`stand_in_options`, `stand_in_note`).
- `default_profile(model, dataset)`: the calibration profile the pair's conf/model YAML names for that task
  (`sim_profiles:`); `with_default_profile` puts it under a run's sim options unless `sim=` was typed.
- `decision_source(sim)`: `recorded` (a replayed real trace), `proxy` (a small real pair decides), `iid` (a toy
  agreement rate), `profile <name>` (fitted to what its `fit:` block names: `fitted_to` lists its inputs, each
  inferred one marked inferred; a measured profile's label names its setting, `profile llama70b_7b_gsm8k (vanilla +
  SpS, 2x A800, GSM8K; SpS eta inferred)`) or `prior` (not calibrated for this pair and task), with the 80% error
  band that the project's own held-out checks measured for that kind of source (conf/calibration/bands.yaml,
  written by `python -m simulators calibrate bands`), on a run of N prompts at least as wide as N real prompts of
  the task stray from it (`widened`; conf/calibration/prompt_floor.yaml, written by `python -m simulators calibrate
  floor`). A profile whose SpS eta was inferred (`fit.inferred_eta_spread` s: how far that eta moves over the draft
  overhead's plausible range) widens each measured band b of the strategies that run the draft to sqrt(b^2 + s^2):
  the held-out bands were measured with eta given, so the two errors are independent and add in quadrature
  (`inferred_widened`).
- `off_fit(sim, dataset, hardware, budget)`: where a run leaves what its profile's `fit:` names (hardware, devices
  and placement; new-token budget; task): a `note:` line before the run and `off_fit` in each record's decisions.

Knows nothing of strategies (but whether one runs the draft model) or the loop.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

import yaml

from ouroboros.errors import OuroborosError
from ouroboros.prompts.sources import DEFAULT_MAX_NEW_TOKENS, SPECBENCH_BUDGETS
from simulators.architectures import conf_file, conf_names, conf_root, load_conf

# dataset kind -> task, for datasets that are one task
DATASET_TASKS = {"humaneval": "humaneval", "mtbench": "mtbench", "mbpp": "mbpp", "gsm8k": "gsm8k"}
# Spec-Bench categories (question.jsonl) -> task
SPECBENCH_TASKS = {"math_reasoning": "gsm8k", "summarization": "cnndm", "translation": "wmt16", "qa": "nq",
                   "rag": "rag", **{c: "mtbench" for c in ("writing", "roleplay", "reasoning", "math", "coding",
                                                             "extraction", "stem", "humanities")}}
NO_TASK = "none"          # dataset.task=none: a synthetic dataset stands for no task
OWN_PROMPTS = ("surrogate", "iid")   # token sources whose pair cuts its own prompts (dataset=synthetic)
BAND_LEVEL = 0.8          # the bands are this central share of the measured relative errors
BAND_METRICS = ("block_efficiency", "tokens_per_s", "speedup")


def dataset_task(dataset: dict[str, Any]) -> str | None:
    """The task of a dataset config: its kind's, `dataset.task` if set, or (Spec-Bench, MT-Bench) the one task
    its `categories` all map to. None: several tasks, or prompts of no task (synthetic, text)."""
    if dataset.get("task"):
        return None if str(dataset["task"]) == NO_TASK else str(dataset["task"])
    kind = str(dataset.get("kind", ""))
    if kind == "specbench":
        cats = dataset.get("categories")
        tasks = {SPECBENCH_TASKS.get(str(c)) for c in cats} if cats else {None}
        return tasks.pop() if len(tasks) == 1 else None
    return DATASET_TASKS.get(kind)


def pair_name(model: dict[str, Any]) -> str:
    return str(model.get("name") or model.get("kind") or "pair").replace("-", "_")


def default_profile(model: dict[str, Any], dataset: dict[str, Any], formats: bool = True) -> str | None:
    """The model YAML's `sim_profiles:` entry for the dataset's task, else conf/sim/<pair>_<task>.yaml when that
    profile was fitted for this pair (what `calibrate measured` writes). Where that profile's recordings rendered
    their prompts otherwise than this dataset does and another profile of the pair and task was fitted on this
    rendering, that one (an instruct model answers a templated prompt very differently)."""
    task = dataset_task(dataset)
    if not task:
        return None
    named = (model.get("sim_profiles") or {}).get(task)
    if not named:
        stem = f"{pair_name(model)}_{task}"
        if stored_profiles().get(stem, {}).get("pair") == pair_name(model):
            named = stem
    if not named or not formats:   # formats=False: the task's named profile, whatever the prompts' rendering
        return str(named) if named else None
    profs = stored_profiles()
    fit = (profs.get(str(named)) or {}).get("fit") or {}
    if not other_format(fit, dataset):
        return str(named)
    same = [n for n, p in sorted(profs.items()) if p.get("pair") == pair_name(model)
            and (p.get("fit") or {}).get("task") == fit.get("task") and (p.get("fit") or {}).get("inputs", {}).get(
                "prompt_format") and not other_format(p["fit"], dataset)]
    return same[0] if same else str(named)


@functools.cache
def stored_profiles() -> dict[str, dict[str, Any]]:
    """conf/sim/<name>.yaml as written (name -> its own keys; not composed with the defaults)."""
    out = {}
    for name in conf_names("sim"):
        with open(conf_file("sim", name) or "", encoding="utf-8") as f:
            out[name] = dict(yaml.safe_load(f) or {})
    return out


def with_default_profile(sim: dict[str, Any], model: dict[str, Any], dataset: dict[str, Any],
                         typed: set[str]) -> dict[str, Any]:
    """`sim` with the pair's profile for the run's task under it, when the command line did not pick a sim option
    set (`sim=...`) and the options are the uncalibrated prior's; `sim.<key>=v` typed still wins. The run's task is
    its dataset's, or on a synthetic dataset the one the simulator's own prompts stand for (`stand_in_options`)."""
    own = own_prompts(sim, dataset)
    task = stand_in_task(sim, model, dataset, typed) if own else None
    ds = {**dataset, "task": task} if task else dataset
    name = default_profile(model, ds)
    out = sim
    if name is not None and "sim" not in typed and not sim.get("fit") and sim.get("tokens", "surrogate") == "surrogate":
        from simulators.sim_profiles import load_profile

        prof = load_profile(name)
        routes = category_profiles(model, ds) if name == default_profile(model, ds, formats=False) else None
        kept = {k.split(".", 1)[1] for k in typed if k.startswith("sim.")}
        out = {**sim, **prof, **({"by_category": routes} if routes else {}), **{k: sim[k] for k in kept if k in sim}}
    if own:
        out = {**out, **stand_in_options(task, model, dataset, typed, out)}
    return sim if out == sim else out


def own_prompts(sim: dict[str, Any], dataset: dict[str, Any]) -> bool:
    """Whether the run decodes the simulator's own prompts (dataset=synthetic: cut from the surrogate's corpus)."""
    return dataset.get("kind") == "synthetic" and sim.get("tokens", "surrogate") in OWN_PROMPTS


def task_key(name: Any) -> str:
    """A fit's task name as a task key: GSM8K -> gsm8k, CNN/DM -> cnndm."""
    return str(name or "").lower().replace("/", "")


def stand_in_task(sim: dict[str, Any], model: dict[str, Any], dataset: dict[str, Any], typed: set[str]) -> str | None:
    """The task a synthetic dataset's prompts stand for on the simulator: `dataset.task` (or a typed `sim.task`),
    else the model YAML's `default_task`; None for `none` or without either. A task no stored profile, dataset or
    budget knows is one error line."""
    given = dataset.get("task") or (sim.get("task") if "sim.task" in typed else None) or model.get("default_task")
    if not given or str(given) == NO_TASK:
        return None
    task = str(given)
    known = known_tasks(model)
    if task not in known:
        what = ("dataset.task" if dataset.get("task") else "sim.task" if "sim.task" in typed else
                f"conf/model/{pair_name(model)}.yaml's default_task")
        raise OuroborosError(f"{what} {task!r} is no task the simulator knows; known: {', '.join(sorted(known))} "
                             f"(or {NO_TASK})")
    return task


def known_tasks(model: dict[str, Any]) -> set[str]:
    """The tasks a synthetic dataset may stand for: the datasets', Spec-Bench categories', the budgeted ones, the
    stored profiles' and the pair's own."""
    return ({*DATASET_TASKS.values(), *SPECBENCH_TASKS.values(), *DEFAULT_MAX_NEW_TOKENS}
            | {task_key((p.get("fit") or {}).get("task")) for p in stored_profiles().values() if p.get("fit")}
            | set(model.get("sim_profiles") or {})) - {""}


def task_profile(model: dict[str, Any], task: str) -> dict[str, Any] | None:
    """The stored profile holding `task`'s prompt statistics (its `prompt_len`, which `calibrate measured` writes,
    and its corpus): the pair's own profile for the task where it holds them, else the first stored profile fitted on
    the task that does; None if none."""
    own = default_profile(model, {"task": task}, formats=False)
    profs = stored_profiles()
    names = ([own] if own else []) + sorted(n for n, p in profs.items()
                                            if task_key((p.get("fit") or {}).get("task")) == task)
    return next((profs[n] for n in names if (profs.get(n) or {}).get("prompt_len")), None)


def stand_in_options(task: str | None, model: dict[str, Any], dataset: dict[str, Any], typed: set[str],
                     sim: dict[str, Any] | None = None) -> dict[str, Any]:
    """The sim options that make the simulator's own prompts stand for `task`: `task`; `prompt_len` (the task's:
    `task_profile`; the run's profile for the task holds the same figure); `max_new_tokens` (the task's budget,
    GSM8K 256, ..., else the one `task_profile` was fitted at; none where max_new_tokens is typed; a
    dataset.max_new_tokens wins); on options fitted to no profile (the prior), the task's `corpus` too. Without a
    task, none of them: a profile typed with sim= does not lengthen the prompts of a run that stands for no task.
    `sim.<key>` typed wins."""
    prof = task_profile(model, task) if task else None
    if task and dataset.get("max_new_tokens"):
        budget: int | None = int(dataset["max_new_tokens"])
    elif not task or "max_new_tokens" in typed:
        budget = None
    else:   # the task's paper budget, else the one its profile was fitted at
        budget = DEFAULT_MAX_NEW_TOKENS.get(task) or (fitted_budget(prof.get("fit") or {}) if prof else None)
    out = {"task": task, "prompt_len": int(prof["prompt_len"]) if prof else None, "max_new_tokens": budget}
    if prof and prof.get("corpus") and not (sim or {}).get("fit"):
        out["corpus"] = prof["corpus"]
    return {k: v for k, v in out.items() if f"sim.{k}" not in typed}


def category_profiles(model: dict[str, Any], dataset: dict[str, Any]) -> dict[str, str] | None:
    """The model YAML's `sim_category_profiles:` entry for the dataset's task (category -> profile), or None."""
    task = dataset_task(dataset)
    routes = (model.get("sim_category_profiles") or {}).get(task) if task else None
    return {str(k): str(v) for k, v in routes.items()} if routes else None


# ----------------------------------------------------------------------------------------------- sources
def prompt_format(dataset: dict[str, Any]) -> dict[str, Any]:
    """How a dataset's prompts are rendered (the datasets loader's defaults where a key is absent)."""
    return {"chat": dataset.get("chat", "auto"), "template": dataset.get("template", "{prompt}")}


def other_format(fit: dict[str, Any], dataset: dict[str, Any] | None) -> bool:
    """A profile fitted on recordings whose prompts were rendered otherwise than this run's: its decisions were
    measured on another workload (an instruct model answers a templated prompt very differently), so no band."""
    fitted = (fit.get("inputs") or {}).get("prompt_format")
    return bool(fitted and dataset is not None and prompt_format(dataset) != prompt_format(fitted))


def _outputs_only(trace: Any) -> bool:
    from simulators.replay import outputs_only

    try:
        return bool(trace) and outputs_only(str(trace))
    except OuroborosError:   # a missing trace is refused where the pair loads
        return False


def decision_source(sim: dict[str, Any], dataset: dict[str, Any] | None = None) -> dict[str, Any]:
    """{kind, name, fitted_to}: who decides the simulated tokens (see the module doc); `other_format` when the
    profile's recordings rendered their prompts otherwise than `dataset` does."""
    tokens = sim.get("tokens", "surrogate")
    if tokens == "replay":
        return {"kind": "recorded", "name": str(sim.get("trace")), "fitted_to": "a replayed real trace"
                + (" of outputs only: exact for context-only drafters" if _outputs_only(sim.get("trace")) else "")}
    if tokens == "proxy":
        m = sim.get("proxy_model") or {}
        return {"kind": "proxy", "name": str(m.get("name") or m.get("kind")),
                "fitted_to": "a small real proxy pair decides every token"}
    if tokens == "iid":
        return {"kind": "iid", "name": None, "fitted_to": f"an i.i.d. draft agreement of {sim.get('alpha')}"}
    fit = sim.get("fit")
    if fit:
        src = {"kind": "profile", "name": sim.get("profile") or sim.get("pair"), "method": profile_method(fit),
               "fitted_to": fitted_to(fit)}
        if src["method"] == "measured":
            src["setting"] = fit_setting(fit)
        if sim.get("by_category"):   # each category's prompts decided by its own profile
            src["by_category"] = dict(sim["by_category"])
        return {**src, "other_format": True} if other_format(fit, dataset) else src
    return {"kind": "prior", "name": None, "fitted_to": "not calibrated for this pair and task"}


def profile_method(fit: dict[str, Any]) -> str:
    """`measured` (a pair's vanilla + SpS speed figures) or `recorded` (a real pair's recorded decisions)."""
    if fit.get("method_kind"):
        return str(fit["method_kind"])
    return "recorded" if "recorded_runs" in (fit.get("inputs") or {}) else "measured"


# a measured profile's fit.inputs, as its notes and tables name them
INPUT_NAMES = {"vanilla_tok_s": "vanilla token/s", "sps_tok_s": "SpS token/s", "sps_speedup": "SpS speedup",
               "sps_block_efficiency": "SpS eta", "setting_mean_accepted_tokens": "the setting's mean accepted tokens"}


def inferred(value: Any) -> bool:
    """An input the calibration filled in ({value, inferred: how}), not one it was given."""
    return isinstance(value, dict) and "inferred" in value


def fitted_to(fit: dict[str, Any]) -> str:
    """What a profile was fitted to: its recorded runs, or its measured inputs (the given ones, then each inferred
    one with its value, how it was found and, for an SpS eta, its spread)."""
    task = fit.get("task", "?")
    inputs = fit.get("inputs") or {}
    if profile_method(fit) == "recorded":
        return (f"{len(inputs.get('recorded_runs') or [])} recorded real runs of the pair on {task} "
                f"({inputs.get('prompts', '?')} prompts)")
    keys = [name for k, name in INPUT_NAMES.items() if k in inputs and not inferred(inputs[k])]
    sps = f" ({inputs['sps']})" if inputs.get("sps") else ""
    guessed = []
    for k, name in INPUT_NAMES.items():
        if k in inputs and inferred(inputs[k]):
            how = str(inputs[k]["inferred"]).split(" (")[0].split(":")[0]
            spread = (f", ±{float(fit['inferred_eta_spread']):.0%}: the bands of strategies that run the draft include "
                      "it" if k == "sps_block_efficiency" and fit.get("inferred_eta_spread") else "")
            guessed.append(f"{name} {float(inputs[k].get('value') or 0):.3g} inferred ({how}{spread})")
    return f"the pair's {task} {', '.join(keys)}{sps}" + (f"; {', '.join(guessed)}" if guessed else "")


def fit_setting(fit: dict[str, Any]) -> str:
    """A measured profile's setting in a few words: what it was given, on which machine, for which task, and what
    was inferred ("vanilla + SpS, 2x A800, GSM8K; SpS eta inferred")."""
    inputs = fit.get("inputs") or {}
    vanilla = "vanilla_tok_s" in inputs and not inferred(inputs["vanilla_tok_s"])
    words = ["vanilla + SpS" if vanilla else "SpS speedup", hardware_words(fit.get("hardware")), fit.get("task")]
    guessed = [name for k, name in INPUT_NAMES.items() if k in inputs and inferred(inputs[k])]
    return ", ".join(str(w) for w in words if w) + (f"; {' and '.join(guessed)} inferred" if guessed else "")


def hardware_words(name: Any) -> str | None:
    """A conf/hardware profile as a reader names the machine: a800x2 -> "2x A800", h100 -> "H100" (its chip from the
    name, its device count from the profile)."""
    if not name:
        return None
    known = conf_file("hardware", str(name)) is not None
    devices = load_conf("hardware", str(name)).get("devices") if known else None
    m = re.fullmatch(r"([a-z]+\d+)(?:x\d+)?", str(name))
    chip = m.group(1).upper() if m else str(name)
    return f"{devices}x {chip}" if isinstance(devices, int) and devices > 1 else chip


def band_key(source: dict[str, Any]) -> str:
    """The bands.yaml entry measuring this kind of source."""
    if source["kind"] == "profile":
        return f"profile_{source.get('method', 'measured')}"
    return source["kind"]


@functools.cache
def bands() -> dict[str, Any]:
    """conf/calibration/bands.yaml ({} when absent)."""
    path = conf_root() / "calibration" / "bands.yaml"
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as f:
        return dict(yaml.safe_load(f) or {})


def band_for(source: dict[str, Any], strategy: str) -> dict[str, Any] | None:
    """{block_efficiency, tokens_per_s, speedup: half-widths (relative), cells, measured_by} of `strategy` for this
    kind of source; None when no held-out check has measured it (or the profile was fitted on other prompts)."""
    if source.get("other_format") and strategy != "vanilla":   # vanilla's eta and speedup are 1 by definition
        return None
    entry = bands().get(band_key(source)) or {}
    b = (entry.get("strategies") or {}).get(strategy)
    if not b:
        return None
    return {**{m: b.get(m) for m in BAND_METRICS}, "cells": b.get("cells"), "commit": entry.get("commit"),
            "measured_by": f"{entry.get('command')} ({entry.get('held_out')})"}


@functools.cache
def prompt_floors() -> dict[str, Any]:
    """conf/calibration/prompt_floor.yaml ({} when absent): per task and strategy, how far k real prompts' eta,
    token/s and speedup stray from the task's (`python -m simulators calibrate floor`)."""
    path = conf_root() / "calibration" / "prompt_floor.yaml"
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as f:
        return dict(yaml.safe_load(f) or {})


def floor_for(task: str | None, strategy: str, prompts: int) -> dict[str, tuple[int, float]]:
    """metric -> (k, floor): the measured floor of `strategy` on `task` at the largest k <= `prompts` (the smallest
    k measured where `prompts` is below it: a floor at fewer prompts would be wider still); {} when none."""
    entry = ((prompt_floors().get("tasks") or {}).get(task or "") or {}).get("strategies", {}).get(strategy) or {}
    out = {}
    for m in BAND_METRICS:
        by_k = {int(k): float(v) for k, v in (entry.get(m) or {}).items()}
        if by_k:
            k = max((k for k in by_k if k <= prompts), default=min(by_k))
            out[m] = (k, by_k[k])
    return out


def widened(band: dict[str, Any], task: str | None, strategy: str, prompts: int | None) -> dict[str, Any]:
    """`band` with each measured metric at least the real prompts' floor for a run of `prompts` prompts of `task`
    (floor_for); `prompt_floor` says which metrics it widened and from what. A band never narrows; an unmeasured
    metric stays unmeasured."""
    if not prompts or strategy == "vanilla":
        return band
    floor = floor_for(task, strategy, prompts)
    wider = {m: v for m, (_, v) in floor.items() if band.get(m) is not None and v > band[m]}
    if not wider:
        return band
    return {**band, **wider, "prompt_floor": {"task": task, "prompts": prompts,
                                              "k": {m: floor[m][0] for m in wider},
                                              "measured_band": {m: band.get(m) for m in wider}}}


def runs_draft(strategy: str) -> bool:
    """Whether a strategy runs the draft model (speculative, cascade, Ouroboros, transformers' assisted generation):
    what a profile's draft agreement and draft overhead move."""
    from ouroboros.strategies import PEERS, REGISTRY, get_spec

    return (strategy in REGISTRY or strategy in PEERS) and get_spec(strategy).needs_draft_model


def inferred_widened(band: dict[str, Any], fit: dict[str, Any], strategy: str) -> dict[str, Any]:
    """`band` of a strategy that runs the draft, on a profile whose SpS eta was inferred: each measured metric's
    half-width b becomes sqrt(b^2 + s^2), s how far that metric of this strategy moved between the fit and the fits
    the same SpS figures allow at the ends of the draft overhead's plausible range (fit.inferred_spread, measured by
    `calibrate measured` for SpS, Ouroboros and cascade at their presets); for another strategy that runs the draft,
    or a profile written before those were measured, s is the inferred eta's own spread (fit.inferred_eta_spread), a
    bound. Ouroboros' measured band comes from settings whose SpS eta was given (Yi), so it holds none of this
    uncertainty; SpS's comes partly from settings with an inferred eta (Spec-Bench), so adding s there errs wide.
    The two are taken as independent and added in quadrature. Strategies that do not run the draft, and vanilla,
    keep their band: the target's side was fitted to given figures. An unmeasured metric stays unmeasured, except
    SpS's own eta: the fit reproduces a given SpS eta, so no held-out error was measured for it, but an inferred one
    is uncertain by s itself. `inferred_eta` says what was widened, by how much and from what."""
    s_eta = fit.get("inferred_eta_spread")
    if not s_eta or not runs_draft(strategy):
        return band
    measured = (fit.get("inferred_spread") or {}).get(strategy) or {}
    spread = {m: float(measured[m]) if measured.get(m) is not None else float(s_eta) for m in BAND_METRICS}
    base = {**band, "block_efficiency": 0.0} if strategy == "speculative" and band.get("block_efficiency") is None \
        else band
    wider = {m: round(math.hypot(float(base[m]), spread[m]), 4) for m in BAND_METRICS if base.get(m) is not None}
    if not wider:
        return band
    return {**band, **wider, "inferred_eta": {"spread": float(s_eta), "measured_band": {m: band.get(m) for m in wider},
                                              "by": "measured per strategy" if measured else "eta's own spread"}}


def run_task(sim: dict[str, Any], dataset: dict[str, Any]) -> str | None:
    """The task a run's prompts are: its dataset's (`dataset_task`), or the one the simulator's own prompts stand
    for (`sim.task`, set by `with_default_profile`)."""
    task = dataset_task(dataset)
    if task is None and own_prompts(sim, dataset) and sim.get("task"):
        return str(sim["task"])
    return task


def record_decisions(sim: dict[str, Any], strategy: str, dataset: dict[str, Any] | None = None,
                     hardware: dict[str, Any] | None = None, prompts: int | None = None,
                     budget: int | None = None) -> dict[str, Any]:
    """The `decisions` block of a simulated record: the source and the band of this strategy's numbers. A recorded
    profile's speedup band was measured on a clock fitted to the loop's own forwards on the machine that ran the
    held-out sweeps (`calibrate clock --records`); on any other clock it is not shown (`?`). A per-task source's
    band on a run of `prompts` prompts is at least how far that many real prompts stray from their task's (`widened`):
    the held-out bands were measured on groups of 2-10 prompts. A profile whose SpS eta was inferred widens the bands
    of the strategies that run the draft by that eta's spread (`inferred_widened`). A profile run off the setting it
    was fitted on (`off_fit`: hardware, new-token budget `budget`, task) says which, fitted and run side by side. A
    run of the simulator's own prompts has the task and budget they stand for (`run_task`, sim.max_new_tokens)."""
    src = decision_source(sim, dataset)
    band = band_for(src, strategy)
    if band and band_key(src) == "profile_recorded" and strategy != "vanilla" and not records_clock(hardware):
        band = {**band, "speedup": None, "tokens_per_s": None}
    if band and src["kind"] == "profile":
        band = inferred_widened(band, sim.get("fit") or {}, strategy)
    if band and src["kind"] in ("profile", "prior"):
        band = widened(band, run_task(sim, dataset or {}), strategy, prompts)
    off = off_fit(sim, dataset or {}, hardware, budget) if src["kind"] == "profile" else {}
    why = None if band else no_band_why(src, strategy)
    return {**src, "label": source_label(src), "band": band, **({"off_fit": off} if off else {}),
            **({"no_band": why} if why else {})}


def no_band_why(source: dict[str, Any], strategy: str) -> str | None:
    """Why this kind of source has no band for `strategy` (bands.yaml's `not_measured`), None when it does not say."""
    entry = bands().get(band_key(source)) or {}
    why = (entry.get("not_measured") or {}).get(strategy)
    return str(why) if why else None


def machine_text(name: Any, devices: Any, placement: Any) -> str:
    return f"{name} ({devices} device{'s' if devices != 1 else ''}, {placement})"


def fitted_budget(fit: dict[str, Any]) -> int | None:
    """The new-token budget a profile's fit ran its prompts at (`fit.max_new_tokens`, or its recorded runs')."""
    b = fit.get("max_new_tokens") or (fit.get("inputs") or {}).get("max_new_tokens")
    return int(b) if b else None


def run_budget(dataset: dict[str, Any], budget: int | None, sim: dict[str, Any] | None = None) -> int | None:
    """The new-token budget a run's prompts get: `dataset.max_new_tokens` (a typed max_new_tokens is copied there),
    else the dataset's per-task one (HumanEval 512, a Spec-Bench category's task's), else the run's `budget`; None
    when its prompts' budgets differ, or without the run's `budget` (not checked). The simulator's own prompts
    (`sim` given) have sim.max_new_tokens where set (a task stand-in's)."""
    if budget is None:
        return None
    if sim is not None and own_prompts(sim, dataset):
        return int(sim.get("max_new_tokens") or budget)
    if dataset.get("max_new_tokens"):
        return int(dataset["max_new_tokens"])
    kind = dataset.get("kind")
    if kind == "humaneval":
        return DEFAULT_MAX_NEW_TOKENS["humaneval"]
    if kind == "specbench":
        per = {SPECBENCH_BUDGETS.get(str(c), budget) for c in dataset.get("categories") or ()}
        return per.pop() if len(per) == 1 else None   # all six categories: several budgets
    return budget


def off_fit(sim: dict[str, Any], dataset: dict[str, Any], hardware: dict[str, Any] | None,
            budget: int | None) -> dict[str, dict[str, Any]]:
    """Where a run leaves the setting its profile was fitted on (`fit:`): {hardware | max_new_tokens | task:
    {fitted, run}} for each that differs (the hardware by name, devices or placement; `sim.devices` /
    `sim.placement` count); {} when it matches or the fit does not say."""
    fit = sim.get("fit") or {}
    out: dict[str, dict[str, Any]] = {}
    if fit.get("hardware") and hardware:
        known = conf_file("hardware", str(fit["hardware"])) is not None
        fitted_hw = load_conf("hardware", str(fit["hardware"])) if known else {}
        there = machine_text(fit["hardware"], fitted_hw.get("devices"), fitted_hw.get("placement"))
        here = machine_text(hardware.get("name"), sim.get("devices") or hardware.get("devices"),
                            sim.get("placement") or hardware.get("placement"))
        differs = there != here if known else str(fit["hardware"]) != hardware.get("name")   # unknown: by name
        if differs:
            out["hardware"] = {"fitted": there, "run": here}
    mine, theirs = run_budget(dataset, budget, sim), fitted_budget(fit)
    if mine and theirs and mine != theirs:
        out["max_new_tokens"] = {"fitted": theirs, "run": mine}
    task, fit_task = run_task(sim, dataset), task_key(fit.get("task"))
    if task and fit_task and fit_task != task:
        out["task"] = {"fitted": fit_task, "run": task}
    return out


def off_fit_note(name: Any, off: dict[str, dict[str, Any]]) -> str:
    """The `note:` line of a profile run off its fit: what it was fitted on, what this run is."""
    def side(which: str) -> str:
        parts = []
        if "task" in off:
            parts.append(f"{off['task'][which]}")
        if "hardware" in off:
            parts.append(f"{off['hardware'][which]}")
        if "max_new_tokens" in off:
            parts.append(f"{off['max_new_tokens'][which]} new tokens")
        return ", ".join(parts)

    return (f"decisions: outside its fit: profile {name} was fitted on {side('fitted')}; this run is {side('run')}: "
            "its bands were measured at the fitted setting and may not hold here")


def records_clock(hardware: dict[str, Any] | None) -> bool:
    """Whether a hardware profile's clock was fitted to a real loop's own forwards (`calibrate clock --records`)."""
    return "refitted by calibrate clock --records" in str((hardware or {}).get("source") or "")


def source_label(src: dict[str, Any]) -> str:
    if src["kind"] == "profile":
        other = ", other prompt format" if src.get("other_format") else ""
        cats = (f" + per category {', '.join(sorted(set(src['by_category'].values())))}"
                if src.get("by_category") else "")
        return f"profile {src['name']} ({src.get('setting') or src.get('method')}{other}){cats}"
    if src["kind"] in ("recorded", "proxy"):
        return f"{src['kind']} {src['name']}"
    return src["kind"]


def source_notes(sim: dict[str, Any], model: dict[str, Any], dataset: dict[str, Any], typed: set[str],
                 hardware: dict[str, Any] | None = None, budget: int | None = None) -> list[str]:
    """The `note:` lines a simulated run prints about its decisions: the profile picked for it (and, for a recorded
    profile on a clock not fitted to the loop's forwards, why its speedups have no band; for a run off the hardware,
    new-token budget `budget` or task it was fitted on, which: `off_fit`), or that it runs on the prior and how to
    calibrate; first, on the simulator's own prompts, the task they stand for (`stand_in_note`)."""
    first = stand_in_note(sim, model, dataset, typed)
    return ([first] if first else []) + decision_notes(sim, model, dataset, typed, hardware, budget)


def stand_in_note(sim: dict[str, Any], model: dict[str, Any], dataset: dict[str, Any], typed: set[str]) -> str | None:
    """One line on the task a synthetic dataset stands for on the simulator (its prompts' length and budget, where
    the task came from, how to pick another or none); None where it stands for none."""
    from simulators.pair import prompt_span

    task = sim.get("task")
    if not own_prompts(sim, dataset) or not task:
        return None
    plus = "" if "task" in load_conf("dataset", "synthetic") else "+"   # a key its config lacks is added with +
    where = ("dataset.task" if dataset.get("task") else "sim.task" if "sim.task" in typed else
             f"conf/model/{pair_name(model)}.yaml's default_task")
    plen = sim.get("prompt_len")
    lo, hi = prompt_span(plen)
    why = (f"0.75x to 1.25x {task}'s {plen}, as `calibrate measured` fitted its profile" if plen else
           f"no stored profile holds {task}'s prompt length")
    budget = (f"{sim['max_new_tokens']} new tokens each" if sim.get("max_new_tokens") else
              "the run's max_new_tokens each" + (" (typed)" if "max_new_tokens" in typed else ""))
    others = sorted(set(model.get("sim_profiles") or {}) - {task}) or sorted(known_tasks(model) - {task})[:3]
    return (f"decisions: dataset=synthetic stands for {task} here ({where}): the simulator's own prompts, {lo} to {hi} "
            f"tokens of its {sim.get('corpus', 'code')} corpus ({why}), {budget}; {plus}dataset.task="
            f"{' or '.join(others)} picks another task, {plus}dataset.task={NO_TASK} none")


def decision_notes(sim: dict[str, Any], model: dict[str, Any], dataset: dict[str, Any], typed: set[str],
                   hardware: dict[str, Any] | None = None, budget: int | None = None) -> list[str]:
    """source_notes' lines on the decisions themselves."""
    src = decision_source(sim, dataset)
    task = run_task(sim, dataset)
    pair = pair_name(model)
    if src["kind"] == "profile":
        how = "picked for" if "sim" not in typed else "selected for"
        opt_out = "; sim=default opts out" if "sim" not in typed else ""
        notes = [f"decisions: profile {src['name']} {how} {task or 'this run'} (fitted to {src['fitted_to']})"
                 f"{opt_out}"]
        if src.get("by_category"):
            groups: dict[str, list[str]] = {}
            for c, n in src["by_category"].items():
                groups.setdefault(n, []).append(c)
            notes.append("decisions: per prompt category, " + "; ".join(
                f"{n} ({', '.join(cs)})" for n, cs in sorted(groups.items())) + f" decide those prompts, {src['name']} "
                "the others; sim.by_category=null opts out")
        if src.get("other_format"):
            fitted = prompt_format((sim.get("fit") or {}).get("inputs", {}).get("prompt_format") or {})
            mine = prompt_format(dataset)
            diff = ", ".join(f"{k} {fitted[k]!r} there, {mine[k]!r} here" for k in fitted if fitted[k] != mine[k])
            notes.append(f"decisions: {src['name']} was fitted on prompts rendered otherwise ({diff}), so no "
                         f"measured band holds here: the real pair's block efficiency can differ several-fold between "
                         f"prompt formats (docs/results.md); set dataset.template='{{prompt}}' to match the profile")
        elif hardware and band_key(src) == "profile_recorded" and not records_clock(hardware) and any(
                e.get("speedup") for m, e in ((bands().get("profile_recorded") or {}).get("strategies") or {}).items()
                if m != "vanilla"):
            notes.append(f"decisions: {src['name']}'s speedup band was measured on a clock fitted to a real loop's "
                         f"forwards (`python -m simulators calibrate clock --records`); hardware="
                         f"{hardware.get('name')} is not, so speedups show `?` (the eta band holds)")
        off = off_fit(sim, dataset, hardware, budget)
        return notes + ([off_fit_note(src["name"], off)] if off else [])
    if src["kind"] != "prior":
        return [f"decisions: {source_label(src)} ({src['fitted_to']})"]
    own = sorted((model.get("sim_profiles") or {}).items())
    why = (f"{pair} has no profile for {task}" if task else
           f"the {dataset.get('kind')} prompts belong to no single task") if "sim" not in typed else "sim= chose it"
    has = f"; its profiles: {', '.join(f'{k} -> {v}' for k, v in own)}" if own else ""
    return [f"decisions: the uncalibrated prior ({why}{has}). Every eta and speedup is a guess, within the prior's "
            f"bands at best; to calibrate, measure vanilla and speculative once on your pair, then `python -m "
            f"simulators calibrate measured --model {pair} --task {task or '<task>'} ...` (README)"]
