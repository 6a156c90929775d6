"""The peers' options as config dataclasses (torch-free): transformers' own `generate`, measured like a strategy
(`strategy=hf_greedy|hf_assisted|hf_pld`, `strategy.params.<option>=...`) by ouroboros/peers.py. Defaults are
transformers' global defaults. The strategy registry (ouroboros/strategies/__init__.py) validates their params
like any strategy's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError


@dataclass
class HFGreedyConfig:
    """Plain greedy `generate`."""


@dataclass
class HFAssistedConfig:
    """`generate(assistant_model=draft)`; set on a copy of the draft's generation config for the call only."""

    num_assistant_tokens: int = 20
    num_assistant_tokens_schedule: str = "constant"   # constant | heuristic | heuristic_transient
    assistant_confidence_threshold: float = 0.4

    def __post_init__(self) -> None:
        check_range("hf_assisted.num_assistant_tokens", self.num_assistant_tokens, lo=1)
        if self.num_assistant_tokens_schedule not in ("constant", "heuristic", "heuristic_transient"):
            raise OuroborosError("hf_assisted.num_assistant_tokens_schedule must be constant, heuristic or "
                                 f"heuristic_transient, got {self.num_assistant_tokens_schedule!r}")
        check_range("hf_assisted.assistant_confidence_threshold", self.assistant_confidence_threshold, lo=0, hi=1,
                    hi_open=True)


@dataclass
class HFPLDConfig:
    """`generate(prompt_lookup_num_tokens=...)`."""

    prompt_lookup_num_tokens: int = 10
    max_matching_ngram_size: int = 2

    def __post_init__(self) -> None:
        if self.prompt_lookup_num_tokens < 1 or self.max_matching_ngram_size < 1:
            raise OuroborosError("hf_pld.prompt_lookup_num_tokens and max_matching_ngram_size must be >= 1")


@dataclass(frozen=True)
class PeerSpec:
    config: type
    needs_draft_model: bool
    counterpart: str                    # our strategy doing the same job (tables show ours / peer)
    tree_models: tuple[str, ...] = ()   # generate scores its own drafts: no tree of ours
    peer: bool = True


PEERS: dict[str, PeerSpec] = {
    "hf_greedy": PeerSpec(HFGreedyConfig, False, "vanilla"),
    "hf_assisted": PeerSpec(HFAssistedConfig, True, "speculative"),
    "hf_pld": PeerSpec(HFPLDConfig, False, "pld"),
}
