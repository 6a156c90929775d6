"""`python -m simulators check clock`: does the simulator's clock predict this machine? Real vs modelled time.

1. record: chosen strategies decode chosen prompts on a real pair (greedy, through the harness's runners,
   interleaved prompt by prompt as `ouroboros.sweep` does on real backends), each through its own `Recorder`s,
   so every run leaves a trace of its token decisions (`DIR/trace-<run>.json`) and its measured wall times
   (`DIR/real.jsonl`), both rewritten after every prompt, so a run stopped part way can still be replayed
   (`--replay-only`) on the prompts it finished;
2. replay: each run's trace is replayed on the `sim` backend (same strategy, same options, same prompts in the same
   order: the same forwards, k for k and ctx for ctx) under a hardware profile's clock, normally the one
   `python -m simulators calibrate clock` fitted on this machine (`--hardware cpu_local`);
3. compare per run: measured vs modelled seconds, in total and decode-only (without prefill), with the relative
   error; and that the replay made the real run's decisions (same outputs, no unrecorded context).

    python -m simulators calibrate clock --model qwen_coder --threads 1 --ks 1,2,3,4,6,8,12,16,24,33 --ctxs 96,192,288
    python -m simulators check clock --strategies vanilla,speculative:gamma=3,pld --limit 10 --max-new-tokens 32 \\
        --threads 1 --dir realcheck/

`--records R.jsonl` (repeatable) checks the clock alone on a real sweep's records, with no trace and nothing loaded:
every recorded step's target forward (k = its target tokens, ctx = the prompt plus the tokens committed before it)
and its draft forwards (rough: the step's draft tokens spread evenly over its draft forwards, at the same ctx) are
priced by the hardware profile's cost models and summed per point against the measured `verify_s` and `draft_s`.
The decisions are the real ones, so what differs is the clock's. Fit the clock on other records than you check it on.

`--replay-only` skips step 1 and replays the traces already in DIR (e.g. under another hardware profile: the same
decisions on an H100's clock). Not a test: timings are reported, never asserted.

`--batches 1,2,4`: also under load. Each run then decodes all its prompts with continuous batching
(ouroboros/serving/batch.py: one real batched forward per model per step, B requests at a time; `DIR/batch.jsonl`), and
the
same decisions (the trace of step 1) are replayed batch for batch on the simulator, whose clock charges the batched
cost model (`calibrate clock --batches`): measured vs modelled makespan and throughput per run and B.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from ouroboros.argparser import RunSpec, parse_kind, parse_runs
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.loop.metrics import PromptResult
from ouroboros.paths import check_out_dir
from ouroboros.prompts.datasets import Prompt
from ouroboros.running.harness import Job, StrategyRun, StrategyRunner, run_interleaved
from ouroboros.strategies import build_proposer, get_spec
from simulators.architectures import load_conf
from simulators.host import HostCharging
from simulators.pair import make_pair
from simulators.replay import (
    ISOLATED,
    WARMUP_TOKENS,
    load_trace,
    replays_warmup,
    save_trace,
    trace_name,
    trace_prompts,
    warm_up,
)


@dataclass
class Compared:
    run: str
    prompts: int
    real_s: float
    real_decode_s: float
    sim_s: float
    sim_decode_s: float
    same_outputs: int
    misses: int
    host_note: str = ""   # what the modelled clock charged of the strategy's host time (simulators/host.py)

    @property
    def err(self) -> float:
        return self.sim_s / self.real_s - 1

    @property
    def decode_err(self) -> float:
        return self.sim_decode_s / self.real_decode_s - 1


def dataset_cfg(args) -> dict[str, Any]:
    """The prompts as `dataset=<kind>` renders them: conf/dataset/<kind>.yaml's set values (its template, chat),
    then what the command line types (`--dataset kind key=value`, --limit, --ids, --max-new-tokens)."""
    typed = parse_kind(args.dataset, "dataset")
    try:
        base = {k: v for k, v in load_conf("dataset", typed["kind"]).items()
                if v is not None and not isinstance(v, (dict, list)) and "${" not in str(v) and k != "defaults"}
    except OuroborosError:   # a kind with no YAML of its own: the loader's defaults
        base = {}
    cfg = {**base, **typed}
    cfg.setdefault("limit", args.limit)
    if args.ids:
        cfg["ids"] = args.ids.split(",")
    cfg["max_new_tokens"] = args.max_new_tokens
    return cfg


def load_real(args) -> tuple[Any, list[Prompt], Any, Any]:
    """(loaded pair, prompts, target HFBackend, draft HFBackend or None) as the command line asks, with torch's
    threads set."""
    import torch

    from ouroboros.backends.hf import HFBackend
    from ouroboros.backends.models import load_pair
    from ouroboros.prompts.datasets import load_prompts

    if args.threads:
        torch.set_num_threads(args.threads)
    model_cfg = parse_kind(args.model, "model")
    data_cfg = dataset_cfg(args)
    pair = load_pair(model_cfg, dtype=args.dtype, device="cpu")
    vocab = int(pair.target.get_output_embeddings().weight.shape[0])  # type: ignore[operator]
    prompts = load_prompts(data_cfg, pair.tokenizer, vocab, 0)
    target = HFBackend(pair.target, name="target")
    draft = HFBackend(pair.draft, name="draft") if pair.draft is not None else None
    return pair, prompts, target, draft


def record(args, specs: list[RunSpec], out_dir: str) -> None:
    """Step 1: real runs through the harness's runners (`ouroboros.running.harness.StrategyRunner`, interleaved prompt
    by prompt by `run_interleaved`), each on its own pair of Recorders."""
    from simulators.replay import Recorder

    pair, prompts, target, draft = load_real(args)
    recs = [(Recorder(target), Recorder(draft) if draft is not None else None) for _ in specs]
    budgets = [args.max_new_tokens] * len(prompts)
    jobs = [Job(StrategyRunner(StrategyRun(s.name, s.params, s.label), t, d, pair.eos_ids), budgets)
            for s, (t, d) in zip(specs, recs, strict=True)]
    for job in jobs:  # warm-up outside the traces' prompts is harmless: contexts are keyed by content
        job.runner.warm_up(prompts[0].ids, WARMUP_TOKENS)
    ids = [p.id for p in prompts]

    def after(i: int) -> None:   # a run stopped part way keeps what it measured (--replay-only replays it)
        print(f"prompt {i + 1}/{len(prompts)} {ids[i]}: " + "; ".join(
            f"{s.label} {j.results[ids[i]].elapsed_s:.1f} s" for s, j in zip(specs, jobs, strict=True)), flush=True)
        save_record(out_dir, specs, recs, [[j.results[pid] for pid in ids[: i + 1]] for j in jobs],
                    prompts[: i + 1], tuple(pair.eos_ids), args)

    run_interleaved(jobs, [p.ids for p in prompts], ids, warmup=False, on_round=after)


def save_record(out_dir: str, specs, recs, results: list[list[PromptResult]], prompts: list[Prompt],
                eos_ids: tuple[int, ...], args) -> None:
    """Write each run's trace and the measured times of the prompts done so far; every file is replaced whole
    (written aside, then renamed), so a kill never leaves a half-written one."""
    lines, cfg = [], dataset_cfg(args)
    fmt = {"chat": cfg.get("chat", "auto"), "template": cfg.get("template", "{prompt}")}
    for s, (t, d), rs in zip(specs, recs, results, strict=True):
        tables = {"target": t} if d is None else {"target": t, "draft": d}
        path = os.path.join(out_dir, trace_name(s.label))
        save_trace(path + ".part", tables, prompts, eos_ids,
                   {"run": s.label, "dtype": args.dtype, "threads": args.threads, "time": time.time()})
        os.replace(path + ".part", path)
        for r in rs:
            lines.append(json.dumps({"run": s.label, "name": s.name, "params": s.params, "budget": args.max_new_tokens,
                                     "prompt_format": fmt, "warmup": ISOLATED, "output": r.output,
                                     **r.summary()}) + "\n")
    path = os.path.join(out_dir, "real.jsonl")
    with open(path + ".part", "w", encoding="utf-8") as f:
        f.writelines(lines)
    os.replace(path + ".part", path)


def replay(out_dir: str, sim_model: str, hardware: str) -> list[Compared]:
    """Steps 2-3: replay every recorded run under `hardware`'s clock and compare with its measured times."""
    path = os.path.join(out_dir, "real.jsonl")
    if not os.path.exists(path):
        raise OuroborosError(f"{path} not found: record first (run without --replay-only)")
    real: dict[str, list[dict[str, Any]]] = {}
    with open(path, encoding="utf-8") as f:
        for ln in f:
            rec = json.loads(ln)
            real.setdefault(rec["run"], []).append(rec)
    model, hw = load_conf("model", sim_model), load_conf("hardware", hardware)
    out = []
    for label, rows in real.items():
        tpath = os.path.join(out_dir, trace_name(label))
        sim = make_pair(model, hw, {"tokens": "replay", "trace": tpath})
        prompts: list[Prompt] = trace_prompts(load_trace(tpath))
        name, params = rows[0]["name"], rows[0]["params"]
        draft = sim.draft if get_spec(name).needs_draft_model else None
        assert isinstance(sim.target, HostCharging)
        # the clock charges the strategy's host time too, where the profile measured it (simulators/host.py)
        proposer = sim.target.host_timed(name, build_proposer(name, params, sim.target, draft))
        by_id = {p.id: p for p in prompts}
        if replays_warmup(rows[0]):   # recorded on the measured proposer: stateful proposers carry it
            warm_up(sim, proposer, by_id[rows[0]["prompt_id"]].ids)
        sims = []
        for r in rows:
            sims.append(decode(sim.target, proposer, by_id[r["prompt_id"]].ids, r["budget"], sim.eos_ids,
                               prompt_id=r["prompt_id"]))
            proposer.checkpoint()
        misses = sim.target.lm.misses + sim.draft.lm.misses  # type: ignore[attr-defined]
        out.append(Compared(
            run=label, prompts=len(rows),
            real_s=sum(r["elapsed_s"] for r in rows), real_decode_s=sum(r["elapsed_s"] - r["prefill_s"] for r in rows),
            sim_s=sum(s.elapsed_s for s in sims), sim_decode_s=sum(s.elapsed_s - s.prefill_s for s in sims),
            same_outputs=sum(s.output == r["output"] for s, r in zip(sims, rows, strict=True)), misses=misses,
            host_note=sim.target.host_note([name], [])))
    return out


def record_batched(args, specs: list[RunSpec], out_dir: str, batches: list[int]) -> None:
    """Real continuous-batching runs: every spec at every B over the same prompts (a short warm-up serve first);
    one line per (run, B) in DIR/batch.jsonl, rewritten after each."""
    from ouroboros.serving.batch import Load, Request, engine_for, serve, slot_factory

    pair, prompts, target, draft = load_real(args)
    reqs = [Request(list(p.ids), args.max_new_tokens, p.id) for p in prompts]
    lines: list[str] = []
    path = os.path.join(out_dir, "batch.jsonl")
    for b in batches:
        for s in specs:
            d = draft if get_spec(s.name).needs_draft_model else None
            serve([Request(reqs[0].prompt, WARMUP_TOKENS, "warmup")], Load(1), engine_for(target, "separate"),
                  slot_factory(target, d, s.name, s.params), pair.eos_ids)
            res = serve(reqs, Load(b), engine_for(target, "separate"), slot_factory(target, d, s.name, s.params),
                        pair.eos_ids)
            summ = res.summary(Load(b))
            print(f"B={b} {s.label}: {summ['makespan_s']:.1f} s, {summ['throughput_tok_s']:.2f} tok/s "
                  f"(mean batch {summ['mean_batch']:.2f})", flush=True)
            divs = batch_divergences(out_dir, s.label, res.requests, {p.id: p.ids for p in prompts},
                                     target.top2_margin)
            for dv in divs:
                print(f"  differs from the unbatched run: {dv.prompt_id} at output position {dv.position} "
                      f"(target top-2 logit margin {dv.margin:.3f})", flush=True)
            lines.append(json.dumps({"run": s.label, "name": s.name, "params": s.params, "batch": b,
                                     "budget": args.max_new_tokens, "serving": summ,
                                     "prompt_ids": [r.result.prompt_id for r in res.requests],
                                     "outputs": [r.result.output for r in res.requests],
                                     "divergences": [dataclasses.asdict(d) for d in divs]}) + "\n")
            with open(path + ".part", "w", encoding="utf-8") as f:
                f.writelines(lines)
            os.replace(path + ".part", path)


def batch_divergences(out_dir: str, label: str, served: list[Any], prompt_ids: dict[str, list[int]],
                      margin: Any) -> list[Any]:
    """Requests of a batched run whose outputs differ from the same run's unbatched outputs (step 1, real.jsonl),
    each with its first differing position and the target's top-2 logit margin there (a fresh unbatched forward):
    in bf16 a batch's other shapes change reduction orders, so near-ties can flip."""
    from ouroboros.loop.metrics import RunResult
    from ouroboros.running.divergence import divergences

    base: list[PromptResult] = []
    with open(os.path.join(out_dir, "real.jsonl"), encoding="utf-8") as f:
        for ln in f:
            r = json.loads(ln)
            if r["run"] == label:
                base.append(PromptResult(prompt_id=r["prompt_id"], prompt_len=r["prompt_len"], output=r["output"],
                                         elapsed_s=r["elapsed_s"], prefill_s=r["prefill_s"], stop_reason=""))
    return divergences(RunResult(label, base), RunResult(label, [s.result for s in served]), prompt_ids, margin)


@dataclass
class BatchCompared:
    run: str
    batch: int
    real_s: float
    sim_s: float
    real_tok_s: float
    sim_tok_s: float
    same_outputs: int
    requests: int
    misses: int

    @property
    def err(self) -> float:
        return self.sim_s / self.real_s - 1


def replay_batched(out_dir: str, sim_model: str, hardware: str) -> list[BatchCompared]:
    """Each batched real run's decisions (its run's trace) replayed with the same B on the simulator (prefills as
    separate forwards, as the hf backend runs them)."""
    from ouroboros.serving.batch import Load, Request, serve, slot_factory
    from simulators.serving import SimEngine

    path = os.path.join(out_dir, "batch.jsonl")
    if not os.path.exists(path):
        return []
    model, hw = load_conf("model", sim_model), load_conf("hardware", hardware)
    out = []
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(ln) for ln in f]
    for r in rows:
        tpath = os.path.join(out_dir, trace_name(r["run"]))
        if not os.path.exists(tpath):
            raise OuroborosError(f"{tpath} not found: the batched runs are replayed from step 1's traces")
        sim = make_pair(model, hw, {"tokens": "replay", "trace": tpath})
        by_id = {p.id: p for p in trace_prompts(load_trace(tpath))}
        reqs = [Request(list(by_id[pid].ids), r["budget"], pid) for pid in r["prompt_ids"]]
        d = sim.draft if get_spec(r["name"]).needs_draft_model else None
        res = serve(reqs, Load(r["batch"]), SimEngine("separate"), slot_factory(sim.target, d, r["name"], r["params"]),
                    sim.eos_ids)
        summ = res.summary(Load(r["batch"]))
        misses = sim.target.lm.misses + sim.draft.lm.misses  # type: ignore[attr-defined]
        out.append(BatchCompared(r["run"], r["batch"], r["serving"]["makespan_s"], summ["makespan_s"],
                                 r["serving"]["throughput_tok_s"], summ["throughput_tok_s"],
                                 sum(a.result.output == o for a, o in zip(res.requests, r["outputs"], strict=True)),
                                 len(reqs), misses))
    return out


def batch_table(rows: list[BatchCompared], hardware: str) -> str:
    lines = [f"under load: modelled on hardware={hardware} (batched cost model) vs measured wall time",
             f"{'run':<44}{'B':>4}{'real s':>9}{'model s':>9}{'error':>8}{'real tok/s':>12}{'model':>8}"
             "  same decisions"]
    for c in rows:
        lines.append(f"{c.run:<44}{c.batch:>4}{c.real_s:>9.1f}{c.sim_s:>9.1f}{c.err:>+8.1%}{c.real_tok_s:>12.2f}"
                     f"{c.sim_tok_s:>8.2f}  {c.same_outputs}/{c.requests} outputs, {c.misses} unrecorded contexts")
    if rows:
        worst = max(rows, key=lambda c: abs(c.err))
        lines.append(f"worst error {worst.err:+.1%} ({worst.run}, B={worst.batch})")
    return "\n".join(lines)


def table(rows: list[Compared], hardware: str) -> str:
    lines = [f"modelled on hardware={hardware} vs measured wall time",
             f"{'run':<44}{'prompts':>8}{'real s':>9}{'model s':>9}{'error':>8}{'decode real':>13}"
             f"{'model':>8}{'error':>8}  same decisions"]
    for c in rows:
        lines.append(f"{c.run:<44}{c.prompts:>8}{c.real_s:>9.1f}{c.sim_s:>9.1f}{c.err:>+8.1%}{c.real_decode_s:>13.1f}"
                     f"{c.sim_decode_s:>8.1f}{c.decode_err:>+8.1%}  {c.same_outputs}/{c.prompts} outputs, "
                     f"{c.misses} unrecorded contexts")
    if rows:
        worst = max(rows, key=lambda c: abs(c.err))
        lines.append(f"worst total error {worst.err:+.1%} ({worst.run}); worst decode-only error "
                     f"{max(abs(c.decode_err) for c in rows):.1%}")
    lines += list(dict.fromkeys(c.host_note for c in rows if c.host_note))
    return "\n".join(lines)


@dataclass
class StepClock:
    """One point's recorded steps, measured against a cost model (`--records`)."""
    label: str
    steps: int = 0
    tokens: int = 0                 # target tokens fed, over all steps
    verify_s: float = 0.0           # measured
    verify_model_s: float = 0.0
    draft_s: float = 0.0            # measured, steps with draft forwards only
    draft_model_s: float = 0.0

    def err(self, model: float, real: float) -> float:
        return model / real - 1 if real > 0 else 0.0


def records_clock(paths: list[str], sim_model: str, hardware: str) -> list[StepClock]:
    """`--records`: each real point's recorded forwards priced by `hardware`'s cost models for `sim_model`'s pair."""
    from simulators.lab.calibration.cost import recorded_steps
    from simulators.pair import pair_setup

    _, _, _, costs = pair_setup(load_conf("model", sim_model), load_conf("hardware", hardware))
    target, draft = costs["target"], costs["draft"]
    out: dict[str, StepClock] = {}
    for label, done, st, _ in recorded_steps(paths, "the clock is checked against"):
        c = out.setdefault(label, StepClock(label))
        k, sec = int(st.get("target_tokens") or 0), float(st.get("verify_s") or 0.0)
        if k >= 1 and sec > 0:
            c.steps += 1
            c.tokens += k
            c.verify_s += sec
            c.verify_model_s += target.forward_s(k, done)
        n, t = int(st.get("draft_forwards") or 0), int(st.get("draft_tokens") or 0)
        if n >= 1 and t >= 1:
            c.draft_s += float(st.get("draft_s") or 0.0)
            c.draft_model_s += n * draft.forward_s(max(1, round(t / n)), done)
    if not any(c.steps for c in out.values()):
        raise OuroborosError(f"--records {', '.join(paths)}: no timed steps (records of a real sweep keep each step's "
                             "target_tokens and verify_s)")
    return [c for c in out.values() if c.steps]


def records_table(rows: list[StepClock], hardware: str) -> str:
    lines = [f"the clock alone: recorded forwards priced on hardware={hardware} vs their measured time "
             "(the real decisions)",
             f"{'point':<44}{'steps':>7}{'mean k':>8}{'verify s':>10}{'model':>9}{'error':>8}"
             f"{'draft s':>10}{'model':>9}{'error':>8}"]
    for c in rows:
        d = (f"{c.draft_s:>10.1f}{c.draft_model_s:>9.1f}{c.err(c.draft_model_s, c.draft_s):>+8.1%}"
             if c.draft_s > 0 else f"{'-':>10}{'-':>9}{'-':>8}")
        lines.append(f"{c.label:<44}{c.steps:>7}{c.tokens / c.steps:>8.1f}{c.verify_s:>10.1f}{c.verify_model_s:>9.1f}"
                     f"{c.err(c.verify_model_s, c.verify_s):>+8.1%}{d}")
    lines.append("draft: rough (a step's draft tokens spread evenly over its draft forwards, at the target's ctx); "
                 "proposers' host time not included")
    return "\n".join(lines)


def add_args(ap) -> None:
    ap.add_argument("--strategies", default="vanilla,speculative:gamma=3,pld")
    ap.add_argument("--model", nargs="+", default=["qwen-coder"],
                    help="the real pair: a kind (qwen-coder) or key=value items (kind=hf target=<dir> draft=<dir>)")
    ap.add_argument("--sim-model", default="qwen_coder", help="conf/model/<name>.yaml with the pair's profile")
    ap.add_argument("--hardware", default="cpu_local", help="conf/hardware/<name>.yaml (with fitted costs)")
    ap.add_argument("--dataset", nargs="+", default=["humaneval"])
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--ids", default=None, help="comma-separated prompt ids")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dir", default="realcheck", help="traces and measured times are written / read here")
    ap.add_argument("--replay-only", action="store_true", help="replay the traces already in --dir")
    ap.add_argument("--records", action="append", default=[], metavar="R.jsonl",
                    help="check the clock alone on a real sweep's records (repeatable): each recorded forward "
                         "priced by --hardware against its measured time; nothing is run or loaded")
    ap.add_argument("--batches", default=None, help="also run and replay under load: B = 1,2,4,... requests at once")
    ap.add_argument("--batched-only", action="store_true",
                    help="with --batches: skip step 1 (its traces in --dir are replayed), run the batched runs")


def main(a) -> int:
    batches: list[int] = []
    if a.batches:
        try:
            batches = [int(x) for x in a.batches.split(",")]
        except ValueError:
            raise OuroborosError(f"--batches takes comma-separated integers, got {a.batches!r}") from None
        if min(batches) < 1:
            raise OuroborosError(f"--batches must be >= 1, got {a.batches}")
    try:
        load_conf("hardware", a.hardware)  # a bad profile name fails before any model is loaded
    except OuroborosError as e:
        if a.hardware != "cpu_local":
            raise
        raise OuroborosError(f"{e}: cpu_local is this machine's fitted clock; write it first with "
                             "`python -m simulators calibrate clock` (or pass --hardware <name>)") from None
    load_conf("model", a.sim_model)
    if getattr(a, "records", None):
        if a.batches or a.replay_only:
            raise OuroborosError("--records checks recorded steps; it takes neither --batches nor --replay-only")
        print(records_table(records_clock(a.records, a.sim_model, a.hardware), a.hardware))
        return 0
    if a.batched_only and not batches:
        raise OuroborosError("--batched-only needs --batches")
    if a.batched_only:
        from ouroboros.strategies import make_config

        specs = parse_runs(a.strategies)
        for s in specs:
            make_config(s.name, s.params)
            if not os.path.exists(os.path.join(a.dir, trace_name(s.label))):
                raise OuroborosError(f"no trace of {s.label} in {a.dir}: record it first (without --batched-only)")
        check_out_dir(a.dir, "--dir")   # batch.jsonl is written there
        record_batched(a, specs, a.dir, batches)
    elif not a.replay_only:
        from ouroboros.strategies import make_config

        if a.max_new_tokens < 1:
            raise OuroborosError(f"--max-new-tokens must be >= 1, got {a.max_new_tokens}")
        if a.limit < 1:
            raise OuroborosError(f"--limit must be >= 1, got {a.limit}")
        if a.threads < 0:
            raise OuroborosError(f"--threads must be >= 0 (0: torch's default), got {a.threads}")
        specs = parse_runs(a.strategies)
        for s in specs:
            make_config(s.name, s.params)
        check_out_dir(a.dir, "--dir")   # before any model loads
        os.makedirs(a.dir, exist_ok=True)
        record(a, specs, a.dir)
        if batches:
            record_batched(a, specs, a.dir, batches)
    print(table(replay(a.dir, a.sim_model, a.hardware), a.hardware))
    batched = replay_batched(a.dir, a.sim_model, a.hardware)
    if batched:
        print(batch_table(batched, a.hardware))
    return 0

