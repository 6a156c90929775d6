"""A pair's measured speed figures per task, as `Task`s: what `simulators calibrate measured` fits (vanilla token/s,
speculative token/s and block efficiency or accepted length, with the SpS draft length or schedule used) and what the
checks compare predictions with (`held_out`: lookahead and Ouroboros figures, never fitted).

Three ways in, one `Task`:
- `load_tasks(path)`: a YAML of several tasks (conf/calibration/yi34b_6b_a800x2.yaml, the paper's Yi-34B/6B figures
  with their citation, is one);
- `flag_task(...)`: one task typed as flags;
- `records_task(path, ...)`: a real run's records (`sweep=real_compare` or `run strategy=speculative` on backend=hf):
  the vanilla and speculative points measured against the same baseline.

Knows nothing of the simulator's clock or surrogates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ouroboros.backends.base import OuroborosError
from simulators.profiles import conf_root

CORPORA = ("code", "pycode", "prose")
CODE_TASKS = ("humaneval", "mbpp")
YI_FIGURES = conf_root() / "calibration" / "yi34b_6b_a800x2.yaml"


@dataclass(frozen=True)
class Task:
    name: str
    corpus: str                  # surrogate corpus standing in for the task's text
    max_new: int                 # the generation limit of the measured runs
    prompt_len: int              # typical prompt length (tokens): only the attention / KV costs use it
    vanilla_tps: float           # measured token/s (calibration)
    sps_eta: float               # measured SpS block efficiency (calibration)
    sps_tps: float | None = None  # measured SpS token/s (calibration)
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

    def pub_tps(self, m: str) -> float | None:
        return {"vanilla": self.vanilla_tps, "speculative": self.sps_tps, "lookahead": self.la_tps,
                "ouroboros": self.ouro_tps}[m]

    def pub_eta(self, m: str) -> float | None:
        return {"vanilla": 1.0, "speculative": self.sps_eta, "lookahead": self.la_eta, "ouroboros": self.ouro_eta}[m]

    def inputs(self) -> dict[str, Any]:
        """The figures a calibration fits (a profile's `fit.inputs`)."""
        out: dict[str, Any] = {"vanilla_tok_s": self.vanilla_tps}
        if self.sps_tps is not None:
            out["sps_tok_s"] = self.sps_tps
        out["sps_block_efficiency"] = self.sps_eta
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
    return v


def make_task(key: str, d: dict[str, Any], model: str, hardware: str, sps: str, where: str) -> Task:
    """One task from its figures (a YAML entry, flags or records), every value checked (one line on a bad one)."""
    known = {"name", "corpus", "prompt_len", "max_new_tokens", "vanilla_tok_s", "sps_tok_s", "sps_block_efficiency",
             "sps_accepted_length", "sps_gamma", "sps_schedule", "held_out"}
    unknown = sorted(set(d) - known)
    if unknown:
        raise OuroborosError(f"{where}: unknown key {unknown[0]!r}; keys: {', '.join(sorted(known))}")
    if "sps_gamma" in d or "sps_schedule" in d:
        sps = sps_setting(d.get("sps_gamma"), d.get("sps_schedule"), where)
    eta, acc = d.get("sps_block_efficiency"), d.get("sps_accepted_length")
    if (eta is None) == (acc is None):
        raise OuroborosError(f"{where}: give the SpS block efficiency or its accepted length (one of them)")
    eta = positive(eta, "sps_block_efficiency", where) if acc is None else positive(acc, "sps_accepted_length",
                                                                                     where) + 1.0
    if eta < 1:
        raise OuroborosError(f"{where}: an SpS block efficiency is >= 1 (one token per target forward at least), "
                             f"got {eta}")
    if sps != "hf" and eta > int(sps) + 1:
        raise OuroborosError(f"{where}: an SpS block efficiency of {eta} is more than gamma + 1 = {int(sps) + 1}")
    corpus = d.get("corpus") or default_corpus(key)
    if corpus not in CORPORA:
        raise OuroborosError(f"{where}: corpus must be one of {', '.join(CORPORA)}, got {corpus!r}")
    held = d.get("held_out") or {}
    la, ou = dict(held.get("lookahead") or {}), dict(held.get("ouroboros") or {})
    sps_tps = d.get("sps_tok_s")
    return Task(name=str(d.get("name") or key), corpus=corpus,
                max_new=positive(d.get("max_new_tokens"), "max_new_tokens", where, integer=True),
                prompt_len=positive(d.get("prompt_len"), "prompt_len", where, integer=True),
                vanilla_tps=float(positive(d.get("vanilla_tok_s"), "vanilla_tok_s", where)), sps_eta=float(eta),
                sps_tps=None if sps_tps is None else float(positive(sps_tps, "sps_tok_s", where)), sps=sps,
                gamma=int(ou.get("gamma", 4)), W=int(ou.get("W", 20)), N=int(ou.get("N", 7)), K=int(ou.get("K", 3)),
                la_tps=la.get("tok_s"), la_eta=la.get("block_efficiency"), ouro_tps=ou.get("tok_s"),
                ouro_eta=ou.get("block_efficiency"), key=key, model=model, hardware=hardware)


def check_names(model: str, hardware: str, where: str) -> None:
    for group, name in (("model", model), ("hardware", hardware)):
        if not (conf_root() / group / f"{name}.yaml").is_file():
            known = sorted(p.stem for p in (conf_root() / group).glob("*.yaml"))
            raise OuroborosError(f"{where}: unknown {group} {name!r}; known: {', '.join(known)}")


def load_tasks(path: str | Path) -> tuple[tuple[Task, ...], str]:
    """(tasks, source text) from a figures YAML: model, hardware, source, sps {gamma | schedule}, tasks {key: ...}."""
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
    sps = sps_setting(sps_doc.get("gamma"), sps_doc.get("schedule"), f"{path}: sps")
    tasks = tuple(make_task(str(k), dict(v or {}), model, hardware, sps, f"{path}: task {k}")
                  for k, v in doc["tasks"].items())
    return tasks, str(doc.get("source") or path.name)


def records_task(path: str, model: str, task: str, hardware: str, corpus: str | None) -> Task:
    """One task from a real run's records: the latest speculative point on backend hf and the vanilla point it
    was measured against (token/s of both, SpS block efficiency, its gamma / schedule, budget and prompt lengths)."""
    from ouroboros.sinks import load_records

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
