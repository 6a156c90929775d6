"""The simulated serving engine: batched forwards under load (ouroboros/serving/batch.py) on the `sim` backend.

`SimEngine` is the sim backend kind's engine (simulators/plugin.py `SimKind.engine`): each row of a
batched forward is scored by its own backend (surrogate, replayed or proxy decisions, exactly as alone), and the
engine's simulated clock is charged the cost model's `batch_forward_s` of the rows' shapes, once per batched
forward.

Knows nothing of requests, scheduling or which strategy runs (ouroboros/serving/scheduler.py drives it).
"""

from __future__ import annotations

from typing import Any

from ouroboros.loop.contracts import Scores
from ouroboros.loop.draft import Draft
from ouroboros.serving.load import check_prefill
from simulators.backend import SimClock

Row = tuple[int, int, int]   # (tokens fed, cached context, LM-head rows): one row of a batched forward


class SimEngine:
    """Simulated batched forwards: decisions from each row's own backend, time from the batch cost model.

    prefill="batched" (serving engines' chunked / piggy-backed prefill): a joining request's prompt rides in the
    next batched forward of the same model (its tokens add to that forward's rows; the weights are read once);
    a prefill no forward of its model ever follows (a draft model that load-aware never drafted with) is charged
    alone when its request ends. prefill="separate": each prefill is its own forward when the request joins, as
    the hf backend runs them (what `check clock --batches` replays)."""

    def __init__(self, prefill: str = "batched") -> None:
        check_prefill(prefill)
        self.clock = SimClock()
        self.prefill_mode = prefill
        self._pending: dict[int, list[tuple[Any, Row]]] = {}   # id(cost model) -> (backend, its prefill's row)

    @classmethod
    def for_backend(cls, backend: Any, prefill: str = "batched") -> SimEngine:
        """The engine for a pair whose target is `backend` (a SimBackend or ProxyBackend)."""
        return cls(prefill)

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
