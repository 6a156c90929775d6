"""Batched decoding's scheduler: request threads around batched forwards, deterministic and cooperative.

Every request runs `decode.decode` unchanged, in its own thread, on `Row` backends: a `Row` is a Backend whose
`score` does not compute but hands its draft to the `Scheduler` and waits. Exactly one request thread runs at a
time, in admission order; when every active request waits on a forward, the scheduler fires ONE batched forward for
one model through its `Engine` (the draft model before the target, so a step is one batched draft phase then one
batched verification) over every request waiting on that model, then lets those requests go on, in admission order.
Each request thus verifies and commits its own tree, exactly as alone (batched scoring is exact per row), while the
engine's clock is charged once per batched forward. Joining requests' prefills go first.

Knows nothing of which backend, which strategy or which load (ouroboros/serving/batch.py `serve` admits the requests).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ouroboros.backends.base import BackendWrapper
from ouroboros.loop.contracts import Clock, Scores
from ouroboros.loop.draft import Draft
from ouroboros.loop.metrics import PromptResult
from ouroboros.serving.load import DRAFT, PREFILL, TARGET, Request

__all__ = ["DRAFT", "PREFILL", "TARGET", "Engine", "Row", "Scheduler", "Task"]


class Engine(Protocol):
    """What fires a batch's forwards (each backend kind builds its own: `BackendKind.engine`): `forward` scores every
    row's draft in ONE batched forward of one model, charging `clock` once; `prefill` runs (or defers) a joining
    request's prefill; `settle` charges what a leaving request still owes (a deferred prefill)."""

    @property
    def clock(self) -> Clock: ...
    def forward(self, backends: list[Any], drafts: list[Draft], want: list[bool]) -> list[Scores]: ...
    def prefill(self, backend: Any, prompt: list[int]) -> None: ...
    def settle(self, backends: list[Any]) -> None: ...


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


class Scheduler:
    """Deterministic cooperative scheduling of request threads around batched forwards (module docstring).

    Request threads only run Python between forwards, one at a time; every forward and prefill runs in the thread
    that called `run` (the caller of `serve`), so the model's intra-op thread pool always lives in one OS thread
    (OpenMP teams of several calling threads would contend for the cores). `refill()` (called with the lock held
    whenever the running thread stops) admits whatever may join now."""

    def __init__(self, engine: Engine, refill: Callable[[], None] | None = None,
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
