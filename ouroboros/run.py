"""`python -m ouroboros.run [model=...] [strategy=...] [strategy.params.gamma=...]`: one point (one strategy)
plus its vanilla baseline, both measured in this process; prints a table, appends JSONL records, mirrors them to
wandb (offline by default).

Also the building blocks the sweep and the tuner share:
- `Session`: a loaded backend pair (hf: transformers models; sim: the simulator) + its prompt set;
- `Executor`: measures points through `ouroboros.harness.run_strategy`, reuses sessions and baselines, writes
  records (`ouroboros.sinks.RecordFile`) and mirrors (`WandbMirror`), optionally resuming from the record file;
- `make_record` / `format_table`: the record layout and the console table.

Every number comes from ouroboros.metrics (RunResult.totals(), PromptResult.summary(), speedup()); this module
only arranges them. It knows the Hydra root config only as a `RunConfig` (ouroboros.config).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import hydra
from omegaconf import DictConfig
from tqdm.auto import tqdm

from ouroboros.backends.base import Backend, OuroborosError, report_error
from ouroboros.config import (
    RunConfig,
    apply_explicit,
    check_overrides,
    explicit_notices,
    point_id,
    point_key,
    strategy_params,
    validate,
)
from ouroboros.datasets import Prompt, fit_context, load_prompts
from ouroboros.divergence import divergences
from ouroboros.harness import Job, PromptRunner, StrategyRun, StrategyRunner, run_interleaved, run_prompts
from ouroboros.metrics import (
    PromptResult,
    RunResult,
    prompt_dict,
    prompt_from_dict,
    speedup,
    speedup_mean_speed,
    step_dict,
)
from ouroboros.sinks import SCHEMA_VERSION, RecordFile, WandbMirror, band_text, prompt_line, summary_line
from ouroboros.strategies import check_lengths, check_trees, get_spec, is_peer


# ----------------------------------------------------------------------------------------------- sessions
@dataclass
class Session:
    backend: str                     # "hf" | "sim"
    target: Backend
    draft: Backend | None
    eos_ids: tuple[int, ...]
    prompts: list[Prompt]
    hardware: dict[str, Any]         # what the clock measures: this machine (hf) or the profile (sim)
    tokenizer: Any = None            # decodes outputs into the record's `text` (None: ids only)
    margin: Callable[[list[int]], float] | None = None   # target's top-2 logit margin after a prefix (hf only)
    context: int = 0                 # the pair's model context (tokens): prompt + new tokens fit in it


def _pair_key(run: RunConfig) -> str:
    sim = [run.hardware, run.sim] if run.backend_kind == "sim" else None
    return json.dumps([run.model, dataclasses.asdict(run.backend), run.backend_kind, sim, run.seed], sort_keys=True,
                      default=str)


def load_backends(run: RunConfig) -> tuple[Backend, Backend | None, Any, tuple[int, ...], Any]:
    """(target, draft, tokenizer, eos_ids, sim pair or None) for the run's backend."""
    if run.backend_kind == "sim":
        from simulators import make_pair

        pair = make_pair(run.model, run.hardware or {}, run.sim, seed=run.seed)
        return pair.target, pair.draft, pair.tokenizer, tuple(pair.eos_ids), pair
    import torch

    from ouroboros.backends.hf import HFBackend
    from ouroboros.models import load_pair

    if run.backend.threads:
        torch.set_num_threads(run.backend.threads)
    loaded = load_pair(run.model, dtype=run.backend.dtype, device=run.backend.device)
    target = HFBackend(loaded.target, name="target")
    draft = HFBackend(loaded.draft, name="draft") if loaded.draft is not None else None
    return target, draft, loaded.tokenizer, tuple(loaded.eos_ids), None


def session_prompts(run: RunConfig, tokenizer: Any, vocab_size: int, sim_pair: Any) -> list[Prompt]:
    """The dataset's prompts; on sim with the `synthetic` dataset, the simulator's embedded prompts instead
    (random ids mean nothing to a surrogate LM; its prompts come from the surrogate's corpus)."""
    if sim_pair is not None and run.dataset.get("kind") == "synthetic":
        return sim_pair.default_prompts(int(run.dataset.get("num_prompts", 8)), run.seed)
    return load_prompts(run.dataset, tokenizer, vocab_size, run.seed)


def stock_models(sess: Session) -> tuple[Any, Any]:
    """The transformers models behind an hf session's backends (the peers call their `generate`)."""
    from ouroboros.backends.hf import HFBackend

    assert isinstance(sess.target, HFBackend) and (sess.draft is None or isinstance(sess.draft, HFBackend))
    return sess.target.model, (sess.draft.model if sess.draft is not None else None)


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": platform.machine(), "system": platform.system(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        info["cpu"] = platform.processor() or None
    if "torch" in sys.modules:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def open_session(run: RunConfig) -> Session:
    target, draft, tokenizer, eos_ids, sim_pair = load_backends(run)
    prompts = session_prompts(run, tokenizer, target.vocab_size, sim_pair)
    context = min(b.max_context for b in (target, draft) if b is not None)
    prompts, skipped = fit_context(prompts, context, bool(run.dataset.get("skip_too_long")))
    if skipped:
        print(f"warning: skipped {len(skipped)} prompt(s) longer than the model context of {context} tokens: "
              f"{', '.join(skipped)}", file=sys.stderr)
    if not prompts:
        raise OuroborosError("the dataset gave no prompts")
    if run.backend_kind == "sim":   # the profile as simulated: sim.placement / sim.devices override its own
        hardware = {**(run.hardware or {}), **{k: run.sim[k] for k in ("placement", "devices") if run.sim.get(k)}}
    else:
        hardware = machine_info()
    margin = None
    if run.backend_kind == "hf":
        from ouroboros.backends.hf import HFBackend

        assert isinstance(target, HFBackend)
        margin = target.top2_margin
    return Session(run.backend_kind, target, draft, eos_ids, prompts, hardware, tokenizer, margin, context)


@functools.cache
def versions() -> dict[str, str | None]:
    import importlib.metadata as md

    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("ouroboros-bench", "torch", "transformers", "hydra-core", "omegaconf", "wandb"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out["git"] = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True,
                                    text=True, timeout=5).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        out["git"] = None
    return out


# ----------------------------------------------------------------------------------------------- records
def label_of(run: RunConfig, always: Collection[str] = ()) -> str:
    """Display name: the strategy and the params that differ from its dataclass defaults, plus those in `always`
    (a sweep's swept params, shown even at their default values)."""
    base = strategy_params(run.strategy.name)
    shown = {k: v for k, v in strategy_params(run.strategy.name, run.strategy.params).items()
             if base.get(k) != v or k in always}
    return run.strategy.name + "".join(f" {k}={v}" for k, v in shown.items())


def request_id(prompt_id: str, round_: int) -> str:
    """A served request's id: the prompt's, with `@r<k>` when the requests cycle through the prompts again."""
    return prompt_id if round_ == 0 else f"{prompt_id}@r{round_}"


def make_record(run: RunConfig, result: RunResult, session: Session, *, label: str, baseline: RunResult | None,
                baseline_id: str | None, sweep: str, step_records: bool) -> dict[str, Any]:
    prompts = []
    categories = {q.id: q.category for q in session.prompts}
    prompt_ids = {q.id: q.ids for q in session.prompts}
    for p in result.prompts:
        base_id = p.prompt_id.rsplit("@r", 1)[0]
        categories.setdefault(p.prompt_id, categories.get(base_id, ""))
        prompt_ids.setdefault(p.prompt_id, prompt_ids.get(base_id, []))
    for p in result.prompts:
        s = p.summary()
        s["output"] = p.output
        s["accept_lengths"] = [r.new_tokens for r in p.steps]  # tokens per target forward (Spec-Bench's)
        s["category"] = categories.get(p.prompt_id, "")
        if session.tokenizer is not None:
            s["text"] = decode_text(session.tokenizer, p.output)
        if step_records:
            s["steps"] = [step_dict(r) for r in p.steps]
        prompts.append(s)
    budgets = sorted(set(effective_budgets(session, [p.max_new_tokens or run.max_new_tokens
                                                     for p in session.prompts])))
    same, diverged = None, []
    sampled = None if run.sampling.greedy else sampled_text(run)
    if baseline is not None and sampled is None:   # sampled outputs are not compared (sampled_text)
        n_same = sum(a.output == b.output for a, b in zip(baseline.prompts, result.prompts, strict=True))
        same = f"{n_same}/{len(result.prompts)}"
        diverged = divergences(baseline, result, prompt_ids, session.margin)
    return {"schema": SCHEMA_VERSION, "record_id": uuid.uuid4().hex, "point_id": point_id(point_key(run)),
            "baseline_id": baseline_id, "time": time.time(), "sweep": sweep, "label": label,
            "max_new_tokens": budgets[0] if len(budgets) == 1 else budgets,   # the budget(s) the prompts had
            "strategy": run.strategy.name, "params": point_key(run)["strategy"]["params"],
            "backend": session.backend, "hardware": session.hardware, "versions": versions(),
            "config": dataclasses.asdict(run), "totals": result.totals(),
            "speedup": serving_speedup(baseline, result) if baseline is not None else None,
            "speedup_specbench": speedup_mean_speed(baseline, result) if baseline is not None else None,
            "identical_to_baseline": same, "divergences": [dataclasses.asdict(d) for d in diverged],
            **({"sampled": sampled} if sampled else {}),
            "prompts": prompts, **({"serving": result.serving} if result.serving is not None else {}),
            **({"decisions": sim_decisions(run)} if session.backend == "sim" else {})}


def sampled_text(run: RunConfig) -> str:
    """What a sampled point's outputs mean for losslessness: exact sampling draws from the target's distribution,
    but not the same tokens as an independently sampled baseline, so outputs are not compared."""
    sp = run.sampling
    knobs = ", ".join([f"T={sp.temperature:g}"] + ([f"top_p={sp.top_p:g}"] if sp.top_p < 1 else [])
                      + ([f"top_k={sp.top_k}"] if sp.top_k else []))
    return (f"sampled ({knobs}): exactness is distribution-tested (tests/test_sampling.py); outputs are not "
            "compared with the baseline's")


def sim_decisions(run: RunConfig) -> dict[str, Any]:
    """A simulated record's `decisions`: where its tokens come from and its strategy's measured error band."""
    from simulators.trust import record_decisions

    return record_decisions(run.sim, run.strategy.name)


def serving_speedup(baseline: RunResult, result: RunResult) -> float:
    """The paper's speedup (total time over total time); for served points, the baseline's makespan over this
    point's at the same load (same requests): the throughput ratio."""
    if result.serving is not None and baseline.serving is not None:
        return baseline.serving["makespan_s"] / result.serving["makespan_s"]
    return speedup(baseline, result)


def decode_text(tokenizer: Any, ids: list[int]) -> str:
    try:
        return tokenizer.decode(ids, skip_special_tokens=True)   # transformers tokenizers
    except TypeError:
        return tokenizer.decode(ids)                            # the simulator's surrogate tokenizer


def result_from_record(rec: dict) -> RunResult:
    """A RunResult rebuilt from a record's per-prompt results (no steps): enough for `speedup` and output checks."""
    return RunResult(strategy=rec["label"], serving=rec.get("serving"), prompts=[
        PromptResult(prompt_id=p["prompt_id"], prompt_len=p["prompt_len"], output=list(p["output"]),
                     elapsed_s=p["elapsed_s"], prefill_s=p["prefill_s"], stop_reason=p["stop_reason"],
                     proposer_stats=dict(p.get("proposer_stats", {}))) for p in rec["prompts"]])


def _budget(rec: dict) -> str:
    b = rec.get("max_new_tokens")
    if b is None:
        return "?"
    return str(b) if isinstance(b, int) else f"{min(b)}-{max(b)} (per prompt)"


def _machine(rec: dict) -> str:
    hw = rec.get("hardware") or {}
    if rec.get("backend") == "sim":
        return f"{hw.get('name')} ({hw.get('devices')} device(s), {hw.get('placement')}; modelled clock)"
    return f"{hw.get('cpu') or hw.get('machine') or 'this machine'} (wall clock)"


def settings_lines(records: list[dict]) -> list[str]:
    """What shapes the table's numbers: budget, hardware and placement, and per strategy the params every one of
    its points shares (those that differ from the defaults; the labels name the rest)."""
    def one(fn: Callable[[dict], str]) -> str:
        vals = list(dict.fromkeys(fn(r) for r in records))
        return vals[0] if len(vals) == 1 else "varies: " + ", ".join(vals)

    lines = [f"new tokens per prompt: {one(_budget)}; hardware: {one(_machine)}"]
    lines += list(dict.fromkeys(r["sampled"] for r in records if r.get("sampled")))
    for name in dict.fromkeys(r["strategy"] for r in records):
        recs = [r for r in records if r["strategy"] == name]
        base = strategy_params(name)
        shared = {k: v for k, v in recs[0]["params"].items()
                  if base.get(k) != v and all(r["params"].get(k) == v for r in recs)}
        if shared:
            lines.append(f"{name} at every point: " + ", ".join(f"{k}={v}" for k, v in shared.items()))
    sims = [r for r in records if r.get("decisions")]
    if sims:
        lines.append("decisions (simulated points): " + one(lambda r: decisions_text(r) if r.get("decisions") else
                                                            "real"))
        measured = list(dict.fromkeys(b["measured_by"].split(" --")[0] + f", commit {b['commit']}" for r in sims
                                      if (b := r["decisions"].get("band"))))
        lines.append("±: the central 80% of the errors measured for this source and strategy"
                     + (f" ({'; '.join(measured)})" if measured else "") + "; ?: not measured. rank: by speedup, "
                     "'=' where bands overlap (a tie, not an order)")
    return lines


def decisions_text(rec: dict) -> str:
    d = rec["decisions"]
    return f"{d['label']}, {d['fitted_to']}"


def speedup_ranks(records: list[dict]) -> list[str]:
    """Per record: its rank by speedup among the records of its baseline, counting only the points whose whole band
    lies above its own ('=' marks a rank it shares: overlapping bands are a tie); '?' without a measured band."""
    def interval(r: dict) -> tuple[float, float] | None:
        sp, b = r.get("speedup"), ((r.get("decisions") or {}).get("band") or {}).get("speedup")
        return None if sp is None or b is None else (sp * (1 - b), sp * (1 + b))

    spans = [interval(r) for r in records]
    ranks = []
    for r, me in zip(records, spans, strict=True):
        if me is None:
            ranks.append("?" if r.get("decisions") else "-")
            continue
        peers = [s for q, s in zip(records, spans, strict=True) if s is not None
                 and q.get("baseline_id") == r.get("baseline_id")]
        ranks.append(str(1 + sum(s[0] > me[1] for s in peers)))
    shared = {k for k in ranks if k.isdigit() and ranks.count(k) > 1}
    return ["=" + k if k in shared else k for k in ranks]


def format_table(records: list[dict]) -> str:
    banded = any(r.get("decisions") for r in records)
    head = (f"{'point':<44}{'tokens':>8}{'seconds':>10}{'tok/s':>10}{'speedup':>9}{'±':>6}{'SB spd':>8}{'eta':>7}"
            f"{'±':>6}{'A':>7}{'#Match':>8}{'same':>11}{'rank':>6}" if banded else
            f"{'point':<44}{'tokens':>8}{'seconds':>10}{'tok/s':>10}{'speedup':>9}{'SB spd':>8}{'eta':>7}{'A':>7}"
            f"{'#Match':>8}{'same':>11}")
    lines = [*settings_lines(records), head, "-" * len(head)] if records else [head, "-" * len(head)]
    ranks = speedup_ranks(records) if banded else []
    for i, r in enumerate(records):
        t, sp, sb = r["totals"], r.get("speedup"), r.get("speedup_specbench")
        sv = r.get("serving")
        secs, rate = (sv["makespan_s"], sv["throughput_tok_s"]) if sv else (t["elapsed_s"], t["tokens_per_s"])
        spd, eta = f"{'-' if sp is None else f'{sp:.2f}x':>9}", f"{t['block_efficiency']:>7.2f}"
        if banded:
            spd += f"{band_text(r, 'speedup') or '-':>6}"
            eta += f"{band_text(r, 'block_efficiency') or '-':>6}"
        lines.append(f"{r['label'][:43]:<44}{t['new_tokens']:>8}{secs:>10.3f}{rate:>10.1f}"
                     f"{spd}{'-' if sb is None else f'{sb:.2f}x':>8}{eta}"
                     f"{t['accepted_length']:>7.2f}{t['match_per_forward']:>8.2f}"
                     f"{r.get('identical_to_baseline') or ('sampled' if r.get('sampled') else '-'):>11}"
                     + (f"{ranks[i]:>6}" if banded else ""))
    lines.append("speedup: baseline time / time (the paper's); SB spd: mean per-prompt tok/s over the baseline's "
                 "(Spec-Bench's)")
    served = [r for r in records if r.get("serving")]
    if served:
        lines.append("served points (serve.concurrency): seconds = makespan, tok/s = throughput, speedup = the "
                     "baseline's makespan / this one's at the same load")
        head2 = (f"{'served point':<44}{'C':>5}{'batch':>7}{'latency p50':>13}{'p99':>8}{'TTFT p50':>10}"
                 f"{'TPOT p50':>10}")
        lines += [head2, "-" * len(head2)]
        for r in served:
            sv = r["serving"]
            lines.append(f"{r['label'][:43]:<44}{sv['concurrency']:>5}{sv['mean_batch']:>7.1f}"
                         f"{sv['latency_s_p50']:>13.3f}{sv['latency_s_p99']:>8.3f}{sv['ttft_s_p50']:>10.3f}"
                         f"{sv['tpot_s_p50']:>10.4f}")
    lines += peer_ratio_lines(records)
    for r in records:
        for d in r.get("divergences") or []:
            m = "?" if d["margin"] is None else f"{d['margin']:.3f}"
            lines.append(f"differs: {r['label']} prompt {d['prompt_id']} at output position {d['position']} "
                         f"(baseline {d['baseline_token']}, this {d['other_token']}); target top-2 logit margin {m}")
    return "\n".join(lines)


def peer_ratio_lines(records: list[dict]) -> list[str]:
    """ours / peer tokens per second, for each of our points and each point of the peer doing the same job
    (vanilla / hf_greedy, speculative / hf_assisted, pld / hf_pld) measured on the same backend and prompts."""
    from ouroboros.peer_configs import PEERS

    lines = []
    for peer in (r for r in records if r["strategy"] in PEERS):
        for ours in (r for r in records if r["strategy"] == PEERS[peer["strategy"]].counterpart):
            if ours.get("baseline_id") != peer.get("baseline_id"):
                continue   # measured against another baseline (other prompts, models or budget): no ratio
            a, b = ours["totals"]["tokens_per_s"], peer["totals"]["tokens_per_s"]
            lines.append(f"ours/peer: {ours['label']} / {peer['label']}: {a:.2f} / {b:.2f} tok/s = "
                         f"{a / b if b else float('nan'):.3f}x")
    return lines


# ----------------------------------------------------------------------------------------------- executor
@dataclass
class Point:
    run: RunConfig
    label: str

    @property
    def id(self) -> str:
        return point_id(point_key(self.run))

    @property
    def baseline_id(self) -> str | None:
        b = self.run.baseline
        return point_id(point_key(self.run, strategy=b)) if b else None

    def baseline_point(self) -> Point:
        assert self.run.baseline
        b = dataclasses.replace(self.run, strategy=dataclasses.replace(self.run.strategy, name=self.run.baseline,
                                                                       params={}))
        return Point(b, self.run.baseline)


@dataclass
class Executor:
    """Measures points; keeps sessions (one per model/backend/hardware/dataset) and baseline results."""

    records: RecordFile | None
    mirror: WandbMirror | None = None
    resume: bool = True
    console: bool = True
    sweep: str = "single"
    step_records: bool = False
    on_record: Callable[[dict], None] | None = None
    progress: bool = False      # progress bars (make_executor: logger.progress and stderr is a terminal)
    recorded: int = 0           # records appended by this executor (the interrupt message counts them)
    notes: list[str] = field(default_factory=list)   # `note:` lines printed once `check` has passed
    process: str = field(default_factory=lambda: uuid.uuid4().hex[:12])   # this process's id in wall-clock records
    _sessions: dict[str, Session] = field(default_factory=dict)
    _results: dict[str, RunResult] = field(default_factory=dict)   # point_id -> result measured or reloaded
    _kept: dict[str, dict[str, PromptResult]] = field(default_factory=dict)  # point_id -> prompts decoded here
    # Wall clocks: a speedup's two times must come from one process. _redo: points (and their baselines) measured
    # again here; _reuse: point_id -> prompts decoded by an earlier process that this one may keep (those whose
    # baseline prompt was decoded by that same process); _procs: point_id -> prompt_id -> the process that decoded it
    _redo: set[str] = field(default_factory=set)
    _reuse: dict[str, set[str]] = field(default_factory=dict)
    _procs: dict[str, dict[str, str]] = field(default_factory=dict)
    _planned: set[str] = field(default_factory=set)

    def session(self, run: RunConfig) -> Session:
        key = _pair_key(run) + json.dumps(run.dataset, sort_keys=True, default=str)
        if key not in self._sessions:
            self._sessions[key] = open_session(run)
        return self._sessions[key]

    def check(self, points: list[Point]) -> None:
        """Before anything is measured: load each unfinished point's models and refuse a strategy that would give
        a token tree to a model that scores chains only (one line naming the model type and the reason)."""
        self._plan_wall_clock(points)
        for p in points:
            if self._done(p.id) is None:
                sess = self.session(p.run)
                name = p.run.strategy.name
                if is_peer(name):
                    from ouroboros.peers import check_peer_models

                    check_peer_models(name, stock_models(sess)[1], sess.eos_ids)
                check_trees(name, sess.target, sess.draft if get_spec(name).needs_draft_model else None)
                if not is_peer(name):
                    check_lengths(name, strategy_params(name, p.run.strategy.params), sess.context)
                note = budget_note(p, sess, self._budgets(p, sess))
                if note and note not in self.notes:
                    self.notes.append(note)
                if p.run.serve.concurrency and sess.backend == "sim":
                    check_serving_memory(p, sess, self._budgets(p, sess))
                if p.run.serve.concurrency >= 2 and sess.backend == "hf":
                    check_batching(p, sess)
        for note in self.notes:   # after every check: a bad input stays one error line
            print(f"note: {note}", file=sys.stderr)
        self.notes = []

    def _done(self, pid: str) -> dict | None:
        if pid in self._redo or not self.resume or self.records is None:
            return None
        return self.records.index().get(pid)

    @staticmethod
    def wall(run: RunConfig) -> bool:
        """Measured on a wall clock (real models): times from two processes are not comparable."""
        return run.backend_kind != "sim"

    def _plan_wall_clock(self, points: list[Point]) -> None:
        """Which wall-clock points a resumed run may reuse: a recorded point whose every prompt was timed in the
        same process as its baseline's (`paired_processes`); any other is measured again here, and so is its
        baseline (for the prompts it decodes here). Simulated points are deterministic and reused freely."""
        self._planned.update(p.id for p in points)
        if not self.resume or self.records is None:
            return
        index = self.records.index()
        for p in points:
            bid = p.baseline_id
            if not self.wall(p.run) or bid is None or p.run.baseline == p.run.strategy.name:
                continue
            rec = index.get(p.id)
            if rec is None or not rec.get("paired_processes"):
                self._redo.update({p.id, bid})
        for bid in {p.baseline_id for p in points if p.id in self._redo and p.baseline_id}:
            deps = [p for p in points if p.baseline_id == bid and p.id in self._redo and p.id != bid]
            base = self.records.finished_processes(bid)
            common = set(base)
            for q in deps:   # prompts q may keep: decoded by the process that decoded the baseline's
                mine = self.records.finished_processes(q.id)
                common &= {k for k, proc in mine.items() if proc and base.get(k) == proc}
            for pid in [bid, *(q.id for q in deps)]:
                self._reuse[pid] = set(common)

    def run_point(self, point: Point) -> tuple[dict, bool]:
        """(record, measured now?) for `point`, measuring its baseline first when needed."""
        if point.id not in self._planned:   # a point `check` never saw (the tuner's later stages)
            self._plan_wall_clock([point])
        done = self._done(point.id)
        if done is not None:
            return done, False
        base = None
        if point.run.baseline and point.run.baseline != point.run.strategy.name:
            base = self._baseline(point)
        with self._claim(point.id) as other:
            if other is not None:
                return other, False
            rec = self._measure(point, base, point.baseline_id if base is not None else None)
        return rec, True

    def _baseline(self, point: Point) -> RunResult:
        bid = point.baseline_id
        assert bid is not None
        if bid not in self._results:
            done = self._done(bid)
            if done is None:
                with self._claim(bid) as other:
                    done = other if other is not None else self._measure(point.baseline_point(), None, None)
            self._results.setdefault(bid, result_from_record(done))
        return self._results[bid]

    @contextlib.contextmanager
    def _claim(self, pid: str) -> Iterator[dict | None]:
        """Hold pid's lock; yields the record another worker finished meanwhile, else None. A wall-clock point this
        process measures again (`_redo`) takes no other process's record: its times would not pair with ours."""
        if self.records is None or not self.resume:
            yield None
            return
        with self.records.claim(pid) as other:
            yield None if pid in self._redo else other

    def interleaved(self, run: RunConfig) -> bool:
        if run.serve.concurrency:   # a served point decodes all its requests together
            return False
        return run.interleave if run.interleave is not None else run.backend_kind == "hf"

    def interleave(self, points: list[Point]) -> None:
        """Decode the unfinished points that share a session (same models and prompts) prompt by prompt in turn,
        when `interleaved(run)`: every point decodes prompt i (in an order rotating with i) before any starts
        prompt i + 1, so background load hits them alike. Each prompt is kept as it finishes (a prompt_result line
        in the records when resuming, else in memory); `run_point` then assembles the records from them."""
        groups: dict[str, list[Point]] = {}
        for p in points:
            if self.interleaved(p.run) and self._done(p.id) is None:
                key = _pair_key(p.run) + json.dumps([p.run.dataset, p.run.warmup], sort_keys=True, default=str)
                group = groups.setdefault(key, [])
                if all(q.id != p.id for q in group):
                    group.append(p)
        for group in groups.values():
            if len(group) < 2:
                continue
            with contextlib.ExitStack() as stack:  # claims in one order: two workers never wait on each other
                mine = [p for p in sorted(group, key=lambda q: q.id) if stack.enter_context(self._claim(p.id)) is None]
                mine.sort(key=group.index)
                if len(mine) < 2:
                    continue
                sess = self.session(mine[0].run)
                jobs = [Job(self._runner(p, sess), self._budgets(p, sess), self._finished(p.id), self._keeper(p.id))
                        for p in mine]
                ids = [q.id for q in sess.prompts]
                say = self._round_line(ids, jobs) if self.console else None
                run_interleaved(jobs, [q.ids for q in sess.prompts], ids, mine[0].run.warmup, self.progress, say)

    @staticmethod
    def _round_line(ids: list[str], jobs: list[Job]) -> Callable[[int], None]:
        def say(i: int) -> None:
            done = [(j.runner.label, j.results[ids[i]].elapsed_s) for j in jobs]
            tqdm.write(f"prompt {i + 1}/{len(ids)} {ids[i]}: " + "; ".join(f"{n} {t:.1f} s" for n, t in done))
        return say

    @staticmethod
    def _budgets(point: Point, sess: Session) -> list[int]:
        return [p.max_new_tokens or point.run.max_new_tokens for p in sess.prompts]

    def _runner(self, point: Point, sess: Session) -> PromptRunner:
        run = point.run
        if is_peer(run.strategy.name):   # transformers' own generate, on the same prompts, same record shape
            from ouroboros.peers import PeerRunner

            target, draft = stock_models(sess)
            return PeerRunner(run.strategy.name, dict(run.strategy.params), target, draft, sess.eos_ids,
                              point.label, run.sampling)
        return StrategyRunner(StrategyRun(run.strategy.name, dict(run.strategy.params), point.label), sess.target,
                              sess.draft, sess.eos_ids, run.sampling)

    def _finished(self, pid: str) -> dict[str, PromptResult]:
        """Prompts of point `pid` already decoded: by this executor, or (resuming) by a run stopped earlier. On a
        wall clock, an earlier process's prompts only where `_plan_wall_clock` paired them with the baseline's."""
        procs = self._procs.setdefault(pid, {})
        out = dict(self._kept.get(pid, {}))
        procs.update({k: self.process for k in out})
        if self.resume and self.records is not None:
            earlier = self.records.finished_processes(pid) if pid in self._reuse else {}
            for k, v in self.records.finished_prompts(pid).items():
                if k in out:
                    continue
                if pid in self._redo and k not in self._reuse.get(pid, set()):
                    continue   # decoded by another process than its baseline's prompt: decoded again here
                out[k] = prompt_from_dict(v)
                procs[k] = earlier.get(k, "")
        return out

    def _keeper(self, pid: str) -> Callable[[PromptResult], None]:
        """Keep each prompt of `pid` as it finishes (appended to the records when resuming: a killed run loses at
        most the prompt it was decoding)."""
        def keep(r: PromptResult) -> None:
            self._kept.setdefault(pid, {})[r.prompt_id] = r
            self._procs.setdefault(pid, {})[r.prompt_id] = self.process
            if self.resume and self.records is not None:
                self.records.append(prompt_line(pid, prompt_dict(r), self.process))
        return keep

    def _serve(self, point: Point, sess: Session) -> RunResult:
        """A served point (serve.concurrency >= 1): every request decoded under load, continuous batching."""
        from ouroboros.batch import Load, Request, engine_for, serve, slot_factory

        run, sv = point.run, point.run.serve
        budgets = self._budgets(point, sess)
        n, m = sv.requests or len(sess.prompts), len(sess.prompts)
        reqs = [Request(list(sess.prompts[i % m].ids), budgets[i % m], request_id(sess.prompts[i % m].id, i // m))
                for i in range(n)]
        load = Load(sv.concurrency, sv.rate, sv.seed)
        prefill = sv.prefill or ("batched" if sess.backend == "sim" else "separate")
        draft = sess.draft if get_spec(run.strategy.name).needs_draft_model else None

        def slots():
            return slot_factory(sess.target, draft, run.strategy.name, dict(run.strategy.params), sv.load_aware,
                                sv.max_draft, sv.shared_pool)
        if run.warmup:   # one short request on a throw-away slot: allocations and kernel choice off the clock
            serve([Request(reqs[0].prompt, min(8, reqs[0].budget), "warmup")], Load(1),
                  engine_for(sess.target, prefill), slots(), sess.eos_ids)
        out = serve(reqs, load, engine_for(sess.target, prefill), slots(), sess.eos_ids)
        return RunResult(strategy=point.label, prompts=[s.result for s in out.requests],
                         serving={**out.summary(load), "prefill": prefill})

    def _measure(self, point: Point, base: RunResult | None, baseline_id: str | None) -> dict:
        run = point.run
        sess = self.session(run)
        if run.serve.concurrency:
            result = self._serve(point, sess)
        else:
            result = run_prompts(self._runner(point, sess), [p.ids for p in sess.prompts], self._budgets(point, sess),
                                 [p.id for p in sess.prompts], run.warmup, self.progress, self._finished(point.id),
                                 self._keeper(point.id))
        if run.strategy.name == run.baseline:
            base, baseline_id = result, point.id
        self._results[point.id] = result
        self._redo.discard(point.id)
        rec = make_record(run, result, sess, label=point.label, baseline=base, baseline_id=baseline_id,
                          sweep=self.sweep, step_records=self.step_records)
        if self.wall(run):   # which process timed each prompt, and whether the baseline's were timed alike
            procs = self._procs.get(point.id, {})
            rec["processes"] = {p.prompt_id: procs.get(p.prompt_id, self.process) for p in result.prompts}
            if baseline_id is not None:
                theirs = self._procs.get(baseline_id, {}) if baseline_id != point.id else rec["processes"]
                rec["paired_processes"] = all(theirs.get(k, self.process) == v for k, v in rec["processes"].items())
        with interrupts_deferred():   # a Ctrl-C here waits: the record and its wandb run land together
            if self.records is not None:
                self.records.append(rec)
            if self.mirror is not None:
                self.mirror.log_point(rec)
            self.recorded += 1
        if self.on_record is not None:
            self.on_record(rec)
        return rec


def check_batching(point: Point, sess: Session) -> None:
    """Serving at concurrency >= 2 on real models: every model the strategy runs must take padded batched
    forwards (not sliding windows, not ALiBi); refused in one line before anything is measured."""
    from ouroboros.backends.hf import HFBackend

    c = point.run.serve.concurrency
    needs = [sess.target] + ([sess.draft] if sess.draft is not None and get_spec(point.run.strategy.name)
                             .needs_draft_model else [])
    for be in needs:
        why = be.batch_refusal() if isinstance(be, HFBackend) else None
        if why:
            raise OuroborosError(f"serve.concurrency={c} decodes requests in batched forwards, but {why}: run every "
                                 "strategy on this model with serve.concurrency=0 or 1")


def budget_note(point: Point, sess: Session, budgets: list[int]) -> str | None:
    """A note when the model context leaves some prompt less room than its budget (decoding stops there)."""
    short = [(p, b, sess.context - len(p.ids)) for p, b in zip(sess.prompts, budgets, strict=True)
             if b > sess.context - len(p.ids)]
    if not short:
        return None
    room = min(r for _, _, r in short)
    return (f"max_new_tokens={max(b for _, b, _ in short)} does not fit the model context of {sess.context} tokens "
            f"for {len(short)} of {len(sess.prompts)} prompt(s): they stop when the context is full (as few as "
            f"{room} new tokens); the table shows the budgets in effect")


def effective_budgets(session: Session, budgets: list[int]) -> list[int]:
    """Each prompt's budget as decoding can spend it: at most what the context leaves after the prompt."""
    if not session.context:
        return budgets
    return [min(b, session.context - len(p.ids)) for p, b in zip(session.prompts, budgets, strict=True)]


def check_serving_memory(point: Point, sess: Session, budgets: list[int]) -> None:
    """A served simulated point: the weights + the KV caches of its `concurrency` largest requests must fit."""
    from simulators.pair import check_serving_fit

    run = point.run
    sizes = sorted((len(p.ids) + b for p, b in zip(sess.prompts, budgets, strict=True)), reverse=True)
    n = run.serve.requests or len(sizes)
    per_round = sizes * (-(-n // len(sizes)))   # requests cycle through the prompts
    c = run.serve.concurrency
    check_serving_fit(run.model, run.hardware or {}, run.sim, sum(sorted(per_round[:n], reverse=True)[:c]), c,
                      bool(get_spec(run.strategy.name).needs_draft_model))


def make_executor(run: RunConfig, resume: bool, sweep: str) -> Executor:
    w = run.logger.wandb
    mirror = WandbMirror(w.mode, w.project, w.entity, w.dir, w.tags, group=sweep)
    say = (lambda rec: tqdm.write(summary_line(rec))) if run.logger.console else None
    return Executor(RecordFile(run.out) if run.out else None, mirror, resume, run.logger.console, sweep,
                    run.logger.step_records, on_record=say,
                    progress=run.logger.console and run.logger.progress and sys.stderr.isatty())


def run_one(run: RunConfig, notes: list[str] | None = None) -> list[dict]:
    """The baseline and the strategy, both measured now (no resume): one table, records appended. `notes` are
    printed once the points have passed their checks."""
    ex = make_executor(run, resume=False, sweep="run")
    ex.notes = list(notes or [])
    point = Point(run, label_of(run))
    recs = []
    points = [point.baseline_point(), point] if run.baseline and run.baseline != run.strategy.name else [point]
    ex.check(points)
    with counted(ex):
        ex.interleave(points)
        recs += [ex.run_point(p)[0] for p in points]
    print(format_table(recs))
    if run.out:
        print(f"records appended to {run.out}")
    return recs


# ----------------------------------------------------------------------------------------------- interrupts
class Interrupted(Exception):
    """Ctrl-C or SIGTERM stopped the measurement after `recorded` records were appended."""

    def __init__(self, recorded: int):
        super().__init__(recorded)
        self.recorded = recorded


@contextlib.contextmanager
def counted(ex: Executor) -> Iterator[None]:
    """Turn a Ctrl-C (KeyboardInterrupt) into `Interrupted(records appended by ex)`."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(ex.recorded) from None


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT / SIGTERM until the block ends, then raise KeyboardInterrupt (main thread only; elsewhere the
    signals cannot be caught anyway)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if got:
        raise KeyboardInterrupt


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def entry(fn: Callable[[], Any]) -> Any:
    """Run an entry point body: a bad input prints `error: <one line>` and exits 2; Ctrl-C or SIGTERM prints
    `interrupted: N points recorded, rerun to resume` and exits 130 (every appended record is complete)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _sigterm)
    try:
        return fn()
    except OuroborosError as e:
        sys.exit(report_error(e))
    except (Interrupted, KeyboardInterrupt) as e:
        n = e.recorded if isinstance(e, Interrupted) else 0
        print(f"interrupted: {n} point{'s' if n != 1 else ''} recorded, rerun to resume", file=sys.stderr)
        sys.exit(130)


def explicit_run(cfg: DictConfig, late: list[str] | None = None) -> RunConfig:
    """The validated run with the command line's explicit values applied (ouroboros.config precedence); prints
    a one-line note for each setting the command line did not pick but that decides the numbers. Notes on the
    decisions' source go to `late` when given (printed once the points pass their checks: `Executor.notes`)."""
    from hydra.core.hydra_config import HydraConfig

    overrides = list(HydraConfig.get().overrides.task)
    run = apply_explicit(validate(cfg), overrides)
    for note in explicit_notices(run, overrides):
        if late is not None and is_late(note):
            late.append(note)
        else:
            print(f"note: {note}", file=sys.stderr)
    return run


def is_late(note: str) -> bool:
    """A note printed after the checks (the decisions' source: loading the simulated pair can still fail)."""
    return note.startswith("decisions:")


def hydra_cli(main: Callable[[], Any]) -> None:
    """Start a Hydra entry point (`main`, decorated with hydra.main) from the command line. Overrides that do not
    compose (`strategy=nope`, a typo'd key, `seed=abc`) print `error: <one line>` and exit 2 before Hydra starts;
    flags (--help, --cfg, -m, ...) go to Hydra as they are."""
    args = sys.argv[1:]
    if not any(a.startswith("-") for a in args):
        entry(lambda: check_overrides(args))
    main()


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    late: list[str] = []
    entry(lambda: run_one(explicit_run(cfg, late), late))


if __name__ == "__main__":
    hydra_cli(main)
