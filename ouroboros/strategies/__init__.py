"""Strategy registry: name -> (config dataclass, proposer class). One line per strategy; the loop never
changes when a strategy is added.

`build_proposer(name, params, target, draft)` validates `params` through the strategy's config dataclass
(unknown keys and bad values -> OuroborosError, one line).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ouroboros.backends.base import Backend, OuroborosError
from ouroboros.strategies.base import DecodeState, Proposer
from ouroboros.strategies.cascade import CascadeConfig, CascadeProposer
from ouroboros.strategies.lookahead import LookaheadConfig, LookaheadProposer
from ouroboros.strategies.ouroboros import OuroborosConfig, OuroborosProposer
from ouroboros.strategies.pld import PLDConfig, PLDProposer
from ouroboros.strategies.rest import RestConfig, RestProposer
from ouroboros.strategies.speculative import SpeculativeConfig, SpeculativeProposer
from ouroboros.strategies.vanilla import VanillaConfig, VanillaProposer


@dataclass(frozen=True)
class StrategySpec:
    config: type
    proposer: type

    @property
    def needs_draft_model(self) -> bool:
        return bool(getattr(self.proposer, "needs_draft_model", False))


REGISTRY: dict[str, StrategySpec] = {
    "vanilla": StrategySpec(VanillaConfig, VanillaProposer),
    "speculative": StrategySpec(SpeculativeConfig, SpeculativeProposer),
    "pld": StrategySpec(PLDConfig, PLDProposer),
    "lookahead": StrategySpec(LookaheadConfig, LookaheadProposer),
    "ouroboros": StrategySpec(OuroborosConfig, OuroborosProposer),
    "rest": StrategySpec(RestConfig, RestProposer),
    "cascade": StrategySpec(CascadeConfig, CascadeProposer),
}


def get_spec(name: str) -> StrategySpec:
    if name not in REGISTRY:
        raise OuroborosError(f"unknown strategy '{name}'; known: {', '.join(sorted(REGISTRY))}")
    return REGISTRY[name]


def make_config(name: str, params: dict[str, Any] | None = None) -> Any:
    spec = get_spec(name)
    params = dict(params or {})
    fields = {f.name for f in dataclasses.fields(spec.config)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise OuroborosError(f"strategy '{name}' has no option {unknown[0]!r}; options: {', '.join(sorted(fields))}")
    try:
        return spec.config(**params)
    except TypeError as e:
        raise OuroborosError(f"strategy '{name}': {e}") from None


def build_proposer(name: str, params: dict[str, Any] | None, target: Backend, draft: Backend | None = None) -> Proposer:
    spec = get_spec(name)
    return spec.proposer(make_config(name, params), target, draft)


__all__ = ["REGISTRY", "DecodeState", "Proposer", "build_proposer", "get_spec", "make_config"]
