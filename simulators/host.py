"""The proposers' host time on the simulated clock: what a real decode step spends outside the target's forward
(the strategy's own Python: prompt lookup, suffix trees, Token Recycling's top-k over the target's logits, ...; and
the loop's bookkeeping), measured on a real backend and charged per step by the simulator.

A real run records per step `draft_s` (in `propose`) and `other_s` (commit and `observe`): wall time the cost model,
which charges model forwards only, never sees. `python -m simulators calibrate proposers`
(simulators/lab/calibration/proposers.py) fits each of the two as a + b x draft nodes per strategy, from a real pair's
records, into the hardware profile of the machine that ran them:

    proposer_costs:
      <target model name>:              # the real pair measured (its vocabulary sizes Token Recycling's top-k)
        fit: {...}                      # provenance: command, records, CPU, threads, commit
        <strategy>: {draft_s: a, draft_s_per_node: b, other_s: a', other_s_per_node: b', steps: N, prompt_err: e}

`HostTimed` wraps the proposer of a run on a simulated pair whose hardware profile has its strategy's figures for
the pair's target: after `propose` it charges draft_s + draft_s_per_node x n to the clock (n: the draft's nodes),
after `observe` other_s + other_s_per_node x n; a function of the draft's size only, never of the simulator's own
wall time, so the charge follows the real pair's measurement (not the surrogate's, whose vocabulary is smaller).
Strategies that run a draft model are never charged: their `draft_s` holds the draft's forwards too, and the cost
model's error on those forwards is larger than the Python around them, so the two cannot be separated honestly.
Everything else is charged nothing, and `HostCharging.host_note` says so in one line.

Knows nothing of the loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ouroboros.errors import OuroborosError
from ouroboros.loop.contracts import Counters, DecodeState, Proposer, Scores
from ouroboros.loop.draft import Draft
from ouroboros.loop.verify import Verdict

SECTION = "proposer_costs"
COSTS = ("draft_s", "draft_s_per_node", "other_s", "other_s_per_node")   # seconds; per draft node
STATS = {"steps": int, "prompt_err": float}                                 # what the fit saw (not charged)
FIT = "fit"                                                                 # a model's provenance block


@dataclass(frozen=True)
class ProposerCost:
    """Host seconds of one decode step of one strategy, in its two recorded parts (module doc)."""

    draft_s: float = 0.0
    draft_s_per_node: float = 0.0
    other_s: float = 0.0
    other_s_per_node: float = 0.0
    steps: int = 0
    prompt_err: float = 0.0

    def propose_s(self, nodes: int) -> float:
        return self.draft_s + self.draft_s_per_node * nodes

    def observe_s(self, nodes: int) -> float:
        return self.other_s + self.other_s_per_node * nodes

    def step_s(self, nodes: int) -> float:
        return self.propose_s(nodes) + self.observe_s(nodes)

    def to_dict(self) -> dict[str, Any]:
        return {k: (float(f"{getattr(self, k):.6g}") if k != "steps" else self.steps) for k in (*COSTS, *STATS)}


def parse_costs(hw: str, section: Any) -> dict[str, dict[str, ProposerCost]]:
    """The `proposer_costs:` section of hardware profile `hw` as model -> strategy -> cost; a bad one is one error
    line (what is wrong and where). Strategy names are checked by `check_strategies` (pair_setup)."""
    if section is None:
        return {}
    where = f"hardware {hw!r}: {SECTION}"
    if not isinstance(section, dict):
        raise OuroborosError(f"{where} must map model names to strategies, got {section!r}")
    out: dict[str, dict[str, ProposerCost]] = {}
    for model, strategies in section.items():
        if not isinstance(strategies, dict):
            raise OuroborosError(f"{where}.{model} must map strategy names to their costs, got {strategies!r}")
        out[str(model)] = {}
        for name, d in strategies.items():
            if name == FIT:
                continue
            at = f"{where}.{model}.{name}"
            if not isinstance(d, dict):
                raise OuroborosError(f"{at} must be a mapping with {', '.join(COSTS)}, got {d!r}")
            unknown = sorted(set(d) - set(COSTS) - set(STATS))
            if unknown:
                raise OuroborosError(f"{at} has no field {unknown[0]!r}; fields: {', '.join((*COSTS, *STATS))}")
            missing = [k for k in COSTS if k not in d]
            if missing:
                raise OuroborosError(f"{at} needs {', '.join(missing)}")
            for k, v in d.items():
                want = STATS.get(k, float)
                ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and (want is float or isinstance(v, int))
                      and math.isfinite(v) and v >= 0)
                if not ok:
                    raise OuroborosError(f"{at}.{k} must be {'an int' if want is int else 'a number'} >= 0, got {v!r}")
            out[str(model)][str(name)] = ProposerCost(**d)
    return out


def check_strategies(hw: str, section: Any) -> None:
    """Every strategy named in the section is one of the loop's strategies that runs no draft model."""
    from ouroboros.strategies import REGISTRY

    for model, costs in parse_costs(hw, section).items():
        for name in costs:
            if name not in REGISTRY:
                raise OuroborosError(f"hardware {hw!r}: {SECTION}.{model} names unknown strategy {name!r}; known: "
                                     f"{', '.join(sorted(REGISTRY))}")
            if REGISTRY[name].needs_draft_model:
                raise OuroborosError(f"hardware {hw!r}: {SECTION}.{model}.{name}: {name} runs a draft model, whose "
                                     "forwards the cost model charges; its host time cannot be separated from them")


class HostTimed:
    """`inner` with its host time charged to `clock` per step (module doc); everything else is `inner`'s."""

    def __init__(self, inner: Proposer, cost: ProposerCost, clock: Any):
        self.inner, self.cost, self.clock = inner, cost, clock
        self._nodes = 0
        self.counters: Counters = inner.counters   # the proposer's own object (the loop reads it, never replaces it)
        self.needs_draft_model: bool = inner.needs_draft_model
        self.tree_models: tuple[str, ...] = inner.tree_models
        self.reads_logits: bool = inner.reads_logits

    def __getattr__(self, name: str) -> Any:   # pool, use_pool, ... of the strategy
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def begin(self, prompt: list[int]) -> None:
        self.inner.begin(prompt)

    def propose(self, state: DecodeState) -> Draft:
        draft = self.inner.propose(state)
        self._nodes = len(draft)
        self.clock.charge(self.cost.propose_s(self._nodes))
        return draft

    def observe(self, verdict: Verdict, scores: Scores, state: DecodeState) -> None:
        self.inner.observe(verdict, scores, state)
        self.clock.charge(self.cost.observe_s(self._nodes))

    def stats(self) -> dict[str, float]:
        return self.inner.stats()

    def checkpoint(self) -> None:
        self.inner.checkpoint()


@dataclass(frozen=True)
class HostTimes:
    """What a simulated pair's hardware profile measured of proposers' host time: the pair's target's figures by
    strategy (empty: none), and where they come from."""

    hardware: str = ""
    model: str = ""
    costs: dict[str, ProposerCost] = field(default_factory=dict)
    measured_for: tuple[str, ...] = ()     # the models the profile has figures for
    cpu: str = ""

    @classmethod
    def of(cls, hw: Any, model: str) -> HostTimes:
        """`hw`: a simulators.hardware.Hardware; `model`: the simulated pair's target name."""
        section = hw.proposer_costs or {}
        fit = (section.get(model) or {}).get(FIT) or {}
        return cls(hw.name, model, parse_costs(hw.name, section).get(model, {}), tuple(section),
                   str(fit.get("cpu") or ""))

    def note(self, strategies: list[str], served: list[str]) -> str:
        """One line: which of the run's strategies get their host time charged, which do not and why."""
        from ouroboros.strategies import REGISTRY

        head = "proposer host time: "
        if not self.costs:
            why = (f"hardware {self.hardware} measured it for {', '.join(self.measured_for)}, not {self.model}"
                   if self.measured_for else f"not measured for hardware {self.hardware}")
            return f"{head}not charged ({why}; python -m simulators calibrate proposers)"
        charged = [s for s in strategies if s in self.costs and s not in served]
        parts = []
        if charged:
            parts.append(f"charged per step for {', '.join(charged)} (measured on {self.cpu or 'an unnamed CPU'}, "
                         f"hardware {self.hardware})")
        nots = [f"{s} (serve.concurrency: batched steps are not charged)" if s in served else
                f"{s} (runs a draft model: not separable from its forwards)"
                if s in REGISTRY and REGISTRY[s].needs_draft_model else f"{s} (not measured)"
                for s in strategies if s not in charged]
        if nots:
            parts.append(f"not charged for {', '.join(nots)}")
        return head + "; ".join(parts)


class HostCharging:
    """The simulated backends' side of `ouroboros.loop.contracts.ChargesHost`: `host` is set by make_pair."""

    host: HostTimes = HostTimes()
    clock: Any

    def host_timed(self, strategy: str, proposer: Proposer) -> Proposer:
        cost = self.host.costs.get(strategy)
        return proposer if cost is None else HostTimed(proposer, cost, self.clock)

    def host_note(self, strategies: list[str], served: list[str]) -> str:
        return self.host.note(strategies, served)
