"""Batched decoding: many requests at once, one batched forward per model per step, through the ONE loop.

`serve(requests, load, engine, make_slot)` decodes every request with continuous batching: each request runs
`decode.decode` unchanged in its own thread on `Row` backends, and the scheduler (ouroboros/serving/scheduler.py)
fires one batched forward per model whenever every active request waits on one; the engine charges the clock once
per batched forward:

- hf (`HFEngine`, ouroboros/backends/hf.py): one real forward over the rows (`score_batch`: left-padded caches,
  per-row positions and tree masks), wall clock;
- sim (`SimEngine`, simulators/serving.py): each row's own simulated scoring (its surrogate or replayed
  decisions), the simulated clock charged the cost model's `batch_forward_s` of the rows' shapes.

`engine_for(backend)` is the engine of its backend kind (ouroboros/backends/registry.py). Requests join and leave
between forwards: a new request is admitted when one finishes (closed loop, concurrency C) or when its arrival time
has come (open loop, Poisson arrivals: a simulated clock is charged an idle wait, a real one sleeps it). A
request's prefill is its own forward, or rides in the next batched forward of its model (sim, prefill="batched").
`slot_factory` builds a batch slot: fresh backends on the pair's models (`Servable.fresh()`) and the strategy's
proposer on them, optionally load-aware (ouroboros/serving/loadaware.py) or sharing one phrase pool (`SharesPool`).
Requests, loads and results: ouroboros/serving/load.py.

Knows nothing of Hydra, records or which strategy runs.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ouroboros.backends import registry
from ouroboros.errors import OuroborosError
from ouroboros.loop.contracts import Backend, Proposer, Servable, SharesPool
from ouroboros.loop.decode import decode, greedy_verifier
from ouroboros.loop.metrics import PromptResult
from ouroboros.serving.load import (
    DRAFT,
    TARGET,
    Load,
    Request,
    Served,
    ServeResult,
    arrivals,
    check_load_aware,
    check_shared_pool,
)
from ouroboros.serving.loadaware import CostModelled, DepthStats, LoadAware
from ouroboros.serving.scheduler import Engine, Row, Scheduler, Task
from ouroboros.strategies import build_proposer, get_spec

__all__ = ["Engine", "Load", "LoadAware", "Request", "Scheduler", "ServeResult", "Served", "Slot", "engine_for",
           "serve", "slot_factory"]


def engine_for(backend: Backend, prefill: str = "batched") -> Engine:
    """The batched-serving engine of a pair whose target is `backend`: its backend kind's (hf: real batched
    forwards, prefills separate; sim: simulated ones, `prefill` batched into the next forward of its model or
    separate)."""
    if not isinstance(backend, Servable):
        raise OuroborosError(f"batched decoding runs on the hf and sim backends, not on {type(backend).__name__}")
    return cast(Engine, registry.get(backend.kind).engine(backend, prefill))


@dataclass
class Slot:
    target: Row
    draft: Row | None
    proposer: Proposer


def serve(requests: Sequence[Request], load: Load, engine: Engine, make_slot: Callable[[Scheduler], Slot],
          eos_ids: Sequence[int] = (), verifier: Any = None) -> ServeResult:
    """Decode every request under `load` with continuous batching, each through the one loop; returns them in
    request order. `make_slot(sched)` builds a slot: fresh rows on the pair and a proposer on them, kept from
    request to request (as a single-request runner keeps its proposer)."""
    if not requests:
        raise OuroborosError("serve: no requests")
    verifier = verifier or greedy_verifier
    reqs = [Request(r.prompt, r.budget, r.id, r.arrival_s) for r in requests]
    if load.rate is not None:   # from now on this engine's clock (a simulated one starts at 0)
        t0 = engine.clock.now()
        for r, t in zip(reqs, arrivals(len(reqs), load.rate, load.seed), strict=True):
            r.arrival_s = t0 + t
    queue = list(reqs)
    free = list(range(load.concurrency))
    slots: dict[int, Slot] = {}
    tasks: list[Task] = []

    def refill() -> None:
        if not (queue and free):
            return
        now = engine.clock.now()
        if load.rate is not None and queue and free and not sched.active and queue[0].arrival_s > now:
            if engine.clock.simulated:   # idle until the next arrival: a simulated clock is charged the wait ...
                cast(Any, engine.clock).charge(queue[0].arrival_s - now)
            else:                        # ... a real one waits it out
                time.sleep(queue[0].arrival_s - now)
            now = engine.clock.now()
        while queue and free and (load.rate is None or queue[0].arrival_s <= now):
            req = queue.pop(0)
            if load.rate is None:
                req.arrival_s = now
            task = Task(req, heapq.heappop(free))
            slot = slots[task.slot]
            for row in (slot.target, slot.draft):
                if row is not None:
                    row.task = task
            tasks.append(task)

            def body(task: Task, slot: Slot = slot) -> PromptResult:
                res = decode(slot.target, slot.proposer, task.req.prompt, task.req.budget, eos_ids, verifier,
                             task.req.id)
                slot.proposer.checkpoint()
                return res

            sched.admit(task, threading.Thread(target=sched.run_task, args=(task, body), daemon=True))

    def leave(task: Task) -> None:
        slot = slots[task.slot]
        engine.settle([row.inner for row in (slot.target, slot.draft) if row is not None])
        heapq.heappush(free, task.slot)

    sched = Scheduler(engine, refill, leave)
    for i in range(min(load.concurrency, len(reqs))):   # built here: a bad strategy setting fails before any thread
        slots[i] = make_slot(sched)
    free = free[:len(slots)]
    sched.run()
    errors = [t.error for t in tasks if t.error is not None]
    if errors:
        raise errors[0]
    out = []
    by_req = {id(t.req): t for t in tasks}
    for r in reqs:
        tk = by_req[id(r)]
        assert tk.out is not None
        first = tk.first_token_s if tk.first_token_s is not None else tk.end_s
        mean_b = sum(tk.batch_sizes) / len(tk.batch_sizes) if tk.batch_sizes else 0.0
        out.append(Served(tk.out, r.arrival_s, tk.start_s, first, tk.end_s, tk.slot, mean_b))
    return ServeResult(out, dict(sched.forwards), dict(sched.rows))


def fresh(backend: Backend) -> Servable:
    """A new, empty backend on the same model as `backend`: one per batch slot."""
    if not isinstance(backend, Servable):
        raise OuroborosError(f"batched decoding runs on the hf and sim backends, not on {type(backend).__name__}")
    return backend.fresh()


def slot_factory(target: Backend, draft: Backend | None, strategy: str, params: dict[str, Any],
                 load_aware: bool = False, max_draft: int = 16, shared_pool: bool = False
                 ) -> Callable[[Scheduler], Slot]:
    """`make_slot` for `serve`: fresh rows on the pair's models and the strategy's proposer on them; with
    `load_aware`, the proposer wrapped in `LoadAware` (sized by the pair's cost models: sim backends only); with
    `shared_pool`, every slot's Ouroboros proposer uses the first slot's phrase pool (its history mechanism at
    serving scale: a phrase one request harvests serves every request; requests run one at a time between
    forwards, so the pool is never touched concurrently)."""
    needs_draft = bool(get_spec(strategy).needs_draft_model)
    check_load_aware(load_aware, isinstance(target, CostModelled))
    check_shared_pool(shared_pool, strategy, params)
    pools: list[Any] = []
    shared_stats = DepthStats(max_draft, needs_draft and draft is not None)

    def make(sched: Scheduler) -> Slot:
        t_row = Row(fresh(target), sched, TARGET)
        d_row = Row(fresh(draft), sched, DRAFT) if needs_draft and draft is not None else None
        prop: Any = build_proposer(strategy, params, t_row, d_row)
        if shared_pool:
            assert isinstance(prop, SharesPool)
            if pools:
                prop.use_pool(pools[0])
            else:
                pools.append(prop.pool)
        if load_aware:
            assert isinstance(target, CostModelled)
            prop = LoadAware(prop, lambda: sched.batch_size, target.cost,
                             draft.cost if isinstance(draft, CostModelled) and d_row is not None else None,
                             max_draft, tick=lambda: sched.forwards.get(TARGET, 0), stats_=shared_stats)
        return Slot(t_row, d_row, prop)

    return make
