"""Tiny random-init transformers models built from a config (no download): the embedded default pair and the
test models. `perturbed` makes a draft whose agreement with the target is set by the noise scale
(0.0 = identical weights = accepts everything).

Knows nothing of strategies or the loop.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

FAMILIES = ("llama", "qwen2")


def tiny_config(family: str = "llama", vocab_size: int = 96, hidden_size: int = 64, layers: int = 2,
                heads: int = 4, kv_heads: int = 2, max_positions: int = 512):
    common: dict[str, Any] = dict(vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                  num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                  max_position_embeddings=max_positions, tie_word_embeddings=False, bos_token_id=0,
                  eos_token_id=1, pad_token_id=None)
    if family == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(**common)
    if family == "qwen2":
        from transformers import Qwen2Config

        return Qwen2Config(**common, use_sliding_window=False)
    raise ValueError(f"unknown tiny family {family!r}; known: {', '.join(FAMILIES)}")


def tiny_model(family: str = "llama", seed: int = 0, dtype: torch.dtype = torch.float32,
               attn: str = "sdpa", init_std: float = 0.2, **cfg_kwargs):
    """Random-init causal LM. init_std is larger than HF's default (0.02) so logits are peaked enough to give
    repetitive, non-uniform text (and no near-ties that only fp64 could separate)."""
    from transformers import AutoModelForCausalLM

    cfg = tiny_config(family, **cfg_kwargs)
    cfg.initializer_range = init_std
    cfg._attn_implementation = attn
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    return model.to(dtype).eval()


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
