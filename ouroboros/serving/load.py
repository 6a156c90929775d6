"""What a serving run is asked and what it reports: `Request`, `Load` (closed loop at concurrency C, or open loop
with Poisson arrivals), `Served` / `ServeResult` (throughput, latency, TTFT and time per output token) and the
serving checks, written once: config.py runs them on a run's settings before any model loads, `serve()` and
`slot_factory` on what they are handed.

Knows nothing of engines, threads, Hydra or records.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from ouroboros.errors import OuroborosError
from ouroboros.loop.metrics import PromptResult
from ouroboros.strategies import make_config

PREFILL_MODES = ("batched", "separate")
TARGET, DRAFT, PREFILL = "target", "draft", "prefill"   # the roles of a batched forward (model or joining prompt)


# ----------------------------------------------------------------------------------------------- checks
def check_prefill(mode: str | None) -> None:
    """serve.prefill: batched (a joining prompt rides in the next batched forward), separate, or None (the
    backend's default)."""
    if mode is not None and mode not in PREFILL_MODES:
        raise OuroborosError(f"serve.prefill must be batched or separate, got {mode!r}")


def check_rate(rate: float | None) -> None:
    if rate is not None and not rate > 0:
        raise OuroborosError(f"serve.rate must be > 0 requests per second, got {rate}")


def check_load_aware(load_aware: bool, simulated: bool) -> None:
    """What only the simulated clock can do: size drafts by the cost model (load-aware)."""
    if load_aware and not simulated:
        raise OuroborosError("serve.load_aware sizes drafts with the cost model: backend=sim")


def check_shared_pool(shared_pool: bool, strategy: str, params: dict[str, Any]) -> None:
    if shared_pool and not (strategy == "ouroboros" and make_config(strategy, params).history):
        raise OuroborosError("serve.shared_pool shares Ouroboros' history pool: it needs strategy=ouroboros with "
                             "history=true")


# ----------------------------------------------------------------------------------------------- requests
@dataclass
class Request:
    prompt: list[int]
    budget: int
    id: str
    arrival_s: float = 0.0      # when it arrives (clock seconds); closed loop: when it is admitted


@dataclass
class Load:
    concurrency: int = 1          # requests decoding at once at most (closed loop: a new one starts as one ends)
    rate: float | None = None     # open loop: Poisson arrivals per second (real clocks wait for them); None = closed
    seed: int = 0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise OuroborosError(f"serve.concurrency must be >= 1, got {self.concurrency}")
        check_rate(self.rate)


def arrivals(n: int, rate: float, seed: int) -> list[float]:
    """Poisson arrival times (seconds) of n requests at `rate` per second."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


# ----------------------------------------------------------------------------------------------- results
@dataclass
class Served:
    """One request's outcome: its decode record and its serving timings (clock seconds)."""

    result: PromptResult
    arrival_s: float
    start_s: float
    first_token_s: float
    end_s: float
    slot: int
    mean_batch: float           # mean rows in the target forwards that verified its drafts

    @property
    def latency_s(self) -> float:
        return self.end_s - self.arrival_s

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        n = len(self.result.output)
        return (self.end_s - self.first_token_s) / (n - 1) if n > 1 else 0.0


@dataclass
class ServeResult:
    requests: list[Served]          # in request order
    forwards: dict[str, int]        # batched forwards per model role
    rows: dict[str, int]            # rows scored per model role (rows / forwards = mean batch)

    @property
    def makespan_s(self) -> float:
        return max(s.end_s for s in self.requests) - min(s.arrival_s for s in self.requests)

    def summary(self, load: Load) -> dict[str, Any]:
        """The serving metrics of a record: throughput, latency / TTFT / time per output token percentiles."""
        rs = self.requests
        tokens = sum(len(s.result.output) for s in rs)
        span = self.makespan_s

        def pct(xs: list[float], q: float) -> float:
            xs = sorted(xs)
            return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]  # nearest rank

        out: dict[str, Any] = {"concurrency": load.concurrency, "rate": load.rate, "requests": len(rs),
                               "tokens": tokens, "makespan_s": span,
                               "throughput_tok_s": tokens / span if span > 0 else 0.0,
                               "requests_per_s": len(rs) / span if span > 0 else 0.0,
                               "mean_batch": self.rows.get(TARGET, 0) / max(self.forwards.get(TARGET, 0), 1),
                               "target_forwards": self.forwards.get(TARGET, 0),
                               "draft_forwards": self.forwards.get(DRAFT, 0)}
        for name, xs in (("latency_s", [s.latency_s for s in rs]), ("ttft_s", [s.ttft_s for s in rs]),
                         ("tpot_s", [s.tpot_s for s in rs])):
            out[f"{name}_p50"] = pct(xs, 0.5)
            out[f"{name}_p99"] = pct(xs, 0.99)
            out[f"{name}_mean"] = sum(xs) / len(xs)
        return out
