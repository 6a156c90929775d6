"""Tiny random-init transformers models built from a config (no download): the embedded default pair and the
test models. `perturbed` makes a draft whose agreement with the target is set by the noise scale
(0.0 = identical weights = accepts everything).

`tiny_config(family, ...)` builds any family of FAMILIES from transformers' own config class for it
(`AutoConfig.for_model`), shrunk to a few layers; `window` gives the families that have local attention
(sliding windows, GPT-Neo's local layers) a window shorter than a test prompt. Families whose stock forward
needs something beyond the common fields get it in `_EXTRA` (the layer pattern, repeated over the layers; the
window's field name).

Knows nothing of strategies, backends or the loop.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from ouroboros.errors import OuroborosError

# family -> fields of its tiny config beyond the common ones ({window} is replaced by the window length)
_EXTRA: dict[str, dict[str, Any]] = {
    "llama": {},
    "qwen2": {"use_sliding_window": False},
    "qwen2_sw": {"use_sliding_window": True, "sliding_window": "{window}", "max_window_layers": 1},
    "qwen3": {},
    "mistral": {"sliding_window": None},
    "mistral_sw": {"sliding_window": "{window}"},
    "gemma": {"head_dim": 16},
    "gemma2": {"head_dim": 16, "sliding_window": "{window}", "layer_types": ["sliding_attention", "full_attention"]},
    "gemma3_text": {"head_dim": 16, "sliding_window": "{window}",
                    "layer_types": ["sliding_attention", "full_attention"]},
    "starcoder2": {"sliding_window": "{window}"},
    "phi3": {"sliding_window": "{window}", "pad_token_id": None},
    "gpt2": {},
    "gpt_neox": {},
    "gpt_neo": {"attention_types": ["global", "local"], "window_size": "{window}"},
    "opt": {"ffn_dim": 64, "word_embed_proj_dim": 32},
    "falcon": {"new_decoder_architecture": False, "multi_query": True, "alibi": False},
    "falcon_alibi": {"new_decoder_architecture": False, "multi_query": True, "alibi": True},
    "bloom": {},
    "phi": {},
    "stablelm": {},
}
FAMILIES = tuple(_EXTRA)
_MODEL_TYPE = {"qwen2_sw": "qwen2", "mistral_sw": "mistral", "falcon_alibi": "falcon"}


def tiny_config(family: str = "llama", vocab_size: int = 96, hidden_size: int = 64, layers: int = 2,
                heads: int = 4, kv_heads: int = 2, max_positions: int = 512, window: int = 8):
    """A `layers`-layer config of `family` (a key of FAMILIES). Fields a family does not have are ignored by
    its config class; `window` applies to the families with local attention (`*_sw`, gemma2/3, starcoder2,
    phi3, gpt_neo)."""
    from transformers import AutoConfig

    if family not in _EXTRA:
        raise OuroborosError(f"unknown tiny family {family!r}; known: {', '.join(FAMILIES)}")
    common: dict[str, Any] = dict(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                                  num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                                  max_position_embeddings=max_positions, tie_word_embeddings=False, bos_token_id=0,
                                  eos_token_id=1, pad_token_id=None)
    extra: dict[str, Any] = {k: (window if v == "{window}" else v) for k, v in _EXTRA[family].items()}
    if "layer_types" in extra:  # the pattern repeated over the layers
        pattern: list[str] = list(extra["layer_types"])
        extra["layer_types"] = [pattern[i % len(pattern)] for i in range(layers)]
    if "attention_types" in extra:  # GPT-Neo's pattern, repeated over the layers in its own format: [[kinds], n]
        kinds: list[str] = list(extra["attention_types"])
        extra["attention_types"] = [[[kinds[i % len(kinds)]], 1] for i in range(layers)]
    cfg = AutoConfig.for_model(_MODEL_TYPE.get(family, family), **{**common, **extra})
    if hasattr(cfg, "n_positions"):  # gpt2-style names that the attribute map does not cover
        cfg.n_positions = max_positions
    if hasattr(cfg, "seq_length"):
        cfg.seq_length = max_positions
    return cfg


def tiny_model(family: str = "llama", seed: int = 0, dtype: torch.dtype = torch.float32,
               attn: str = "sdpa", init_std: float = 0.2, redraw: bool = False, **cfg_kwargs):
    """Random-init causal LM. init_std is larger than HF's default (0.02) so logits are peaked enough to give
    repetitive, non-uniform text (and no near-ties that only fp64 could separate). Some families ignore
    `initializer_range` for some weights: `redraw=True` redraws every matrix from N(0, init_std)."""
    from transformers import AutoModelForCausalLM

    cfg = tiny_config(family, **cfg_kwargs)
    cfg.initializer_range = init_std
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    except ValueError:  # a family without sdpa support (e.g. gpt_neo) takes its eager attention
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    model = model.to(dtype).eval()
    if redraw:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2:
                    p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * init_std)
    return model


def perturbed(model, noise: float, seed: int = 1):
    """A copy of `model` with N(0, noise * std(w)) added to every weight matrix: noise 0 -> an identical draft."""
    draft = copy.deepcopy(model)
    if noise > 0:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in draft.parameters():
                if p.dim() >= 2:
                    p.add_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * noise * p.std())
    return draft.eval()
