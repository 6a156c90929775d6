"""A pair's measured speed figures per task, as `Task`s: what `simulators calibrate measured` fits (vanilla token/s,
speculative (SpS) token/s or speedup, and block efficiency or accepted length when known, with the SpS draft length
or schedule used) and what the checks compare predictions with (`held_out`: other strategies' figures, never fitted).

Three ways in, one `Task`:
- `load_tasks(path)`: a YAML of several tasks (conf/calibration/yi34b_6b_a800x2.yaml, the paper's Yi-34B/6B figures
  with their citation, is one): top level `model`, `hardware`, `source`, `sps: {schedule: hf | constant, gamma: N
  (constant), mean_accepted_tokens: X (optional: the whole setting's new tokens per target forward, Spec-Bench's
  "mean accepted tokens")}`, `tasks: {key: {name, corpus, prompt_len, max_new_tokens, vanilla_tok_s, sps_tok_s,
  sps_speedup, sps_block_efficiency | sps_accepted_length, held_out: {strategy: {tok_s | speedup |
  block_efficiency | mean_accepted_tokens, and its params}}}}`;
- flags (`calibrate measured --vanilla-tok-s ...`): one task, through `make_task` as well;
- `records_task(path, ...)`: a real run's records (`sweep=real_compare` or `run strategy=speculative` on backend=hf):
  the vanilla and speculative points measured against the same baseline.

A task gives vanilla token/s with SpS token/s, SpS speedup or SpS block efficiency, or an SpS speedup alone; what it
leaves out the calibration infers (vanilla token/s from the hardware roofline, the block efficiency through the cost
model: simulators/lab/calibration/paper_fit.py) and marks as inferred (`Task.inferred`). A value not given is 0.0 here.
Every figure is checked in `make_task`, one line naming the key (or flag) and the bound it breaks: finite, token/s
> 0, block efficiency in [1, gamma + 1] (accepted length in [0, gamma]), SpS token/s at most eta x vanilla's and an
SpS speedup at most eta (a step costs one target forward at least; without eta: at most gamma + 1); task, model and
hardware names are file-name safe (they name the profiles).

Knows nothing of the simulator's clock or surrogates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ouroboros.errors import OuroborosError
from simulators.architectures import check_name, conf_root

CORPORA = ("code", "pycode", "prose")
CODE_TASKS = ("humaneval", "mbpp")
YI_FIGURES = conf_root() / "calibration" / "yi34b_6b_a800x2.yaml"


@dataclass(frozen=True)
class Task:
    name: str
    corpus: str                  # surrogate corpus standing in for the task's text
    max_new: int                 # the generation limit of the measured runs
    prompt_len: int              # typical prompt length (tokens): only the attention / KV costs use it
    vanilla_tps: float           # measured token/s (calibration); 0.0: not given (from the hardware roofline)
    sps_eta: float               # measured SpS block efficiency (calibration); 0.0: not given (inferred)
    sps_tps: float | None = None  # measured SpS token/s (calibration)
    sps_speedup: float | None = None  # measured SpS speedup over vanilla (calibration; instead of SpS token/s)
    mean_eta: float | None = None  # the whole setting's mean accepted tokens (sps.mean_accepted_tokens), all tasks'
    sps: str = "hf"              # the SpS setting measured: "hf" (transformers' schedule from 5) or a fixed gamma ("7")
    gamma: int = 4               # held-out Ouroboros' settings (W = G; lookahead runs with W and N too)
    W: int = 20
    N: int = 7
    K: int = 3
    la_tps: float | None = None  # (held out)
    ouro_tps: float | None = None  # (held out)
    la_eta: float | None = None  # (held out)
    ouro_eta: float | None = None  # (held out)
    key: str = ""                # the task's key (humaneval, gsm8k, ...): profile names, model YAMLs' sim_profiles
    model: str = "yi34b_6b"      # conf/model pair
    hardware: str = "a800x2"     # conf/hardware profile the figures were measured on
    p_copy: float | None = None  # the surrogate target's copying (not a figure; `validate paper --p-copy`)
    text: tuple[tuple[str, Any], ...] = ()  # the surrogate target's text knobs (`--text decisions`)
    roofline_p: float = 0.0      # the roofline's shape (`--roofline-p`: a sensitivity, never fitted; cost_model)
    machine: tuple[tuple[str, Any], ...] = ()  # sim options of the machine measured on (devices, placement, dtype)
    inferred: tuple[tuple[str, str], ...] = ()  # figures the calibration filled in: (key, how), never listed as given
    text_profile: str = ""       # the decision profile whose text knobs `--text decisions` takes ("": by task / corpus)
    answer_len: int | None = None  # where the task's real answers end (median new tokens to EOS; None: at max_new)

    def pub_tps(self, m: str) -> float | None:
        return {"vanilla": self.vanilla_tps, "speculative": self.sps_tps, "lookahead": self.la_tps,
                "ouroboros": self.ouro_tps}[m]

    def pub_eta(self, m: str) -> float | None:
        return {"vanilla": 1.0, "speculative": self.sps_eta, "lookahead": self.la_eta, "ouroboros": self.ouro_eta}[m]

    def inputs(self) -> dict[str, Any]:
        """The figures a calibration fits (a profile's `fit.inputs`): the given ones as values, the inferred ones as
        {value, inferred: how}; SpS token/s derived from a speedup is not listed (the speedup is)."""
        how = dict(self.inferred)
        out: dict[str, Any] = {}
        for k, v in (("vanilla_tok_s", self.vanilla_tps),
                     ("sps_tok_s", self.sps_tps if self.sps_speedup is None else None),
                     ("sps_speedup", self.sps_speedup), ("sps_block_efficiency", self.sps_eta)):
            if k in how:
                out[k] = {"value": round(float(v or 0.0), 4), "inferred": how[k]}
            elif v:
                out[k] = v
        if self.mean_eta is not None:
            out["setting_mean_accepted_tokens"] = self.mean_eta
        out["sps"] = "schedule=hf" if self.sps == "hf" else f"gamma={self.sps}"
        return out


def default_corpus(task: str) -> str:
    return "code" if task in CODE_TASKS else "prose"


def sps_setting(gamma: Any, schedule: Any, where: str) -> str:
    if schedule not in (None, "hf", "constant"):
        raise OuroborosError(f"{where}: the SpS schedule must be hf or constant, got {schedule!r}")
    if schedule == "hf":
        if gamma not in (None, 5):
            raise OuroborosError(f"{where}: schedule hf starts at 5 draft tokens; give no gamma with it")
        return "hf"
    if gamma is None:
        raise OuroborosError(f"{where}: say how SpS ran: its gamma (draft tokens per step) or schedule hf")
    if not isinstance(gamma, int) or isinstance(gamma, bool) or not 1 <= gamma <= 64:
        raise OuroborosError(f"{where}: the SpS gamma must be an integer in [1, 64], got {gamma!r}")
    return str(gamma)


def positive(v: Any, what: str, where: str, integer: bool = False) -> Any:
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or v <= 0:
        raise OuroborosError(f"{where}: {what} must be a positive {'integer' if integer else 'number'}, got {v!r}")
    if not math.isfinite(v):
        raise OuroborosError(f"{where}: {what} must be a finite number > 0, got {v!r}")
    return v


def finite(v: Any, what: str, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise OuroborosError(f"{where}: {what} must be a finite number, got {v!r}")
    return float(v)


def eta_top(sps: str, max_new: int) -> int:
    """The most new tokens one target forward brings at the SpS setting (schedule hf: the budget)."""
    return max_new if sps == "hf" else int(sps) + 1


def sps_eta(d: dict[str, Any], sps: str, max_new: int, where: str, name: Callable[[str], str]) -> float | None:
    """The SpS block efficiency of a task's figures (given as it, or as its accepted length eta - 1; None if neither),
    in range: at least one token per target forward, at most gamma + 1 (schedule hf: at most the budget, one forward
    a prompt)."""
    eta, acc = d.get("sps_block_efficiency"), d.get("sps_accepted_length")
    if eta is not None and acc is not None:
        raise OuroborosError(f"{where}: give the SpS block efficiency or its accepted length (one of them)")
    if eta is None and acc is None:
        return None
    hf = sps == "hf"
    top = eta_top(sps, max_new)
    if acc is not None:
        n, acc = name("sps_accepted_length"), finite(acc, name("sps_accepted_length"), where)
        if acc < 0:
            raise OuroborosError(f"{where}: {n} must be >= 0 (an accepted length counts accepted draft tokens), "
                                 f"got {acc:g}")
        if acc > top - 1:
            raise OuroborosError(f"{where}: {n} {acc:g} is more than "
                                 + (f"max_new_tokens - 1 = {top - 1}" if hf else f"gamma = {top - 1}")
                                 + " (the most draft tokens a step accepts)")
        return acc + 1.0
    n, eta = name("sps_block_efficiency"), finite(eta, name("sps_block_efficiency"), where)
    if eta < 1:
        raise OuroborosError(f"{where}: {n} must be >= 1 (an SpS block efficiency is >= 1: one token per target "
                             f"forward at least), got {eta:g}")
    if eta > top:
        raise OuroborosError(f"{where}: an SpS block efficiency of {eta:g} ({n}) is more than "
                             + (f"max_new_tokens = {top} (a prompt takes one target forward at least)" if hf
                                else f"gamma + 1 = {top} (the most new tokens a target forward brings)"))
    return eta


def make_task(key: str, d: dict[str, Any], model: str, hardware: str, sps: str, where: str,
              names: dict[str, str] | None = None, mean_eta: Any = None) -> Task:
    """One task from its figures (a YAML entry, flags or records), every value checked (one line on a bad one, naming
    the value as `names` spells it: the flags' own names; default the YAML keys). `mean_eta`: the setting's mean
    accepted tokens (a figures file's sps.mean_accepted_tokens)."""
    def name(k: str) -> str:
        return (names or {}).get(k, k)

    check_name(key, f"{where}: the task's key")   # the profile's file name is <model>_<key>.yaml
    known = {"name", "corpus", "prompt_len", "max_new_tokens", "vanilla_tok_s", "sps_tok_s", "sps_speedup",
             "sps_block_efficiency", "sps_accepted_length", "sps_gamma", "sps_schedule", "held_out", "text_profile",
             "answer_len"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise OuroborosError(f"{where}: unknown key {unknown[0]!r}; keys: {', '.join(sorted(known))}")
    if "sps_gamma" in d or "sps_schedule" in d:
        sps = sps_setting(d.get("sps_gamma"), d.get("sps_schedule"), where)
    max_new = positive(d.get("max_new_tokens"), name("max_new_tokens"), where, integer=True)
    prompt_len = positive(d.get("prompt_len"), name("prompt_len"), where, integer=True)
    answer_len = None if d.get("answer_len") is None else int(positive(d["answer_len"], name("answer_len"), where,
                                                                        integer=True))
    eta = sps_eta(d, sps, max_new, where, name)
    vanilla, sps_tps, speedup = (None if d.get(k) is None else float(positive(d[k], name(k), where))
                                 for k in ("vanilla_tok_s", "sps_tok_s", "sps_speedup"))
    if sps_tps is not None and speedup is not None:
        raise OuroborosError(f"{where}: give {name('sps_tok_s')} or {name('sps_speedup')}, not both")
    if vanilla is None and speedup is None:
        raise OuroborosError(f"{where}: give {name('vanilla_tok_s')} with {name('sps_tok_s')} or {name('sps_speedup')}"
                             f", or {name('sps_speedup')} alone")
    if sps_tps is None and speedup is None and eta is None:
        raise OuroborosError(f"{where}: give the SpS figures: {name('sps_tok_s')}, {name('sps_speedup')} or "
                             f"{name('sps_block_efficiency')}")
    if sps_tps is not None and vanilla is not None and eta is not None and sps_tps > eta * vanilla:
        # a step costs one target forward at least: SpS is at most eta x vanilla
        raise OuroborosError(
            f"{where}: {name('sps_tok_s')} {sps_tps:g} is {sps_tps / vanilla:.3g}x {name('vanilla_tok_s')} "
            f"{vanilla:g}, more than the SpS block efficiency {eta:g} allows (speculative decoding is at most eta "
            "x faster: each step costs one target forward at least)")
    if speedup is not None and eta is not None and speedup > eta:
        raise OuroborosError(f"{where}: {name('sps_speedup')} {speedup:g} is more than the SpS block efficiency "
                             f"{eta:g} allows (speculative decoding is at most eta x faster: each step costs one "
                             "target forward at least)")
    x = speedup if speedup is not None else None if sps_tps is None or vanilla is None else sps_tps / vanilla
    top = eta_top(sps, max_new)
    if eta is None and x is not None and x > top:
        raise OuroborosError(f"{where}: an SpS speedup of {x:.3g}x is more than "
                             + (f"max_new_tokens = {top}" if sps == "hf" else f"gamma + 1 = {top}")
                             + " allows (the most new tokens a target forward brings)")
    if mean_eta is not None and not 1 <= finite(mean_eta, "sps.mean_accepted_tokens", where) <= top:
        raise OuroborosError(f"{where}: sps.mean_accepted_tokens must be in [1, {top}] (a target forward brings 1 to "
                             + (f"max_new_tokens = {top}" if sps == "hf" else f"gamma + 1 = {top}")
                             + f" new tokens), got {mean_eta:g}")
    corpus = d.get("corpus") or default_corpus(key)
    if corpus not in CORPORA:
        raise OuroborosError(f"{where}: corpus must be one of {', '.join(CORPORA)}, got {corpus!r}")
    la, ou = held_out(d.get("held_out"), where)
    return Task(name=str(d.get("name") or key), corpus=corpus, max_new=max_new, prompt_len=prompt_len,
                vanilla_tps=vanilla or 0.0, sps_eta=float(eta or 0.0), sps_tps=sps_tps, sps=sps,
                sps_speedup=speedup, mean_eta=None if mean_eta is None else float(mean_eta),
                gamma=int(ou.get("gamma", 4)), W=int(ou.get("W", 20)), N=int(ou.get("N", 7)), K=int(ou.get("K", 3)),
                la_tps=la.get("tok_s"), la_eta=la.get("block_efficiency", la.get("mean_accepted_tokens")),
                ouro_tps=ou.get("tok_s"), ouro_eta=ou.get("block_efficiency", ou.get("mean_accepted_tokens")),
                key=key, model=model, hardware=hardware, text_profile=text_profile_of(d, model, where),
                answer_len=answer_len)


def text_profile_of(d: dict[str, Any], model: str, where: str) -> str:
    """A task's `text_profile`: a conf/sim decision profile of the same pair (its prompts rendered as the task's)."""
    name = d.get("text_profile")
    if name is None:
        return ""
    from simulators.sim_profiles import load_profile

    check_name(str(name), f"{where}: text_profile")
    prof = load_profile(str(name))
    if prof.get("pair") != model:
        raise OuroborosError(f"{where}: text_profile {name} was fitted for pair {prof.get('pair')}, not {model}")
    return str(name)


def held_out(held: Any, where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A task's held-out figures checked (per strategy: tok_s, speedup > 0; block_efficiency, mean_accepted_tokens
    >= 1; Ouroboros' gamma, W, N, K positive integers): (lookahead's, Ouroboros'), what the checks compare with."""
    held = held or {}
    if not isinstance(held, dict):
        raise OuroborosError(f"{where}: held_out must be a mapping (strategy: figures), got {held!r}")
    for m, fig in held.items():
        if not isinstance(fig, (dict, type(None))):
            raise OuroborosError(f"{where}: held_out.{m} must be a mapping (tok_s, speedup, ...), got {fig!r}")
        fig = fig or {}
        for k in ("tok_s", "speedup"):
            if fig.get(k) is not None:
                positive(fig[k], f"held_out.{m}.{k}", where)
        for k in ("block_efficiency", "mean_accepted_tokens"):
            if fig.get(k) is not None and finite(fig[k], f"held_out.{m}.{k}", where) < 1:
                raise OuroborosError(f"{where}: held_out.{m}.{k} must be >= 1, got {fig[k]}")
    la, ou = dict(held.get("lookahead") or {}), dict(held.get("ouroboros") or {})
    for k in ("gamma", "W", "N", "K"):
        if k in ou:
            positive(ou[k], f"held_out.ouroboros.{k}", where, integer=True)
    return la, ou


def check_names(model: str, hardware: str, where: str) -> None:
    for group, name in (("model", model), ("hardware", hardware)):
        check_name(name, f"{where}: {group}")
        if not (conf_root() / group / f"{name}.yaml").is_file():
            known = sorted(p.stem for p in (conf_root() / group).glob("*.yaml"))
            raise OuroborosError(f"{where}: unknown {group} {name!r}; known: {', '.join(known)}")


def load_tasks(path: str | Path) -> tuple[tuple[Task, ...], str]:
    """(tasks, source text) from a figures YAML: model, hardware, source, sps {gamma | schedule,
    mean_accepted_tokens}, tasks {key: ...} (the module doc)."""
    path = Path(path)
    if not path.is_file():
        raise OuroborosError(f"figures file {str(path)!r} does not exist")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise OuroborosError(f"{path}: not YAML ({' '.join(str(e).split())})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tasks"), dict) or not doc["tasks"]:
        raise OuroborosError(f"{path}: needs model, hardware and tasks: {{<task>: {{vanilla_tok_s, ...}}}}")
    model, hardware = str(doc.get("model") or ""), str(doc.get("hardware") or "")
    check_names(model, hardware, str(path))
    sps_doc = doc.get("sps") or {}
    if not isinstance(sps_doc, dict):
        raise OuroborosError(f"{path}: sps must be a mapping (schedule, gamma, mean_accepted_tokens), got {sps_doc!r}")
    unknown = sorted(set(sps_doc) - {"schedule", "gamma", "mean_accepted_tokens"})
    if unknown:
        raise OuroborosError(f"{path}: sps: unknown key {unknown[0]!r}; keys: gamma, mean_accepted_tokens, schedule")
    sps = sps_setting(sps_doc.get("gamma"), sps_doc.get("schedule"), f"{path}: sps")
    for k, v in doc["tasks"].items():
        check_name(str(k), f"{path}: task")
        if not isinstance(v, (dict, type(None))):
            raise OuroborosError(f"{path}: task {k}: needs its figures as a mapping (vanilla_tok_s, ...), got {v!r}")
    tasks = tuple(make_task(str(k), dict(v or {}), model, hardware, sps, f"{path}: task {k}",
                            mean_eta=sps_doc.get("mean_accepted_tokens")) for k, v in doc["tasks"].items())
    return tasks, str(doc.get("source") or path.name)


def records_task(path: str, model: str, task: str, hardware: str, corpus: str | None) -> Task:
    """One task from a real run's records: the latest speculative point on backend hf and the vanilla point it
    was measured against (token/s of both, SpS block efficiency, its gamma / schedule, budget and prompt lengths)."""
    from ouroboros.running.sinks import load_records

    if not Path(path).exists():
        raise OuroborosError(f"--records {path!r} does not exist")
    recs = [r for r in load_records(path) if r.backend == "hf"]
    by_id = {r.point_id: r for r in recs}
    sps = [r for r in recs if r.strategy == "speculative" and r.baseline_id in by_id
           and by_id[r.baseline_id or ""].strategy == "vanilla"
           and not (r.config.get("sampling") or {}).get("temperature")]
    if not sps:
        raise OuroborosError(f"--records {path}: no speculative point on backend=hf with its vanilla baseline")
    s = max(sps, key=lambda r: r.time)
    v = by_id[s.baseline_id or ""]
    p = s.params or {}
    budget = s.max_new_tokens
    lens = [q["prompt_len"] for q in s.prompts]
    d = {"name": task, "corpus": corpus, "prompt_len": max(1, round(sum(lens) / len(lens))),
         "max_new_tokens": max(budget) if isinstance(budget, list) else budget,
         "vanilla_tok_s": v.totals["tokens_per_s"], "sps_tok_s": s.totals["tokens_per_s"],
         "sps_block_efficiency": s.totals["block_efficiency"]}
    sched = "hf" if p.get("schedule") == "hf" else None
    setting = sps_setting(None if sched else p.get("gamma"), sched, f"--records {path}")
    return make_task(task, d, model, hardware, setting, f"--records {path}")
