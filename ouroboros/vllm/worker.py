"""The vLLM worker: run by the vLLM venv's python (`python -I ouroboros/vllm/worker.py`), it builds one
`vllm.LLM` from the first message and keeps it alive, decoding what it is sent, until `close` or the end of
its input (our process ended). The protocol is ouroboros/vllm/protocol.py: JSON lines on its stdout; everything else
written there (vLLM's logs, its engine's processes) goes to stderr, which the client sends to a log file.

One request at a time, through vLLM's own engine loop (`LLMEngine.add_request` / `step`, what `LLM.generate`
runs), so that each step that gives the request tokens is timed: its tokens and seconds become our per-step
records. vLLM's speculative-decoding counters (`LLM.get_metrics()`, `vllm:spec_decode_*`) are read before and
after each request; their differences are the request's acceptance counts.

Under load (`serve`): many requests through the same engine loop, vLLM's own continuous batching; requests are
added between steps as they arrive (open loop) or as others finish (closed loop, at most `concurrency` in flight),
and every step's tokens per request are timed (`serve_batch`).

`LLM(...)` is built under `if __name__ == "__main__":` (vLLM spawns its engine core, which re-imports this
module). Imports vLLM and ouroboros.vllm.protocol (stdlib only), nothing else of ours; the repository root is put
at the end of sys.path for that (never in front: its top-level folders must not shadow vLLM's imports).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

sys.path.append(str(Path(__file__).resolve().parents[2]))

from ouroboros.vllm.protocol import (  # noqa: E402 (after the path it is found on)
    EngineSpec,
    GenerateRequest,
    GenerateResult,
    Ready,
    ServedRequest,
    ServeReply,
    ServeRequest,
    SpecCounts,
    decode,
    encode,
    serve_request_from,
)

SPEC_COUNTERS = {"vllm:spec_decode_num_drafts": "num_drafts", "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens"}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def spec_counts(llm: Any) -> SpecCounts:
    """vLLM's speculative-decoding counters now (summed over its engines' labels)."""
    totals = dict.fromkeys(SPEC_COUNTERS.values(), 0)
    per_pos: list[int] = []
    for m in llm.get_metrics():
        if m.name in SPEC_COUNTERS:
            totals[SPEC_COUNTERS[m.name]] += int(m.value)
        elif m.name == PER_POS:
            per_pos = [a + b for a, b in zip(per_pos + [0] * (len(m.values) - len(per_pos)), m.values, strict=False)]
    return SpecCounts(**totals, accepted_per_pos=per_pos)


def counts_between(a: SpecCounts, b: SpecCounts) -> SpecCounts:
    pos = [y - (a.accepted_per_pos[i] if i < len(a.accepted_per_pos) else 0) for i, y in enumerate(b.accepted_per_pos)]
    return SpecCounts(b.num_drafts - a.num_drafts, b.num_draft_tokens - a.num_draft_tokens,
                      b.num_accepted_tokens - a.num_accepted_tokens, pos)


def sampling_params(req: GenerateRequest) -> Any:
    from vllm import SamplingParams

    return SamplingParams(max_tokens=req.max_tokens, temperature=req.temperature, top_p=req.top_p,
                          top_k=req.top_k, seed=req.seed, stop_token_ids=list(req.stop_token_ids),
                          repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, detokenize=False)


def add(engine: Any, request_id: str, req: GenerateRequest) -> str:
    """Adds the request; returns the id vLLM gave it (it may add a suffix to ours)."""
    from vllm.inputs import TokensPrompt

    return engine.add_request(request_id, TokensPrompt(prompt_token_ids=list(req.prompt)), sampling_params(req))


def generate(llm: Any, req: GenerateRequest, speculative: bool) -> GenerateResult:
    """One request through vLLM's engine loop, alone; each step that gave it tokens timed."""
    engine = llm.llm_engine
    before = spec_counts(llm) if speculative else None
    t0 = time.perf_counter()
    add(engine, req.prompt_id, req)
    step_tokens: list[int] = []
    step_s: list[float] = []
    last, seen, final = t0, 0, None
    while engine.has_unfinished_requests():
        for out in engine.step():   # the only request in flight
            now, n = time.perf_counter(), len(out.outputs[0].token_ids)
            if n > seen:
                step_tokens.append(n - seen)
                step_s.append(now - last)
                last, seen = now, n
            if out.finished:
                final = out
    t1 = time.perf_counter()
    if final is None:
        raise RuntimeError(f"vLLM finished no output for request {req.prompt_id!r}")
    done = final.outputs[0]
    spec = counts_between(before, spec_counts(llm)) if before is not None else None
    return GenerateResult(prompt_id=req.prompt_id, output=list(done.token_ids),
                          finish_reason=str(done.finish_reason), elapsed_s=t1 - t0,
                          first_token_s=step_s[0] if step_s else t1 - t0, step_tokens=step_tokens, step_s=step_s,
                          spec=spec)


def serve_batch(llm: Any, sr: ServeRequest, speculative: bool) -> ServeReply:
    """Every request through vLLM's engine loop under the load `sr` asks for (protocol.ServeRequest): requests are
    added between engine steps, when they arrive and fewer than `concurrency` are in flight; each step's tokens
    per request are timed. Request ids are their index (prompt ids repeat when requests cycle through prompts)."""
    engine = llm.llm_engine
    reqs, cap = sr.requests, max(1, sr.concurrency)
    before = spec_counts(llm) if speculative else None
    n = len(reqs)
    arrival = [0.0] * n
    start = [0.0] * n
    first = [0.0] * n
    end = [0.0] * n
    tokens: list[list[int]] = [[] for _ in range(n)]
    reason = [""] * n
    step_tokens: list[list[int]] = [[] for _ in range(n)]
    step_s: list[list[float]] = [[] for _ in range(n)]
    last = [0.0] * n
    batch_sum = [0] * n            # over the steps request i was in flight: how many were
    in_steps = [0] * n             # ... and how many steps that was
    live: set[int] = set()
    index: dict[str, int] = {}     # vLLM's request ids (ours, or ours with its suffix) -> request index
    pending, steps, rows = 0, 0, 0
    t0 = time.perf_counter()
    while pending < n or live:
        now = time.perf_counter() - t0
        while pending < n and len(live) < cap and (sr.arrivals is None or sr.arrivals[pending] <= now):
            i = pending
            arrival[i] = sr.arrivals[i] if sr.arrivals is not None else now
            start[i] = last[i] = now
            index[str(i)] = i
            index[str(add(engine, str(i), reqs[i]))] = i
            live.add(i)
            pending += 1
        if not live:   # open loop, nothing in flight: wait for the next arrival
            assert sr.arrivals is not None
            time.sleep(max(0.0, sr.arrivals[pending] - (time.perf_counter() - t0)))
            continue
        outs = engine.step()
        now = time.perf_counter() - t0
        steps, rows = steps + 1, rows + len(live)
        for i in live:
            batch_sum[i] += len(live)
            in_steps[i] += 1
        for out in outs:
            i = index[out.request_id]
            got = list(out.outputs[0].token_ids)
            if len(got) > len(tokens[i]):
                if not tokens[i]:
                    first[i] = now
                step_tokens[i].append(len(got) - len(tokens[i]))
                step_s[i].append(now - last[i])
                last[i], tokens[i] = now, got
            if out.finished:
                end[i], reason[i] = now, str(out.outputs[0].finish_reason)
                live.discard(i)
    spec = counts_between(before, spec_counts(llm)) if before is not None else None
    served = [ServedRequest(prompt_id=r.prompt_id, output=tokens[i], finish_reason=reason[i], arrival_s=arrival[i],
                            start_s=start[i], first_token_s=first[i] if tokens[i] else end[i], end_s=end[i],
                            step_tokens=step_tokens[i], step_s=step_s[i],
                            mean_batch=batch_sum[i] / max(in_steps[i], 1)) for i, r in enumerate(reqs)]
    return ServeReply(requests=served, engine_steps=steps, request_steps=rows, spec=spec)


def serve(spec: EngineSpec, inp: IO[str], out: IO[str]) -> int:
    import vllm

    def send(op: str, body: Any = None) -> None:
        out.write(encode(op, body))
        out.flush()

    t0 = time.perf_counter()
    try:
        llm = vllm.LLM(**spec.llm_kwargs())
    except Exception as e:   # the client raises it as one line; the traceback is in the log
        traceback.print_exc()
        send("error", {"message": f"vLLM could not build the engine: {type(e).__name__}: "
                                  f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}"})
        return 1
    par = llm.llm_engine.vllm_config.parallel_config
    send("ready", Ready(vllm_version=vllm.__version__, pid=os.getpid(), startup_s=time.perf_counter() - t0,
                        parallel={"tensor_parallel_size": par.tensor_parallel_size,
                                  "pipeline_parallel_size": par.pipeline_parallel_size}))
    for line in inp:
        op, fields = decode(line)
        if op == "close":
            break
        speculative = spec.speculative_config is not None
        try:
            if op == "serve":
                send("served", serve_batch(llm, serve_request_from(fields), speculative))
            else:
                send("result", generate(llm, GenerateRequest(**fields), speculative))
        except Exception as e:
            traceback.print_exc()
            what = f"serving {len(fields.get('requests', []))} requests" if op == "serve" else \
                f"request {fields.get('prompt_id')!r}"
            send("error", {"message": f"vLLM failed on {what}: {type(e).__name__}: {e}"})
    send("closed")
    return 0


def main() -> int:
    proto = os.fdopen(os.dup(1), "w")   # the protocol's channel: the original stdout
    os.dup2(2, 1)                       # anything else printed to stdout (vLLM, its children) goes to stderr
    sys.stdout = sys.stderr
    first = sys.stdin.readline()
    try:
        op, fields = decode(first)
        if op != "start":
            raise ValueError(f"the first message must be start, got {op}")
        spec = EngineSpec(**fields)
    except (ValueError, TypeError) as e:
        proto.write(encode("error", {"message": f"bad start message: {e}"}))
        proto.flush()
        return 2
    return serve(spec, sys.stdin, proto)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except json.JSONDecodeError as e:
        print(f"bad message: {e}", file=sys.stderr)
        sys.exit(2)
