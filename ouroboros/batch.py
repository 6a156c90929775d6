"""Batched decoding: many requests at once, one batched forward per model per step, through the ONE loop.

Every request runs `decode.decode` unchanged, in its own thread, on `Row` backends: a `Row` is a Backend whose
`score` does not compute but hands its draft to the `Scheduler` and waits. The scheduler is cooperative and
deterministic: exactly one request thread runs at a time, in admission order; when every active request waits on
a forward, it fires ONE batched forward for one model (the draft model before the target, so a step is one batched
draft phase then one batched verification) over every request waiting on that model, then lets those requests go
on, in admission order. Each request thus verifies and commits its own tree, exactly as alone (batched scoring is
exact per row), while the clock is charged once per batched forward:

- `HFEngine`: one real forward over the rows (`backends.hf.score_batch`: left-padded caches, per-row positions
  and tree masks), wall clock;
- `SimEngine`: each row's own simulated scoring (its surrogate or replayed decisions), and the simulated clock is
  charged the cost model's `batch_forward_s` of the rows' shapes, once per batched forward.

Requests join and leave between forwards (continuous batching): `serve` admits a new request when one finishes
(closed loop, concurrency C) or when its arrival time has come (open loop, Poisson arrivals, simulated clock
only). A request's prefill is its own forward, charged when it joins (no chunked prefill).

Knows nothing of Hydra, records or which strategy runs.
"""

from __future__ import annotations

import heapq
import math
import random
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ouroboros.backends.base import BackendWrapper
from ouroboros.contracts import Backend, Clock, DecodeState, OuroborosError, Proposer, Scores
from ouroboros.decode import decode, greedy_verifier, max_candidate_depth
from ouroboros.draft import Draft
from ouroboros.metrics import PromptResult

# ----------------------------------------------------------------------------------------------- engines
PREFILL_MODES = ("batched", "separate")


class SimEngine:
    """Simulated batched forwards: decisions from each row's own backend, time from the batch cost model.

    prefill="batched" (serving engines' chunked / piggy-backed prefill): a joining request's prompt rides in the
    next batched forward of the same model (its tokens add to that forward's rows; the weights are read once);
    a prefill no forward of its model ever follows (a draft model that load-aware never drafted with) is charged
    alone when its request ends. prefill="separate": each prefill is its own forward when the request joins, as
    the hf backend runs them (what `realcheck --batches` replays)."""

    def __init__(self, prefill: str = "batched") -> None:
        from simulators.backend import SimClock

        if prefill not in PREFILL_MODES:
            raise OuroborosError(f"serve.prefill must be one of {', '.join(PREFILL_MODES)}, got {prefill!r}")
        self.clock = SimClock()
        self.prefill_mode = prefill
        self._pending: dict[int, list[tuple[Any, tuple[int, int, int]]]] = {}   # id(cost) -> (backend, row)

    def forward(self, backends: list[Any], drafts: list[Draft], want: list[bool]) -> list[Scores]:
        rows: list[tuple[int, int, int | None]] = [
            (len(b.tokens) - b.cache_len + len(d), b.cache_len, len(d) + 1)
            for b, d in zip(backends, drafts, strict=True)]
        out = [b.score(d, w) for b, d, w in zip(backends, drafts, want, strict=True)]
        cost = backends[0].cost
        rows += [row for _, row in self._pending.pop(id(cost), ())]
        self.clock.charge(cost.batch_forward_s(rows))
        return out

    def prefill(self, backend: Any, prompt: list[int]) -> None:
        backend.prefill(prompt)
        if len(prompt) > 1:
            if self.prefill_mode == "separate":
                self.clock.charge(backend.cost.forward_s(len(prompt) - 1, 0, logits=1))
            else:
                self._pending.setdefault(id(backend.cost), []).append((backend, (len(prompt) - 1, 0, 1)))

    def settle(self, backends: list[Any]) -> None:
        """A request ended: its prefills still waiting for a forward of their model are charged alone."""
        for key, items in list(self._pending.items()):
            mine = [it for it in items if any(it[0] is b for b in backends)]
            for b, (k, ctx, lg) in mine:
                self.clock.charge(b.cost.forward_s(k, ctx, logits=lg))
            if mine:
                self._pending[key] = [it for it in items if not any(it[0] is b for b in backends)]


class HFEngine:
    """Real batched forwards on transformers models (`score_batch`), timed by the wall clock."""

    def __init__(self, cuda: bool = False) -> None:
        from ouroboros.backends.base import WallClock

        self.clock = WallClock(cuda=cuda)

    def forward(self, backends: list[Any], drafts: list[Draft], want: list[bool]) -> list[Scores]:
        from ouroboros.backends.hf import score_batch

        return score_batch(backends, drafts, want)

    def prefill(self, backend: Any, prompt: list[int]) -> None:
        backend.prefill(prompt)

    def settle(self, backends: list[Any]) -> None:
        pass


def _hf_backend_type() -> type | None:
    """HFBackend when its module is loaded (an hf backend exists only then), without importing torch for the sim."""
    mod = sys.modules.get("ouroboros.backends.hf")
    return getattr(mod, "HFBackend", None)


def engine_for(backend: Backend, prefill: str = "batched") -> SimEngine | HFEngine:
    """The engine for a pair's backend: real batched forwards (hf: prefills are separate forwards) or simulated
    ones (`prefill` batched into the next forward of its model, or separate)."""
    hf = _hf_backend_type()
    if hf is not None and isinstance(backend, hf):
        return HFEngine(cuda=backend.device.type == "cuda")  # type: ignore[attr-defined]
    if hasattr(backend, "cost"):   # SimBackend, ProxyBackend: the simulated clock
        return SimEngine(prefill)
    raise OuroborosError(f"batched decoding runs on the hf and sim backends, not on {type(backend).__name__}")


# ----------------------------------------------------------------------------------------------- rows
TARGET, DRAFT, PREFILL = "target", "draft", "prefill"


class Row(BackendWrapper):
    """One request slot's view of a model in a batch: the Backend protocol, with `score` (and `prefill`) run by
    the scheduler. A slot's rows (and its proposer) serve its requests one after another; `task` is the current
    one."""

    def __init__(self, inner: Any, sched: Scheduler, role: str):
        super().__init__(inner)
        self.sched, self.role = sched, role
        self.task: Task | None = None

    @property
    def clock(self) -> Clock:
        return self.sched.engine.clock

    def prefill(self, prompt: list[int]) -> None:
        assert self.task is not None
        self.sched.call(self.task, PREFILL, self.inner, prompt, False)

    def score(self, draft: Draft, want_logits: bool = False) -> Scores:
        assert self.task is not None
        return self.sched.call(self.task, self.role, self.inner, draft, want_logits)

    def commit(self, path: list[int], new_tokens: list[int]) -> None:
        self.inner.commit(path, new_tokens)
        task = self.task
        if self.role == TARGET and task is not None and task.first_token_s is None and new_tokens:
            task.first_token_s = self.sched.engine.clock.now()


@dataclass
class Request:
    prompt: list[int]
    budget: int
    id: str
    arrival_s: float = 0.0      # when it arrives (clock seconds); closed loop: when it is admitted


@dataclass
class Task:
    """A request being decoded: its slot, its gate (released when it may run) and its timings."""

    req: Request
    slot: int
    gate: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    result: Scores | None = None
    start_s: float = 0.0
    first_token_s: float | None = None
    end_s: float = 0.0
    out: PromptResult | None = None
    error: BaseException | None = None
    batch_sizes: list[int] = field(default_factory=list)   # rows in each of its target forwards


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


# ----------------------------------------------------------------------------------------------- scheduler
class Scheduler:
    """Deterministic cooperative scheduling of request threads around batched forwards (module docstring).

    Request threads only run Python between forwards, one at a time; every forward and prefill runs in the thread
    that called `run` (the caller of `serve`), so the model's intra-op thread pool always lives in one OS thread
    (OpenMP teams of several calling threads would contend for the cores). `refill()` (called with the lock held
    whenever the running thread stops) admits whatever may join now."""

    def __init__(self, engine: SimEngine | HFEngine, refill: Callable[[], None] | None = None,
                 on_leave: Callable[[Task], None] | None = None):
        self.engine = engine
        self.refill = refill
        self.on_leave = on_leave
        self._lock = threading.Lock()
        self._main = threading.Semaphore(0)      # released when every active request waits (or none is left)
        self.active: list[Task] = []             # admitted, not finished (admission order)
        self._waiting: dict[int, tuple[str, Any, Any, bool]] = {}   # id(task) -> (role, backend, payload, logits)
        self._runnable: list[Task] = []
        self.done = threading.Event()
        self.forwards: dict[str, int] = {}
        self.rows: dict[str, int] = {}

    @property
    def batch_size(self) -> int:
        """Requests decoding now (what a load-aware policy sizes its drafts for)."""
        return len(self.active)

    def admit(self, task: Task, thread: threading.Thread) -> None:
        """Add a request (called with the lock held, from `refill`): it runs when its turn comes."""
        task.start_s = self.engine.clock.now()
        self.active.append(task)
        self._runnable.append(task)
        thread.start()

    def run(self) -> None:
        """The executing thread: let the requests run; whenever all wait, fire one batched forward (or the joining
        requests' prefills), until none is left."""
        with self._lock:
            self._pass_turn()
        while True:
            self._main.acquire()
            with self._lock:
                if self.done.is_set():
                    return
                self._fire()
                self._pass_turn()

    # called from the request thread that holds the turn
    def call(self, task: Task, role: str, backend: Any, payload: Any, want_logits: bool) -> Any:
        with self._lock:
            self._waiting[id(task)] = (role, backend, payload, want_logits)
            self._pass_turn()
        task.gate.acquire()
        if task.error is not None:
            raise task.error
        res, task.result = task.result, None
        return res

    def run_task(self, task: Task, body: Callable[[Task], PromptResult]) -> None:
        """A request thread: wait for the first turn, decode, leave."""
        task.gate.acquire()
        try:
            task.out = body(task)
        except BaseException as e:  # noqa: BLE001 - serve() re-raises it after every thread has stopped
            task.error = e
        with self._lock:
            task.end_s = self.engine.clock.now()
            self.active.remove(task)
            if self.on_leave is not None:
                self.on_leave(task)
            self._pass_turn()

    def _pass_turn(self) -> None:
        """The running thread stops (it waits or has finished): admit who may join, then wake the next runnable
        request, or, when every active request waits (or none is left), the executing thread."""
        if self.refill is not None:
            self.refill()
        if self._runnable:
            self._runnable.pop(0).gate.release()
            return
        if not self.active:
            self.done.set()
        self._main.release()

    def _fire(self) -> None:
        waiting = [t for t in self.active if id(t) in self._waiting]
        if len(waiting) != len(self.active):
            raise RuntimeError("batch scheduler: a request neither runs nor waits")
        roles = {self._waiting[id(t)][0] for t in waiting}
        # joining requests' prefills first, then a step's draft phase, then its verification
        role = PREFILL if PREFILL in roles else DRAFT if DRAFT in roles else TARGET
        batch = [t for t in waiting if self._waiting[id(t)][0] == role]
        calls = [self._waiting.pop(id(t)) for t in batch]
        if role == PREFILL:
            for t, c in zip(batch, calls, strict=True):
                try:
                    self.engine.prefill(c[1], c[2])
                except BaseException as e:  # noqa: BLE001 - re-raised in the request's thread
                    t.error = e
            self._runnable.extend(batch)
            return
        try:
            out = self.engine.forward([c[1] for c in calls], [c[2] for c in calls], [c[3] for c in calls])
        except BaseException as e:  # noqa: BLE001 - re-raised in every request thread of the batch
            for t in batch:
                t.error = e
        else:
            for t, s in zip(batch, out, strict=True):
                t.result = s
        self.forwards[role] = self.forwards.get(role, 0) + 1
        self.rows[role] = self.rows.get(role, 0) + len(batch)
        if role == TARGET:
            for t in batch:
                t.batch_sizes.append(len(batch))
        self._runnable.extend(batch)


# ----------------------------------------------------------------------------------------------- load-aware
@dataclass
class LoadAware:
    """Wraps any drafting proposer: before each step, caps the draft depth at the d that maximises expected new
    tokens per second of batched forwards at the current batch size B:

        E[tokens | d] = 1 + sum_{i<=d} p_1 ... p_i    (p_i: acceptance at depth i given depth i - 1 was accepted,
                                                       this request's running estimate: acceptance is bursty, so
                                                       p_i grows with i and a single geometric rate undervalues
                                                       deep drafts)
        cost(d) = T(B rows of 1 + r d tokens) + f d * D(B rows of w tokens)

    with T, D the target's and the draft's batched cost models (D = None when the strategy has no draft model) and
    the strategy's own shape, measured as it runs: r = draft nodes per unit of depth (1 for a chain; more for trees
    and probe windows), f = draft forwards per unit of depth (1 for SpS; below 1 where the drafter emits several
    tokens per forward, as Ouroboros' does), w = tokens per draft forward. d = 0 is a plain vanilla step. Every
    `explore_every`-th step that drafts at all drafts one deeper than chosen, so the next depth's acceptance stays
    measured and the cap can grow. One deeper, not uncapped: a batch's draft phase lasts as long as its deepest
    row's, so one row drafting deep holds up every row (a step with drafting off explores nothing). Lossless by
    construction: it only lowers `max_depth()`, which every proposer honours (tests/test_batch.py checks it)."""

    inner: Any
    load: Callable[[], int]                 # the current batch size
    target_cost: Any
    draft_cost: Any = None
    max_draft: int = 16
    decay: float = 0.98                     # the running estimates' memory per observation
    prior: float = 0.7                      # acceptance at depth 1 before any is observed (`prior_weight` steps)
    prior_weight: float = 2.0
    explore_every: int = 4                  # every n-th batched step, drafting rows draft one deeper than chosen
    tick: Callable[[], int] | None = None   # the batch's step counter (all rows explore on the same steps)
    stats_: DepthStats | None = None        # estimates shared by every slot of a serve (None: this wrapper's own)
    chosen: list[int] = field(default_factory=list)
    _steps: int = 0
    _offered: int = 0

    def __post_init__(self) -> None:
        if self.stats_ is None:
            self.stats_ = DepthStats(self.max_draft, self.draft_cost is not None)
        st = self.stats_
        self._reached, self._accepted, self._shape = st.reached, st.accepted, st.shape
        self._mark: tuple[int, int] | None = None

    def __getattr__(self, name: str) -> Any:   # counters, needs_draft_model, tree_models, checkpoint
        return getattr(self.inner, name)

    def begin(self, prompt: list[int]) -> None:
        self.chosen = []
        self.inner.begin(prompt)

    def stats(self) -> dict[str, float]:
        """The inner proposer's stats + the chosen depth caps (`load_aware.depth_sum` / `load_aware.steps`)."""
        return {**self.inner.stats(), "load_aware.depth_sum": float(sum(self.chosen)),
                "load_aware.steps": float(len(self.chosen)), "load_aware.off_steps": float(self.chosen.count(0))}

    def acceptances(self, d: int) -> list[float]:
        """p_1 .. p_d. Each depth's prior is the estimate one depth up (`prior` for depth 1): a depth seldom
        offered inherits the trend, so deeper drafts keep being tried where the shallower ones pay."""
        out, q = [], self.prior
        for i in range(1, d + 1):
            q = (self._accepted[i] + q * self.prior_weight) / (self._reached[i] + self.prior_weight)
            out.append(q)
        return out

    def shape(self) -> tuple[float, float, float]:
        """(r, f, w): target nodes per depth, draft forwards per depth, tokens per draft forward."""
        depth, nodes, fwd, toks = self._shape
        return nodes / depth, fwd / depth, (toks / fwd if fwd > 0 else 1.0)

    def best_depth(self, batch: int, ctx: int) -> int:
        best, best_rate = 0, 0.0
        ps = self.acceptances(self.max_draft)
        r, f, w = self.shape()
        e, run = 1.0, 1.0
        for d in range(self.max_draft + 1):
            if d:
                run *= ps[d - 1]
                e += run
            t = self.target_cost.uniform_batch_s(batch, 1 + max(1, round(r * d)) if d else 1, ctx)
            if d and self.draft_cost is not None and f > 0:
                t += f * d * self.draft_cost.uniform_batch_s(batch, max(1, round(w)), ctx)
            rate = e / t
            if rate > best_rate:
                best, best_rate = d, rate
        return best

    def propose(self, state: DecodeState) -> Draft:
        from dataclasses import replace

        d = self.best_depth(max(self.load(), 1), len(state.tokens))
        if d:   # drafting pays: every n-th step drafts one deeper (when drafting is off, nothing is explored)
            self._steps += 1
            if (self.tick() if self.tick is not None else self._steps) % self.explore_every == 0:
                d += 1
        self.chosen.append(d)
        if d < state.max_depth():
            state = replace(state, remaining=d + 1)
        c = self.inner.counters
        mark = (c.forwards, c.tokens)
        draft = self.inner.propose(state)
        self._offered = min(max_candidate_depth(draft), self.max_draft)
        self._nodes, self._mark = len(draft), mark
        return draft

    def observe(self, verdict: Any, scores: Scores, state: DecodeState) -> None:
        self.inner.observe(verdict, scores, state)
        c = self.inner.counters
        if self._offered and self._mark is not None:   # this step's shape (draft work in observe included)
            g = self.decay
            sh = self._shape
            for i, v in enumerate((self._offered, self._nodes, c.forwards - self._mark[0], c.tokens - self._mark[1])):
                sh[i] = sh[i] * g + v
        m = len(verdict.path)
        for i in range(1, min(self._offered, m + 1) + 1):   # depths reached: 1 .. min(offered, accepted + 1)
            self._reached[i] = self._reached[i] * self.decay + 1
            self._accepted[i] = self._accepted[i] * self.decay + (1 if m >= i else 0)


class DepthStats:
    """`LoadAware`'s running estimates, shareable by every slot of a serve: acceptance is a property of the pair
    and the task far more than of one request, and rows that agree on a depth keep a batch's draft phase short
    (it lasts as long as its deepest row's)."""

    def __init__(self, max_draft: int, has_draft: bool):
        n = max_draft + 1
        self.reached = [0.0] * n     # [i]: decayed steps that offered depth i with depth i - 1 accepted
        self.accepted = [0.0] * n    # [i]: ... and depth i accepted too
        # decayed sums over drafting steps: depth, target nodes, draft forwards, draft tokens (prior: one step of
        # a chain drafted one token per draft forward)
        self.shape = [1.0, 1.0, 1.0 if has_draft else 0.0, 1.0]


# ----------------------------------------------------------------------------------------------- serving
@dataclass
class Load:
    concurrency: int = 1          # requests decoding at once at most (closed loop: a new one starts as one ends)
    rate: float | None = None     # open loop: Poisson arrivals per second (simulated clock only); None = closed
    seed: int = 0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise OuroborosError(f"serve.concurrency must be >= 1, got {self.concurrency}")
        if self.rate is not None and not self.rate > 0:
            raise OuroborosError(f"serve.rate must be > 0 requests per second, got {self.rate}")


def arrivals(n: int, rate: float, seed: int) -> list[float]:
    """Poisson arrival times (seconds) of n requests at `rate` per second."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


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


@dataclass
class Slot:
    target: Row
    draft: Row | None
    proposer: Proposer


def serve(requests: Sequence[Request], load: Load, engine: SimEngine | HFEngine,
          make_slot: Callable[[Scheduler], Slot], eos_ids: Sequence[int] = (), verifier: Any = None) -> ServeResult:
    """Decode every request under `load` with continuous batching, each through the one loop; returns them in
    request order. `make_slot(sched)` builds a slot: fresh rows on the pair and a proposer on them, kept from
    request to request (as a single-request runner keeps its proposer)."""
    from simulators.backend import SimClock

    if not requests:
        raise OuroborosError("serve: no requests")
    verifier = verifier or greedy_verifier
    reqs = [Request(r.prompt, r.budget, r.id, r.arrival_s) for r in requests]
    if load.rate is not None:
        if not isinstance(engine.clock, SimClock):
            raise OuroborosError("open-loop arrivals (serve.rate) need the simulated clock (backend=sim)")
        for r, t in zip(reqs, arrivals(len(reqs), load.rate, load.seed), strict=True):
            r.arrival_s = t
    queue = list(reqs)
    free = list(range(load.concurrency))
    slots: dict[int, Slot] = {}
    tasks: list[Task] = []

    def refill() -> None:
        if not (queue and free):
            return
        now = engine.clock.now()
        if load.rate is not None and queue and free and not sched.active and queue[0].arrival_s > now:
            engine.clock.charge(queue[0].arrival_s - now)   # type: ignore[union-attr]  # idle until the next one
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


def fresh_like(backend: Any) -> Any:
    """A new backend on the same model as `backend` (own tokens and cache): one per batch slot."""
    from simulators.backend import ProxyBackend, SimBackend, SimClock

    hf = _hf_backend_type()
    if hf is not None and isinstance(backend, hf):
        return hf(backend.model, backend.max_context, backend.name)  # type: ignore[attr-defined]
    if isinstance(backend, SimBackend):
        return SimBackend(backend.lm, backend.cost, SimClock(), backend.max_context, backend.name)
    if isinstance(backend, ProxyBackend):
        return ProxyBackend(fresh_like(backend.inner), backend.cost, SimClock(), backend.name)
    raise OuroborosError(f"batched decoding runs on the hf and sim backends, not on {type(backend).__name__}")


def share_pool(prop: Any, pool: Any) -> None:
    """Point an Ouroboros proposer (and its draft-side lookahead) at `pool`: one phrase pool for every slot."""
    prop.pool = pool
    inner = getattr(prop, "_inner", None)
    if inner is not None and hasattr(inner, "pool"):
        inner.pool = pool


def slot_factory(target: Backend, draft: Backend | None, strategy: str, params: dict[str, Any],
                 load_aware: bool = False, max_draft: int = 16, shared_pool: bool = False
                 ) -> Callable[[Scheduler], Slot]:
    """`make_slot` for `serve`: fresh rows on the pair's models and the strategy's proposer on them; with
    `load_aware`, the proposer wrapped in `LoadAware` (sized by the pair's cost models: sim backends only); with
    `shared_pool`, every slot's Ouroboros proposer uses the first slot's phrase pool (its history mechanism at
    serving scale: a phrase one request harvests serves every request; requests run one at a time between
    forwards, so the pool is never touched concurrently)."""
    from ouroboros.strategies import build_proposer, get_spec, make_config

    needs_draft = bool(get_spec(strategy).needs_draft_model)
    if load_aware and not hasattr(target, "cost"):
        raise OuroborosError("serve.load_aware sizes drafts with the cost model: it runs on backend=sim")
    if shared_pool and not (strategy == "ouroboros" and make_config(strategy, params).history):
        raise OuroborosError("serve.shared_pool shares Ouroboros' history pool: it needs strategy=ouroboros with "
                             "history=true")
    pools: list[Any] = []
    shared_stats = DepthStats(max_draft, needs_draft and draft is not None)

    def make(sched: Scheduler) -> Slot:
        t_row = Row(fresh_like(target), sched, TARGET)
        d_row = Row(fresh_like(draft), sched, DRAFT) if needs_draft and draft is not None else None
        prop: Any = build_proposer(strategy, params, t_row, d_row)
        if shared_pool:
            if pools:
                share_pool(prop, pools[0])
            else:
                pools.append(prop.pool)
        if load_aware:
            prop = LoadAware(prop, lambda: sched.batch_size, target.cost,  # type: ignore[attr-defined]
                             getattr(draft, "cost", None) if d_row is not None else None, max_draft,
                             tick=lambda: sched.forwards.get(TARGET, 0), stats_=shared_stats)
        return Slot(t_row, d_row, prop)

    return make
