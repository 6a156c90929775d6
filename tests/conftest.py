import functools

import torch

from ouroboros.tiny import perturbed, tiny_model


@functools.cache
def get_model(family: str = "llama", seed: int = 0, dtype: torch.dtype = torch.float64, vocab_size: int = 64,
              max_positions: int = 512):
    return tiny_model(family, seed=seed, dtype=dtype, vocab_size=vocab_size, max_positions=max_positions)


@functools.cache
def get_draft(family: str = "llama", seed: int = 0, noise: float = 0.0, dtype: torch.dtype = torch.float64,
              vocab_size: int = 64, max_positions: int = 512):
    """noise 0.0 -> same weights as the target (a separate copy)."""
    return perturbed(get_model(family, seed, dtype, vocab_size, max_positions), noise, seed=seed + 1000)
