"""Strategy registry: name -> (config dataclass, proposer class). One line per strategy; the loop never
changes when a strategy is added.

`build_proposer(name, params, target, draft)` validates `params` through the strategy's config dataclass
(unknown keys and bad values -> OuroborosError, one line): each value's type against the field's annotation
(`check_type`: int, float, bool, str, `X | None`, `list[int]`), then the dataclass's own __post_init__ ranges.
Once the models are loaded and before anything is measured, the executor calls `check_trees` (which models a
configuration gives token trees: `tree_models`), `check_lengths` (no draft as large as the context) and
`check_loaded` (saved files against the model's vocabulary).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass
from typing import Any

from ouroboros.backends.base import Backend
from ouroboros.errors import OuroborosError
from ouroboros.running.peer_configs import PEERS, PeerSpec
from ouroboros.strategies.base import ChecksFiles, DecodeState, Proposer
from ouroboros.strategies.cascade import CascadeConfig, CascadeProposer
from ouroboros.strategies.lookahead import LookaheadConfig, LookaheadProposer
from ouroboros.strategies.ouroboros import OuroborosConfig, OuroborosProposer
from ouroboros.strategies.pld import PLDConfig, PLDProposer
from ouroboros.strategies.recycling import RecyclingConfig, RecyclingProposer
from ouroboros.strategies.rest import NO_DATASTORE, NeedsDatastore, RestConfig, RestProposer
from ouroboros.strategies.speculative import SpeculativeConfig, SpeculativeProposer
from ouroboros.strategies.suffix import SuffixConfig, SuffixProposer
from ouroboros.strategies.vanilla import VanillaConfig, VanillaProposer


@dataclass(frozen=True)
class StrategySpec:
    config: type
    proposer: Any   # a class implementing Proposer (its declared attributes are read below)
    peer: bool = False

    @property
    def needs_draft_model(self) -> bool:
        return bool(self.proposer.needs_draft_model)

    @property
    def tree_models(self) -> tuple[str, ...]:
        return tuple(self.proposer.tree_models)

    @property
    def context_only(self) -> bool:
        return bool(getattr(self.proposer, "context_only", False))


REGISTRY: dict[str, StrategySpec] = {
    "vanilla": StrategySpec(VanillaConfig, VanillaProposer),
    "speculative": StrategySpec(SpeculativeConfig, SpeculativeProposer),
    "pld": StrategySpec(PLDConfig, PLDProposer),
    "lookahead": StrategySpec(LookaheadConfig, LookaheadProposer),
    "ouroboros": StrategySpec(OuroborosConfig, OuroborosProposer),
    "rest": StrategySpec(RestConfig, RestProposer),
    "cascade": StrategySpec(CascadeConfig, CascadeProposer),
    "suffix": StrategySpec(SuffixConfig, SuffixProposer),
    "recycling": StrategySpec(RecyclingConfig, RecyclingProposer),
}


def get_spec(name: str) -> StrategySpec | PeerSpec:
    """A registered strategy, or a peer (transformers' own generate: ouroboros/running/peer_configs.py), by name."""
    if name in PEERS:
        return PEERS[name]
    if name not in REGISTRY:
        raise OuroborosError(f"unknown strategy '{name}'; known: {', '.join(sorted(REGISTRY))}; peers: "
                             f"{', '.join(PEERS)}")
    return REGISTRY[name]


def is_peer(name: str) -> bool:
    return name in PEERS


@functools.cache
def field_types(name: str) -> dict[str, Any]:
    """Field name -> its resolved annotation in the strategy's config dataclass."""
    return typing.get_type_hints(get_spec(name).config)


def default_params(name: str) -> dict[str, Any]:
    """The config dataclass's field defaults, without constructing it (some need a value, e.g. rest's datastore)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(get_spec(name).config):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def strategy_params(name: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """All fields of the strategy's config dataclass (defaults filled in): the canonical params. With no params,
    the field defaults (not validated: rest, for one, has no valid default datastore)."""
    if params is None:
        return default_params(name)
    return dataclasses.asdict(make_config(name, params))


def _type_name(hint: Any) -> str:
    """'an int', 'a list[int]', ... (the TypeError message of `check_type`)."""
    name = str(hint).replace("typing.", "") if typing.get_args(hint) else getattr(hint, "__name__", str(hint))
    return ("an " if name[0] in "aeiou" else "a ") + name


def check_type(value: Any, hint: Any) -> Any:
    """`value` as the annotation `hint` wants it (an int is a valid float), or raise TypeError.
    Golden: (3, int) -> 3; (3, float) -> 3.0; (2.5, int), (True, int), ('maybe', bool) -> TypeError."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in (a for a in args if a is not type(None)):
            try:
                return check_type(value, a)
            except TypeError:
                pass
        raise TypeError(" or ".join(_type_name(a) for a in args if a is not type(None)))
    if origin is list:
        try:
            if not isinstance(value, (list, tuple)):
                raise TypeError
            return [check_type(v, args[0]) for v in value] if args else list(value)
        except TypeError:
            raise TypeError(_type_name(hint)) from None
    if hint is Any:
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (int, float) and isinstance(value, bool) or not isinstance(value, hint):
        raise TypeError(_type_name(hint))
    return value


def make_config(name: str, params: dict[str, Any] | None = None) -> Any:
    spec = get_spec(name)
    params = dict(params or {})
    hints = field_types(name)
    unknown = sorted(set(params) - set(hints))
    if unknown:
        raise OuroborosError(f"strategy '{name}' has no option {unknown[0]!r}; options: {', '.join(sorted(hints))}")
    for key, value in params.items():
        try:
            params[key] = check_type(value, hints[key])
        except TypeError as e:
            raise OuroborosError(f"{name}.{key} must be {e}, got {value!r}") from None
    try:
        return spec.config(**params)
    except TypeError as e:
        raise OuroborosError(f"strategy '{name}': {e}") from None


def check_files(name: str, params: dict[str, Any] | None) -> None:
    """Validate `params`, then check the files they name (ChecksFiles): before any model loads."""
    cfg = make_config(name, params)
    if isinstance(cfg, ChecksFiles):
        cfg.check_files()


def needs_stand_in(name: str, params: dict[str, Any] | None) -> bool:
    """REST with neither a datastore nor an inline corpus: only the simulator has one to give it (its stand-in);
    a real backend refuses it (`NO_DATASTORE`)."""
    return name == "rest" and not (params or {}).get("datastore") and not (params or {}).get("corpus")


# params that size a draft, window or tree in tokens: none can reach the model context
LENGTH_PARAMS = ("gamma", "horizontal", "max_ngram", "min_ngram", "num_pred_tokens", "W", "N", "G", "K",
                 "max_suffix", "min_suffix", "depth", "num_nodes", "num_speculative_tokens",
                 "suffix_decoding_max_tree_depth")


def check_lengths(name: str, params: dict[str, Any], context: int) -> None:
    """OuroborosError (one line, with the valid range) when a length param is not below the model context, or when
    one step's draft can hold as many nodes as the context (the config's `draft_nodes()`: a tree of widths
    [8, 8, 8, 8] is 4,680 nodes)."""
    for k in LENGTH_PARAMS:
        v = params.get(k)
        if context and isinstance(v, int) and not isinstance(v, bool) and v >= context:
            raise OuroborosError(f"strategy.params.{k}={v} for {name} does not fit the model context of {context} "
                                 f"tokens: use a value below {context}")
    cfg = make_config(name, params)
    if context and hasattr(cfg, "draft_nodes"):
        nodes, how = cfg.draft_nodes()
        if nodes >= context:
            raise OuroborosError(f"strategy '{name}' drafts up to {nodes} nodes in one step ({how}), which does not "
                                 f"fit the model context of {context} tokens: use a draft of fewer than {context} "
                                 "nodes")


def tree_models(name: str, params: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The models ("target", "draft") that `name` with `params` gives token trees to score: its config's
    `tree_models()` where the configuration decides it (suffix with use_tree_spec=false drafts one path), else the
    proposer's. No params: the proposer's (any configuration)."""
    spec = get_spec(name)
    if params is None or isinstance(spec, PeerSpec):
        return spec.tree_models
    cfg = make_config(name, params)
    return tuple(cfg.tree_models()) if hasattr(cfg, "tree_models") else spec.tree_models


def chain_configurations() -> list[str]:
    """What drafts chains only, in words: the chain strategies, then the chain configurations of tree strategies
    (their config's `CHAINS`)."""
    chains = {n: getattr(s.config, "CHAINS", "") for n, s in REGISTRY.items() if s.tree_models}
    return [n for n, s in REGISTRY.items() if not s.tree_models] + [f"{n} with {c}" for n, c in chains.items() if c]


def check_trees(name: str, target: Backend, draft: Backend | None = None,
                params: dict[str, Any] | None = None) -> None:
    """OuroborosError (one line) when the strategy, configured by `params` (None: any configuration), may give a
    token tree to a model that scores chains only (`Backend.tree_refusal`); run once the models are loaded, before
    anything is measured."""
    trees = tree_models(name, params)
    for role, backend in (("target", target), ("draft", draft)):
        why = backend.tree_refusal() if backend is not None and role in trees else None
        if why:
            raise OuroborosError(f"strategy '{name}' scores token trees on the {role} model, which cannot take them "
                                 f"({why}); what drafts chains only: {'; '.join(chain_configurations())}")


def check_loaded(name: str, params: dict[str, Any] | None, target: Backend, draft: Backend | None = None) -> list[str]:
    """The files the strategy reads whose fit depends on the model (a suffix cache's, a phrase pool's, a REST
    datastore's vocabulary), checked against the loaded target before anything is measured: OuroborosError (one
    line), or, for a file whose *_on_error=empty, a note saying that it starts empty instead (the executor prints
    the notes once every check has passed)."""
    spec = get_spec(name)
    if isinstance(spec, PeerSpec):
        return []
    cfg = make_config(name, params)
    return list(cfg.check_loaded(target.vocab_size)) if hasattr(cfg, "check_loaded") else []


def build_proposer(name: str, params: dict[str, Any] | None, target: Backend, draft: Backend | None = None) -> Proposer:
    spec = get_spec(name)
    if isinstance(spec, PeerSpec):
        raise OuroborosError(f"{name} is a peer (transformers' generate), not a strategy of the decode loop")
    cfg = make_config(name, params)
    check_trees(name, target, draft, dict(params or {}))
    return spec.proposer(cfg, target, draft)


__all__ = ["NO_DATASTORE", "PEERS", "REGISTRY", "ChecksFiles", "DecodeState", "NeedsDatastore", "Proposer",
           "build_proposer", "carries_state", "chain_configurations", "check_files", "check_loaded", "check_lengths",
           "check_trees", "check_type", "default_params", "field_types", "get_spec", "is_peer", "make_config",
           "needs_stand_in", "strategy_params", "tree_models"]


def carries_state(name: str, params: dict[str, Any] | None) -> bool:
    """Whether `name` with `params` keeps state from one prompt to the next, so that a prompt's drafts depend on the
    prompts the same run decoded before it: ouroboros' phrase pool with history, recycling's matrix with
    keep_history, suffix's global tree (max_cached_requests > 0), speculative's hf draft-length schedule. A point of
    such a strategy cannot resume at prompt granularity (the executor measures it again whole). The rest start every
    prompt afresh: pld, cascade, vanilla, lookahead (its pool is cleared per prompt), rest (a static datastore) and
    the peers (each `generate` call on its own; hf_assisted's schedule is set on a copy for the call), except a vLLM
    peer whose engine keeps earlier outputs (vllm_suffix's global tree: its config's `carries_state`)."""
    if is_peer(name):
        cfg = make_config(name, params)
        return bool(cfg.carries_state()) if hasattr(cfg, "carries_state") else False
    p = {**default_params(name), **(params or {})}
    state = {"ouroboros": bool(p.get("history")), "recycling": bool(p.get("keep_history")),
             "suffix": bool(p.get("suffix_decoding_max_cached_requests")), "speculative": p.get("schedule") == "hf"}
    return state.get(name, False)
