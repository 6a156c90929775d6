"""The peers' options as config dataclasses (torch-free): transformers' own `generate` (`strategy=hf_greedy|
hf_assisted|hf_pld`; defaults: transformers' global defaults) and vLLM (`strategy=vllm_greedy|vllm_ngram|vllm_draft|
vllm_suffix`; option names: vLLM's `LLM(...)` and `speculative_config` keys), measured like a strategy
(`strategy.params.<option>=...`) by ouroboros/running/peers.py. The strategy registry (ouroboros/strategies/__init__.py)
validates their params like any strategy's; a vLLM config also checks, before anything loads, that vLLM's venv is
there (`check_files`: one error line naming the command that makes it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from ouroboros.vllm.env import check_venv


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


@dataclass
class VLLMConfig:
    """What every vLLM peer builds its engine with: `vllm.LLM(...)` arguments under vLLM's names (ouroboros/vllm/).
    Greedy decoding alone: `vllm_greedy`. Two settings differ from vLLM's defaults, for matched settings with our
    loop: `enforce_eager` (vLLM: false; no torch.compile / CUDA graphs, as ours) and `enable_prefix_caching` (vLLM:
    true; off, because each peer's warm-up decodes the first prompt, and our loop reuses no KV across prompts)."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str | None = None   # null: vLLM's choice | mp | ray | uni | external_launcher
    enforce_eager: bool = True
    enable_prefix_caching: bool = False
    max_model_len: int | None = None                  # null: the model's context
    kv_cache_memory_bytes: int | None = None          # null: room for one request of max_model_len (one at a time)
    cpu_omp_threads_bind: str | None = None           # VLLM_CPU_OMP_THREADS_BIND; null: the CPUs our backend uses
    venv: str | None = None                           # null: .venv-vllm beside the package

    def __post_init__(self) -> None:
        for k in ("tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "kv_cache_memory_bytes"):
            if getattr(self, k) is not None:
                check_range(f"{self.peer_name()}.{k}", getattr(self, k), lo=1)
        backends = ("mp", "ray", "uni", "external_launcher")
        if self.distributed_executor_backend not in (None, *backends):
            raise OuroborosError(f"{self.peer_name()}.distributed_executor_backend must be null or one of "
                                 f"{', '.join(backends)}, got {self.distributed_executor_backend!r}")

    def peer_name(self) -> str:
        return "vllm_greedy"

    def check_files(self) -> None:
        """Before anything loads: vLLM's venv is there (and arctic-inference in it, for suffix)."""
        check_venv(self.venv, suffix=self.speculative_method() == "suffix")

    def speculative_method(self) -> str | None:
        return None

    def carries_state(self) -> bool:
        """Whether the engine keeps what one prompt taught it for the next (suffix's global tree)."""
        return False

    def speculative_config(self, draft_dir: str | None = None) -> dict[str, Any] | None:
        """vLLM's `speculative_config` (None: no speculation); `draft_dir`: the draft model's folder."""
        return None


@dataclass
class VLLMNgramConfig(VLLMConfig):
    """vLLM's prompt lookup: `speculative_config={"method": "ngram", ...}` (defaults: our pld's 10 tokens and
    n-grams 1-3; vLLM has none for num_speculative_tokens and prompt_lookup_max)."""

    num_speculative_tokens: int = 10
    prompt_lookup_min: int = 1
    prompt_lookup_max: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("vllm_ngram.num_speculative_tokens", self.num_speculative_tokens, lo=1)
        check_range("vllm_ngram.prompt_lookup_min", self.prompt_lookup_min, lo=1)
        check_range("vllm_ngram.prompt_lookup_max", self.prompt_lookup_max, lo=self.prompt_lookup_min,
                    lo_name="prompt_lookup_min")

    def peer_name(self) -> str:
        return "vllm_ngram"

    def speculative_method(self) -> str | None:
        return "ngram"

    def speculative_config(self, draft_dir: str | None = None) -> dict[str, Any] | None:
        return {"method": "ngram", "num_speculative_tokens": self.num_speculative_tokens,
                "prompt_lookup_min": self.prompt_lookup_min, "prompt_lookup_max": self.prompt_lookup_max}


@dataclass
class VLLMDraftConfig(VLLMConfig):
    """vLLM's speculative decoding with the pair's draft model: `speculative_config={"model": <draft folder>,
    "num_speculative_tokens": gamma}` (default: our speculative's gamma=4; vLLM has none)."""

    num_speculative_tokens: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("vllm_draft.num_speculative_tokens", self.num_speculative_tokens, lo=1)

    def peer_name(self) -> str:
        return "vllm_draft"

    def speculative_method(self) -> str | None:
        return "draft_model"

    def speculative_config(self, draft_dir: str | None = None) -> dict[str, Any] | None:
        return {"model": draft_dir, "num_speculative_tokens": self.num_speculative_tokens}


@dataclass
class VLLMSuffixConfig(VLLMConfig):
    """vLLM's SuffixDecoding: `speculative_config={"method": "suffix", ...}` (ArcticInference's cache; defaults:
    vLLM's). Its global tree of earlier outputs lives as long as the engine: state across prompts."""

    num_speculative_tokens: int | None = None   # null: suffix_decoding_max_tree_depth (vLLM's default)
    suffix_decoding_max_tree_depth: int = 24
    suffix_decoding_max_cached_requests: int = 10000
    suffix_decoding_max_spec_factor: float = 1.0
    suffix_decoding_min_token_prob: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_speculative_tokens is not None:
            check_range("vllm_suffix.num_speculative_tokens", self.num_speculative_tokens, lo=1)
        check_range("vllm_suffix.suffix_decoding_max_tree_depth", self.suffix_decoding_max_tree_depth, lo=1)
        check_range("vllm_suffix.suffix_decoding_max_cached_requests", self.suffix_decoding_max_cached_requests, lo=0)
        check_range("vllm_suffix.suffix_decoding_max_spec_factor", self.suffix_decoding_max_spec_factor, lo=0)
        check_range("vllm_suffix.suffix_decoding_min_token_prob", self.suffix_decoding_min_token_prob, lo=0, hi=1)

    def peer_name(self) -> str:
        return "vllm_suffix"

    def speculative_method(self) -> str | None:
        return "suffix"

    def carries_state(self) -> bool:
        return self.suffix_decoding_max_cached_requests > 0

    def speculative_config(self, draft_dir: str | None = None) -> dict[str, Any] | None:
        out: dict[str, Any] = {"method": "suffix", **{k: getattr(self, k) for k in (
            "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
            "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob")}}
        if self.num_speculative_tokens is not None:
            out["num_speculative_tokens"] = self.num_speculative_tokens
        return out


@dataclass(frozen=True)
class PeerSpec:
    config: type
    needs_draft_model: bool
    counterpart: str                    # our strategy doing the same job (tables show ours / peer)
    tree_models: tuple[str, ...] = ()   # the peer scores its own drafts: no tree of ours
    peer: bool = True
    engine: str = "generate"            # "generate": transformers' in this process; "vllm": vLLM's, in its worker


PEERS: dict[str, PeerSpec] = {
    "hf_greedy": PeerSpec(HFGreedyConfig, False, "vanilla"),
    "hf_assisted": PeerSpec(HFAssistedConfig, True, "speculative"),
    "hf_pld": PeerSpec(HFPLDConfig, False, "pld"),
    "vllm_greedy": PeerSpec(VLLMConfig, False, "vanilla", engine="vllm"),
    "vllm_ngram": PeerSpec(VLLMNgramConfig, False, "pld", engine="vllm"),
    "vllm_draft": PeerSpec(VLLMDraftConfig, True, "speculative", engine="vllm"),
    "vllm_suffix": PeerSpec(VLLMSuffixConfig, False, "suffix", engine="vllm"),
}
