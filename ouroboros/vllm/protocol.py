"""The JSON-lines protocol between `client` (our process) and `worker` (vLLM's venv): one JSON object per line, its
`op` naming the message. Stdlib only: the worker imports this module and vLLM, nothing else of ours.

    client -> worker                      worker -> client
    {"op": "start", EngineSpec}           {"op": "ready", Ready}        (or {"op": "error", "message": ...})
    {"op": "generate", GenerateRequest}   {"op": "result", GenerateResult}
    {"op": "serve", ServeRequest}         {"op": "served", ServeReply}  (many requests at once, under a load)
    {"op": "close"}                       {"op": "closed"}              (the worker exits; so it does at end of input)

Worked example (one prompt, greedy, 3 new tokens, vLLM's ngram drafting):
    -> {"op": "generate", "prompt_id": "HumanEval/32", "prompt": [151644, 8948, ...], "max_tokens": 3,
        "stop_token_ids": [151645, 151643], "temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": null}
    <- {"op": "result", "prompt_id": "HumanEval/32", "output": [750, 1477, 25], "finish_reason": "length",
        "elapsed_s": 0.91, "first_token_s": 0.62, "step_tokens": [1, 2], "step_s": [0.62, 0.29],
        "spec": {"num_drafts": 1, "num_draft_tokens": 10, "num_accepted_tokens": 1, "accepted_per_pos": [1, 0, ...]}}

Times are the worker's (time.perf_counter in its process), taken around the request inside the worker: the pipe's
cost is not in them (the client times the round trip itself).

Knows nothing of vLLM's API, of our records or of processes.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

OPS = ("start", "ready", "generate", "result", "serve", "served", "close", "closed", "error")


@dataclass(frozen=True)
class EngineSpec:
    """What the worker builds `vllm.LLM(...)` from: vLLM's own argument names (None: vLLM's default)."""

    model: str                                  # the model's folder (config.json + weights)
    dtype: str                                  # "bfloat16" | "float32" | "float16": the dtype our models run in
    speculative_config: dict[str, Any] | None = None   # None: no speculation (vanilla greedy)
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str | None = None    # "mp" | "ray" | "uni" | None (vLLM chooses)
    enforce_eager: bool = True
    enable_prefix_caching: bool = False
    max_model_len: int | None = None
    kv_cache_memory_bytes: int | None = None
    seed: int = 0

    def llm_kwargs(self) -> dict[str, Any]:
        """`LLM(**kwargs)` (None values left out: vLLM's defaults), with the settings every peer shares: token ids
        in and out (no tokenizer) and vLLM's statistics on (its acceptance counters)."""
        kw = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return {**kw, "skip_tokenizer_init": True, "disable_log_stats": False}


@dataclass(frozen=True)
class Ready:
    vllm_version: str
    pid: int                  # the worker's process id (its clock times the requests)
    startup_s: float          # LLM(...) construction (not part of any measurement)
    parallel: dict[str, int] = field(default_factory=dict)   # the engine's tensor / pipeline parallel sizes


@dataclass(frozen=True)
class GenerateRequest:
    prompt_id: str
    prompt: list[int]
    max_tokens: int
    stop_token_ids: list[int]
    temperature: float = 0.0   # 0: greedy
    top_p: float = 1.0
    top_k: int = 0             # 0: off (vLLM: -1 or 0)
    seed: int | None = None    # a sampled request's seed (per prompt: reproducible whatever the order)


@dataclass(frozen=True)
class SpecCounts:
    """vLLM's own speculative-decoding counters over one request (the differences of its `vllm:spec_decode_*`
    metrics across it): drafts (verification steps that had draft tokens), draft tokens, accepted tokens, and
    accepted tokens per draft position."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class GenerateResult:
    prompt_id: str
    output: list[int]             # new token ids (a stop token included, as ours)
    finish_reason: str            # vLLM's: "stop" (a stop token) | "length" (max_tokens)
    elapsed_s: float              # request added -> finished output (worker clock)
    first_token_s: float          # request added -> first token (prefill)
    step_tokens: list[int]        # per engine step that gave the request tokens: how many
    step_s: list[float]           # that step's time (since the previous one; the first: since the request)
    spec: SpecCounts | None = None   # None: no speculation, or vLLM kept no counters


@dataclass(frozen=True)
class ServeRequest:
    """Many requests through one engine at once (vLLM's own continuous batching). Closed loop (`arrivals` None):
    at most `concurrency` in flight, the next one added as one finishes. Open loop: request i arrives
    `arrivals[i]` seconds after the start and is added then (or, with `concurrency` in flight, when one finishes)."""

    requests: list[GenerateRequest]
    concurrency: int
    arrivals: list[float] | None = None


@dataclass(frozen=True)
class ServedRequest:
    """One request's outcome under load; times in seconds from the serve's start (worker clock). Closed loop: it
    arrives when it is added."""

    prompt_id: str
    output: list[int]
    finish_reason: str
    arrival_s: float
    start_s: float                # added to the engine
    first_token_s: float
    end_s: float
    step_tokens: list[int]        # per engine step that gave it tokens: how many
    step_s: list[float]           # ... that step's end minus its previous token step's (the first: minus start_s)
    mean_batch: float = 1.0       # requests in flight, averaged over the engine steps it was in flight


@dataclass(frozen=True)
class ServeReply:
    requests: list[ServedRequest]          # in request order
    engine_steps: int                       # engine steps that ran at least one request
    request_steps: int                      # sum over those steps of the requests in flight (/ steps = mean batch)
    spec: SpecCounts | None = None          # vLLM's counters over the whole serve


def encode(op: str, body: Any = None) -> str:
    """One line: `{"op": op, **fields of body}` (a dataclass or a dict)."""
    assert op in OPS, op
    fields = dataclasses.asdict(body) if dataclasses.is_dataclass(body) and not isinstance(body, type) else body
    return json.dumps({"op": op, **(fields or {})}) + "\n"


def decode(line: str) -> tuple[str, dict[str, Any]]:
    """(op, fields) of one line; ValueError for anything else."""
    obj = json.loads(line)
    if not isinstance(obj, dict) or obj.get("op") not in OPS:
        raise ValueError(f"not a protocol message: {line.strip()[:200]!r}")
    op = obj.pop("op")
    return op, obj


def result_from(fields: dict[str, Any]) -> GenerateResult:
    spec = fields.get("spec")
    return GenerateResult(**{**fields, "spec": SpecCounts(**spec) if spec is not None else None})


def reply_from(fields: dict[str, Any]) -> ServeReply:
    spec = fields.get("spec")
    return ServeReply(requests=[ServedRequest(**r) for r in fields["requests"]], engine_steps=fields["engine_steps"],
                      request_steps=fields["request_steps"], spec=SpecCounts(**spec) if spec is not None else None)


def serve_request_from(fields: dict[str, Any]) -> ServeRequest:
    return ServeRequest(requests=[GenerateRequest(**r) for r in fields["requests"]],
                        concurrency=int(fields["concurrency"]), arrivals=fields.get("arrivals"))
