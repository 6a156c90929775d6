"""Our side of the vLLM peers: `WorkerProcess` starts ouroboros/vllm/worker.py with the vLLM venv's python and
talks to it over JSON lines (ouroboros/vllm/protocol.py); `VLLMPeer` builds its engine from a peer's config and our
loaded models (the same folders, the same dtype, as many CPUs as our backend uses), keeps it alive across prompts
and turns each answer into our `PromptResult`.

Timing and pairing: vLLM's times are taken by the worker process, around each request inside it (its
`time.perf_counter`), ours by this process. A ratio of the two is only meaningful because the harness alternates
prompts between them (run_interleaved: prompt i by every point before prompt i + 1), on one machine in one state;
each prompt's `proposer_stats` says so (`vllm.timed_in_worker`: 1) and adds the round trip as this process saw it
(`vllm.roundtrip_s`, pipe and JSON included). After each request this process waits, off every clock, until vLLM's
processes have gone quiet (`settle`; the wait is `vllm.settle_s`): its idle worker spins for a second.
Engine start-up (about 45-105 s on 2 CPU cores) happens when the peer
is built, before its warm-up: never in a measurement.

What a step record can and cannot say: each engine step that gave the request tokens is one step (its tokens, its
seconds). How many draft tokens that step proposed is not observable from outside vLLM, so a step's `accepted` is
its tokens - 1 (the bonus token) and its draft depth is recorded as that (a lower bound, as the hf peers' #Match);
vLLM's own counters (drafts, draft tokens, accepted tokens, accepted per position) are in `proposer_stats` as
`vllm.*`.

Under load (`VLLMPeer.serve`, `serve.concurrency` >= 1): the requests go to the worker at once and vLLM's engine
batches them itself (its scheduler, its chunked prefill); arrivals, starts, first tokens and ends are the worker's
clock, from the serve's start. A served peer point is timed by one process: its throughput stands beside ours from
a separate point (sequential, not alternated), which the serving table says.

Knows nothing of our strategies, the decode loop or Hydra.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ouroboros.errors import OuroborosError
from ouroboros.loop.metrics import PromptResult, StepRecord
from ouroboros.loop.sampling import SamplingConfig, stream_seed
from ouroboros.running.peer_configs import VLLMConfig
from ouroboros.serving.load import TARGET, Load, Request, Served, ServeResult, arrivals
from ouroboros.vllm.env import check_venv
from ouroboros.vllm.protocol import (
    EngineSpec,
    GenerateRequest,
    GenerateResult,
    Ready,
    ServedRequest,
    ServeReply,
    ServeRequest,
    decode,
    encode,
    reply_from,
    result_from,
)

WORKER = Path(__file__).resolve().with_name("worker.py")
KV_SLACK = 1.25                 # room for one request of max_model_len, x this (vLLM's blocks round up)
KV_FLOOR_BYTES = 256 << 20
SETTLE_WINDOW_S = 0.2
SETTLE_LIMIT_S = 5.0


def _tree_cpu_s(root: int) -> float | None:
    """CPU seconds (user + system) used so far by process `root` and all its descendants, from /proc (Linux); None
    where there is no /proc to read."""
    try:
        stats = {}
        for d in os.scandir("/proc"):
            if d.name.isdigit():
                try:
                    f = open(f"/proc/{d.name}/stat").read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                stats[int(d.name)] = (int(f[1]), (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK"))
    except OSError:
        return None
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, (ppid, _) in stats.items() if ppid in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(stats[pid][1] for pid in tree if pid in stats) if root in stats else None


def settle(root: int, window_s: float | None = None, limit_s: float | None = None) -> float:
    """Wait until vLLM's processes have gone quiet after a request: its idle worker spins on its message queue for a
    second after each one (vLLM's shm_broadcast `busy_loop_s`), which on a machine of few cores slows whatever runs
    next, our next point included. Quiet: under a tenth of a core over `window_s`. Returns the seconds waited (0.0
    without /proc), never more than `limit_s` (None: SETTLE_WINDOW_S, SETTLE_LIMIT_S); off every clock."""
    window_s = SETTLE_WINDOW_S if window_s is None else window_s
    limit_s = SETTLE_LIMIT_S if limit_s is None else limit_s
    t0 = time.perf_counter()
    last = _tree_cpu_s(root)
    while last is not None and time.perf_counter() - t0 < limit_s:
        time.sleep(window_s)
        now = _tree_cpu_s(root)
        if now is None or now - last <= 0.1 * window_s:
            break
        last = now
    return time.perf_counter() - t0 if last is not None else 0.0


class WorkerProcess:
    """One worker process holding one vLLM engine. `argv`: the command (default: the venv's python in isolated
    mode, `-I`, running worker.py); its stderr goes to `log`. Raises OuroborosError (one line, naming the log) when
    the engine does not start or a request fails."""

    def __init__(self, argv: Sequence[str], spec: EngineSpec, env: dict[str, str], log: Path):
        self.log, self.failed = log, False
        with open(log, "w") as err:
            self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         text=True, env=env, start_new_session=True)  # Ctrl-C reaches us, not it
        self._send("start", spec)
        self.ready = Ready(**self._expect("ready", "start vLLM's engine"))

    def _send(self, op: str, body: Any = None) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(encode(op, body))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(f"take the {op} message") from None

    def _expect(self, op: str, doing: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise self._died(doing)
        try:
            got, fields = decode(line)
        except ValueError as e:
            raise OuroborosError(f"the vLLM worker answered out of protocol ({e}); log: {self.log}") from None
        if got == "error":
            self.failed = True
            cause = root_cause(self.log.read_text(errors="replace"))
            raise OuroborosError(f"{fields.get('message', 'vLLM failed')}{f'; first error: {cause}' if cause else ''} "
                                 f"(log: {self.log})")
        if got != op:
            raise OuroborosError(f"the vLLM worker answered {got!r} where {op!r} was due; log: {self.log}")
        return fields

    def _died(self, doing: str) -> OuroborosError:
        self.failed = True
        code = self.proc.wait()
        tail = [ln.strip() for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()][-1:]
        last = f": {tail[0][:300]}" if tail else ""
        return OuroborosError(f"the vLLM worker exited ({code}) before it could {doing}{last} (log: {self.log})")

    def generate(self, req: GenerateRequest) -> GenerateResult:
        self._send("generate", req)
        return result_from(self._expect("result", f"decode prompt {req.prompt_id}"))

    def serve(self, req: ServeRequest) -> ServeReply:
        self._send("serve", req)
        return reply_from(self._expect("served", f"serve {len(req.requests)} requests"))

    def close(self) -> None:
        """Ask the worker to stop, then wait for it (its engine shuts down its own processes). The log is removed
        when nothing failed (an error names it, and then it stays)."""
        if self.proc.poll() is None:
            try:
                self._send("close")
                self.proc.wait(timeout=60)
            except (OuroborosError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                f.close()
        if not self.failed and self.proc.returncode == 0:
            self.log.unlink(missing_ok=True)


def root_cause(log: str) -> str:
    """The first exception line in a worker's log (vLLM's engine processes log theirs there; the worker's own
    message names only the last). Golden: '... ERROR ... ValueError: Available memory ...' -> 'ValueError: Available
    memory ...'."""
    m = re.search(r"\b(\w+(?:Error|Exception)): (.+)", log)
    return f"{m.group(1)}: {m.group(2).strip()[:300]}" if m else ""


def model_dir(model: Any, role: str) -> str:
    """The folder (or hub id) a transformers model was loaded from: vLLM loads the same one. OuroborosError for a
    model built in memory (no name_or_path)."""
    ref = str(getattr(model, "name_or_path", "") or "")
    if not ref:
        raise OuroborosError(f"the vLLM peers load the {role} model from its folder, and this {role} was not loaded "
                             "from one: use a saved model (model=hf model.target=<folder>, or a fetched pair)")
    return str(Path(ref).resolve()) if Path(ref).is_dir() else ref


def kv_bytes_per_token(config: Any, dtype_bytes: int) -> int:
    """K and V of every layer for one token: 2 x layers x kv heads x head dim x bytes."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * heads * head_dim * dtype_bytes


def kv_room(cfg: VLLMConfig, target: Any, draft: Any | None) -> int:
    """`kv_cache_memory_bytes` when the config leaves it null: one request of max_model_len tokens (the model's
    context when null) on the target and the draft, x KV_SLACK. The peers decode one request at a time; vLLM's own
    default on CPU would take a share of free memory per engine, and several engines live at once."""
    if cfg.kv_cache_memory_bytes is not None:
        return cfg.kv_cache_memory_bytes
    length = cfg.max_model_len or int(getattr(target.config, "max_position_embeddings", 0) or 4096)
    per_token = sum(kv_bytes_per_token(m.config, m.dtype.itemsize) for m in (target, draft) if m is not None)
    return max(int(per_token * length * KV_SLACK), KV_FLOOR_BYTES)


def cpu_bind(cfg: VLLMConfig, threads: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND: the config's, else the first `threads` CPUs this process may run on (as many
    OpenMP threads as our backend's torch threads). Golden: threads=2 on CPUs {0, 1, 2, 3} -> "0,1"."""
    if cfg.cpu_omp_threads_bind:
        return cfg.cpu_omp_threads_bind
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    return ",".join(str(c) for c in cpus[:max(threads, 1)])


def engine_spec(cfg: VLLMConfig, target: Any, draft: Any | None, seed: int = 0) -> EngineSpec:
    return EngineSpec(
        model=model_dir(target, "target"), dtype=str(target.dtype).removeprefix("torch."),
        speculative_config=cfg.speculative_config(model_dir(draft, "draft") if draft is not None else None),
        tensor_parallel_size=cfg.tensor_parallel_size, pipeline_parallel_size=cfg.pipeline_parallel_size,
        distributed_executor_backend=cfg.distributed_executor_backend, enforce_eager=cfg.enforce_eager,
        enable_prefix_caching=cfg.enable_prefix_caching, max_model_len=cfg.max_model_len,
        kv_cache_memory_bytes=kv_room(cfg, target, draft), seed=seed)


def steps_of(res: GenerateResult, prompt_len: int) -> list[StepRecord]:
    """One StepRecord per engine step that gave the request tokens (see the module docstring)."""
    return [StepRecord(n_nodes=n - 1, n_candidates=n - 1, max_depth=n - 1, accepted=n - 1, new_tokens=n, n_match=n - 1,
                       target_tokens=prompt_len if i == 0 else n, draft_forwards=0, draft_tokens=0, draft_s=0.0,
                       verify_s=s, other_s=0.0)
            for i, (n, s) in enumerate(zip(res.step_tokens, res.step_s, strict=True))]


def prompt_result(res: GenerateResult, prompt_len: int, eos_ids: Sequence[int],
                  roundtrip_s: float | None) -> PromptResult:
    """`roundtrip_s`: the request as this process saw it (None under load: one round trip serves every request)."""
    stats: dict[str, float] = {"vllm.timed_in_worker": 1}
    if roundtrip_s is not None:
        stats["vllm.roundtrip_s"] = roundtrip_s
    if res.spec is not None:
        stats.update({"vllm.num_drafts": res.spec.num_drafts, "vllm.num_draft_tokens": res.spec.num_draft_tokens,
                      "vllm.num_accepted_tokens": res.spec.num_accepted_tokens})
        stats.update({f"vllm.accepted_at_{i}": n for i, n in enumerate(res.spec.accepted_per_pos)})
    stop = "eos" if res.output and res.output[-1] in set(eos_ids) else "budget"
    return PromptResult(prompt_id=res.prompt_id, prompt_len=prompt_len, output=list(res.output),
                        elapsed_s=res.elapsed_s, prefill_s=res.first_token_s, stop_reason=stop,
                        steps=steps_of(res, prompt_len), proposer_stats=stats)


def served(r: ServedRequest, prompt_len: int, eos_ids: Sequence[int]) -> Served:
    """One request of a vLLM serve as ours (times from the serve's start, worker clock)."""
    res = GenerateResult(prompt_id=r.prompt_id, output=r.output, finish_reason=r.finish_reason,
                         elapsed_s=r.end_s - r.start_s, first_token_s=r.first_token_s - r.start_s,
                         step_tokens=r.step_tokens, step_s=r.step_s)
    return Served(result=prompt_result(res, prompt_len, eos_ids, None), arrival_s=r.arrival_s, start_s=r.start_s,
                  first_token_s=r.first_token_s, end_s=r.end_s, slot=-1, mean_batch=r.mean_batch)


def serve_result(reply: ServeReply, requests: Sequence[Request], eos_ids: Sequence[int]) -> ServeResult:
    """A vLLM serve as our ServeResult: one "forward" per engine step, its rows the requests in flight (vLLM's
    scheduler batches tokens, not our rows: mean_batch is requests per step); vLLM's counters over the whole serve
    go on the first request's proposer_stats (`vllm.num_drafts`, ...: a record's totals sum them)."""
    out = [served(r, len(q.prompt), eos_ids) for r, q in zip(reply.requests, requests, strict=True)]
    if reply.spec is not None and out:
        st = out[0].result.proposer_stats
        st.update({"vllm.num_drafts": reply.spec.num_drafts, "vllm.num_draft_tokens": reply.spec.num_draft_tokens,
                   "vllm.num_accepted_tokens": reply.spec.num_accepted_tokens})
        st.update({f"vllm.accepted_at_{i}": n for i, n in enumerate(reply.spec.accepted_per_pos)})
    return ServeResult(requests=out, forwards={TARGET: reply.engine_steps}, rows={TARGET: reply.request_steps})


class VLLMPeer:
    """A vLLM peer's engine. Built here: the checks (venv, model folders) and the engine's spec; started on first use
    (the warm-up, before any clock reading: start-up is never measured), so that a peer whose prompts are all
    decoded already starts no engine; alive until the peer is dropped or closed."""

    def __init__(self, name: str, cfg: VLLMConfig, target: Any, draft: Any | None, eos_ids: Sequence[int],
                 sampling: SamplingConfig | None = None, threads: int = 1, argv: Sequence[str] | None = None):
        python = check_venv(cfg.venv, suffix=cfg.speculative_method() == "suffix")
        self.spec = engine_spec(cfg, target, draft, sampling.seed if sampling is not None else 0)
        self.env = dict(os.environ)
        if target.device.type == "cpu":
            self.env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_bind(cfg, threads)
        self.argv = tuple(argv or (str(python), "-I", str(WORKER)))
        self.name, self.eos_ids, self.sampling = name, tuple(eos_ids), sampling
        self.keeps_outputs = cfg.carries_state()
        self._worker: WorkerProcess | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def worker(self) -> WorkerProcess:
        """The worker, started on first use (its stderr: a log file in the temp folder, named in errors)."""
        if self._worker is None:
            fd, log = tempfile.mkstemp(prefix=f"ouroboros-{self.name}-", suffix=".log")
            os.close(fd)
            self._worker = WorkerProcess(self.argv, self.spec, self.env, Path(log))
            self._finalizer = weakref.finalize(self, self._worker.close)
        return self._worker

    def request(self, prompt: Sequence[int], budget: int, prompt_id: str) -> GenerateRequest:
        sp = self.sampling
        if sp is None or sp.greedy:
            return GenerateRequest(prompt_id, list(prompt), budget, list(self.eos_ids))
        return GenerateRequest(prompt_id, list(prompt), budget, list(self.eos_ids), temperature=sp.temperature,
                               top_p=sp.top_p, top_k=sp.top_k, seed=stream_seed(sp.seed, prompt_id))

    def warm_up(self, prompt: Sequence[int], budget: int) -> None:
        """An untimed request. A peer whose engine keeps earlier outputs (suffix's global tree) warms up on the
        prompt reversed (same length, another continuation), so that the warm-up's tokens of the first prompt's own
        answer do not reach its measured decode; vLLM offers no call to empty that tree."""
        self.decode(list(reversed(prompt)) if self.keeps_outputs else prompt, budget, "warmup")

    def decode(self, prompt: Sequence[int], budget: int, prompt_id: str) -> PromptResult:
        t0 = time.perf_counter()
        res = self.worker.generate(self.request(prompt, budget, prompt_id))
        out = prompt_result(res, len(prompt), self.eos_ids, time.perf_counter() - t0)
        out.proposer_stats["vllm.settle_s"] = settle(self.worker.proc.pid)   # before the next point's clock starts
        return out

    def serve(self, requests: Sequence[Request], load: Load) -> ServeResult:
        """Every request through the engine at once, under `load` (closed loop at its concurrency, or open loop
        with Poisson arrivals at its rate: vLLM's engine waits for them in real time, its own clock)."""
        times = arrivals(len(requests), load.rate, load.seed) if load.rate is not None else None
        gen = [self.request(q.prompt, q.budget, q.id) for q in requests]
        reply = self.worker.serve(ServeRequest(requests=gen, concurrency=load.concurrency, arrivals=times))
        settle(self.worker.proc.pid)
        return serve_result(reply, requests, self.eos_ids)

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
