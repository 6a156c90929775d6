"""Model loading: turns a model spec into (target, draft) stock transformers models + an optional tokenizer.

Kinds: `tiny` (random-init pair built from a config: the embedded default, no download). Knows nothing of
strategies or the loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ouroboros.backends.base import OuroborosError

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64, "fp64": torch.float64}


def parse_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise OuroborosError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}")
    return DTYPES[name]


@dataclass
class LoadedPair:
    target: torch.nn.Module
    draft: torch.nn.Module | None
    tokenizer: object | None = None
    eos_ids: tuple[int, ...] = ()


def load_pair(model: dict, dtype: str = "float32", device: str = "cpu") -> LoadedPair:
    """Dispatch on model['kind'] (the Hydra `model` group, as a plain dict)."""
    cfg = dict(model)
    kind = cfg.pop("kind", None)
    if kind == "tiny":
        return load_tiny_pair(**cfg, dtype=dtype, device=device)
    raise OuroborosError(f"unknown model kind {kind!r}; known: tiny")


def load_tiny_pair(family: str = "llama", seed: int = 0, draft_noise: float = 0.05, vocab_size: int = 512,
                   hidden_size: int = 256, layers: int = 4, draft_layers: int = 2, dtype: str = "float32",
                   device: str = "cpu") -> LoadedPair:
    """A random-init target and a smaller draft distilled-by-construction: the draft shares the target's
    embeddings/head and first `draft_layers` layers (plus weight noise), so it agrees often but not always."""
    from ouroboros.tiny import perturbed, tiny_model

    dt = parse_dtype(dtype)
    target = tiny_model(family, seed=seed, dtype=dt, vocab_size=vocab_size, hidden_size=hidden_size, layers=layers,
                        heads=max(1, hidden_size // 64), kv_heads=max(1, hidden_size // 128))
    draft = perturbed(target, draft_noise, seed=seed + 1)
    if draft_layers < layers:
        draft.model.layers = draft.model.layers[:draft_layers]
        draft.config.num_hidden_layers = draft_layers
        if getattr(draft.config, "layer_types", None):
            draft.config.layer_types = draft.config.layer_types[:draft_layers]
    return LoadedPair(target.to(device), draft.to(device), None, ())
