"""The `sim` backend: the Backend protocol with modelled time.

- `SimClock`: a clock that only moves when a forward is charged to it. The target and the draft of a pair
  share one, so the loop's draft / verify split is modelled time.
- `SimBackend`: token decisions from a `TokenModel` (surrogate LM or trace replay, incremental states, so a
  tree of n nodes costs n steps); every forward charges `cost.forward_s(k, ctx, logits)` with k = tokens fed
  (pending + draft nodes, probes included), ctx = cached tokens and logits = LM-head rows computed (draft
  nodes + 1, as `hf` keeps them; 1 for a prefill). Same cache convention as `hf`: the
  last committed token(s) stay pending and are fed with the next forward.
- `LazyPreds`: the predictions a sim forward returns, each computed when first read. A TokenModel's
  prediction is a pure function of the context state, so evaluating only the nodes a strategy reads gives
  the same tokens as evaluating all of them; it is what makes lookahead windows cheap to simulate (the
  proposer reads the top level's W predictions of W·(N-1) probes). The clock still charges every node.
- `ProxyBackend`: any real backend decides the tokens (e.g. a small `hf` pair), the clock charges another
  model's cost (e.g. the large pair on an H100).
- Both charge a strategy's measured host time per step where the hardware profile has it (`HostCharging`,
  simulators/host.py; make_pair sets `host`).

The sequence bookkeeping (tokens, cache length, the score -> commit order, rollback) is the core's
`SequenceBackend`, shared with the hf backend; `fresh()` gives a batch slot its own backend on the same model
(simulators/serving.py runs them under load).

Knows nothing of strategies, verification or budgets.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ouroboros.backends.base import BackendWrapper, Scores, SequenceBackend
from ouroboros.errors import OuroborosError
from ouroboros.loop.contracts import Servable
from ouroboros.loop.draft import Draft
from simulators.cost_model import CostModel
from simulators.host import HostCharging
from simulators.surrogate import NGramLM, TokenModel

RUNNER_UP = -1e30   # logit of the surrogate's first runner-up (the next: 2 x it, ...): a rank, no probability


class SimClock:
    """Modelled seconds. `now()` for the loop; `charge(s)` for backends."""

    __slots__ = ("t",)
    simulated = True

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def charge(self, seconds: float) -> None:
        if seconds < 0:
            raise OuroborosError(f"cannot charge a negative time ({seconds} s) to the simulated clock")
        self.t += seconds


_MATERIALISING = ("__iter__", "__reversed__", "__contains__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__",
                  "__ge__", "__add__", "__mul__", "__rmul__", "__repr__", "copy", "count",
                  "index", "sort", "pop", "remove", "insert", "reverse", "__delitem__", "__iadd__", "__imul__")


_get, _set = list.__getitem__, list.__setitem__


class LazyPreds(list):
    """`Scores.preds` of one sim forward over `tokens` / `parents` (a draft tree) hanging off the state `root`:
    preds[0] = predict(root), preds[i + 1] = predict(state after node i). States and predictions are computed
    on first read and kept, so the object stays valid after the backend moves on. Integer reads evaluate one
    entry; anything else (iteration, slices, comparison, copies, pickling) fills every entry first and then
    behaves as the plain list. Unread entries hold None: C code that reads a list's items directly (bypassing
    its methods, as some C extensions do) must get `materialise()`d preds."""

    __slots__ = ("_root", "_tokens", "_parents", "_states", "_step", "_predict")

    def __init__(self, root: Any, tokens: list[int], parents: list[int], step: Callable[[Any, int], Any],
                 predict: Callable[[Any], int]):
        n = len(tokens)
        super().__init__([None] * (n + 1))
        self._root, self._tokens, self._parents = root, list(tokens), list(parents)
        self._states: list[Any] = [None] * n
        self._step, self._predict = step, predict

    def __getitem__(self, i):  # type: ignore[override]
        if type(i) is int:
            v = _get(self, i)
            if v is None:
                if i < 0:
                    i += len(self)
                v = self._predict(self.state(i - 1))
                _set(self, i, v)
            return v
        self.materialise()
        return _get(self, i)

    def __reduce_ex__(self, protocol):  # type: ignore[override]
        return (list, (list(self),))  # pickles and copies as the plain list

    def state(self, node: int) -> Any:
        """Context state after draft node `node` (the root for -1)."""
        if node < 0:
            return self._root
        states = self._states
        st = states[node]
        if st is not None:
            return st
        parents, toks = self._parents, self._tokens
        chain = []  # walk up to the nearest known ancestor, then step down
        j = node
        while j >= 0 and states[j] is None:
            chain.append(j)
            j = parents[j]
        st = self._root if j < 0 else states[j]
        step = self._step
        for j in reversed(chain):
            st = states[j] = step(st, toks[j])
        return st

    def materialise(self) -> list[int]:
        """Compute every entry; returns self."""
        predict, state = self._predict, self.state
        for i in range(len(self)):
            if _get(self, i) is None:
                _set(self, i, predict(state(i - 1)))
        return self


def _materialising(name: str) -> Callable[..., Any]:
    base = getattr(list, name)

    def method(self: LazyPreds, *args: Any, **kwargs: Any) -> Any:
        self.materialise()
        return base(self, *args, **kwargs)

    method.__name__ = name
    return method


for _name in _MATERIALISING:
    setattr(LazyPreds, _name, _materialising(_name))


class SimBackend(HostCharging, SequenceBackend):
    kind = "sim"   # its backend kind's name (simulators/plugin.py SIM)

    def __init__(self, lm: TokenModel, cost: CostModel, clock: SimClock, max_context: int = 4096,
                 name: str = "model"):
        super().__init__(name, max_context)
        self.lm = lm
        self.base_lm = lm
        # prompt ids -> the token source deciding that prompt (sim.by_category: SimPair.route); others: base_lm
        self.routes: dict[tuple[int, ...], TokenModel] = {}
        self.cost = cost
        self.clock = clock
        self.vocab_size = lm.vocab_size
        self.busy_s = 0.0                        # modelled seconds charged by this backend (prefill included)
        self._states: list[Any] = [lm.start()]   # _states[i] = state of tokens[:i]
        self._scored = LazyPreds(None, [], [], lm.step, lm.predict)  # the last forward's predictions

    def fresh(self) -> SimBackend:
        """A new, empty backend on the same token source and cost model, with a clock of its own."""
        out = SimBackend(self.base_lm, self.cost, SimClock(), self.max_context, self.name)
        out.routes = self.routes
        return out

    def _restart(self, prompt: list[int]) -> None:
        if self.routes:
            self.lm = self.routes.get(tuple(prompt), self.base_lm)
        step = self.lm.step
        st = self.lm.start()
        states = [st]
        for t in prompt:
            st = step(st, t)
            states.append(st)
        begin = getattr(self.lm, "begin", None)
        if begin is not None:  # what follows is the model's own output (sim.copy_from)
            states[-1] = begin(st, prompt)
        self._states = states

    def _prefill_forward(self, k: int) -> None:
        dt = self.cost.forward_s(k, 0, logits=1)  # a prefill keeps the last row's logits only
        self.clock.charge(dt)
        self.busy_s += dt

    def tree_refusal(self) -> str | None:
        return None  # a surrogate scores any tree

    def score(self, draft: Draft, want_logits: bool = False) -> Scores:
        n_p = self._pending()
        n = len(draft.tokens)
        preds = LazyPreds(self._states[-1], draft.tokens, draft.parents, self.lm.step, self.lm.predict)
        dt = self.cost.forward_s(n_p + n, self.cache_len, logits=n + 1)  # rows: the root's + one per node
        self.clock.t += dt
        self.busy_s += dt
        self._count_score(n_p, n)
        self._scored = preds
        if want_logits:
            preds.materialise()
        return Scores(preds=preds, logits=self._one_hot(preds) if want_logits else None)

    def _one_hot(self, preds: LazyPreds):
        """Greedy-only scores as logits ([n + 1, V] float32): 0 at the chosen token, -inf elsewhere, except that a
        surrogate target ranks its runner-ups (`NGramLM.ranked`: the longest matching context's other continuations,
        then the shorter contexts' new ones) as RUNNER_UP, 2 x RUNNER_UP, ...: a top-k for a
        proposer that reads one (Token Recycling), with no probability (softmax gives them exactly 0 at any
        temperature, so sampling stays greedy). A trace replay has no runner-ups: its top-k is its prediction."""
        import torch

        logits = torch.full((len(preds), self.vocab_size), float("-inf"))
        logits[torch.arange(len(preds)), torch.tensor(preds)] = 0.0
        if isinstance(self.lm, NGramLM):
            for i, p in enumerate(preds):
                others = [c for c in self.lm.ranked(preds.state(i - 1).tail) if c != p]
                logits[i, others] = torch.arange(1, len(others) + 1, dtype=logits.dtype) * RUNNER_UP
        return logits

    def _keep(self, path: list[int], base: int, new_tokens: list[int]) -> None:
        states, state = self._states, self._scored.state
        for i in path:
            states.append(state(i))
        if len(new_tokens) > len(path):
            step, st = self.lm.step, states[-1]
            for t in new_tokens[len(path):]:
                st = step(st, t)
                states.append(st)

    def _forget(self) -> None:
        del self._states[len(self.tokens) + 1:]

    def _push(self, tokens: list[int]) -> None:
        step, states = self.lm.step, self._states
        st = states[-1]
        for t in tokens:
            st = step(st, t)
            states.append(st)


class ProxyBackend(HostCharging, BackendWrapper):
    """A real backend decides the tokens; the simulated clock charges `cost` for each of its forwards."""

    kind = "sim"   # its clock is the simulator's

    def __init__(self, inner: Servable, cost: CostModel, clock: SimClock, name: str = "proxy"):
        super().__init__(inner)
        self.inner: Servable = inner
        self.cost, self.clock, self.name = cost, clock, name
        self.busy_s = 0.0

    def fresh(self) -> ProxyBackend:
        """A fresh copy of the real backend under the same cost model, with a clock of its own."""
        return ProxyBackend(self.inner.fresh(), self.cost, SimClock(), self.name)

    def prefill(self, prompt: list[int]) -> None:
        self.inner.prefill(prompt)
        if len(prompt) > 1:
            dt = self.cost.forward_s(len(prompt) - 1, 0, logits=1)
            self.clock.charge(dt)
            self.busy_s += dt

    def score(self, draft: Draft, want_logits: bool = False) -> Scores:
        k, ctx = len(self.inner.tokens) - self.inner.cache_len + len(draft), self.inner.cache_len
        out = self.inner.score(draft, want_logits)
        dt = self.cost.forward_s(k, ctx, logits=len(draft) + 1)
        self.clock.charge(dt)
        self.busy_s += dt
        return out
