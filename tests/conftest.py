import functools

import pytest
import torch
from hypothesis import settings

from ouroboros.backends.tiny import perturbed, tiny_model

# Tiny models gain nothing from intra-op threads, and on a shared 2-core machine OpenMP threads waiting for a
# descheduled sibling turn microsecond ops into milliseconds (measured: 39 s -> 0.7 s for 50 sampled decodes).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _one_thread():
    """Every test starts on one thread: an entry point run in-process may set torch's threads for its machine
    (`calibrate clock --threads 2`, `backend.threads`), and every later test on that worker then paid the waits
    above (measured: the lossless property tests 10x slower in the suite than alone)."""
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    yield


# A property test checks what is computed, not how fast: hypothesis' 200 ms per-example deadline fails on a loaded
# machine (seen: 273 ms for one tree-mask example under a real-model run), so examples are not timed.
settings.register_profile("untimed", deadline=None)
settings.load_profile("untimed")


@functools.cache
def get_model(family: str = "llama", seed: int = 0, dtype: torch.dtype = torch.float64, vocab_size: int = 64,
              max_positions: int = 512, init_std: float = 0.2):
    return tiny_model(family, seed=seed, dtype=dtype, vocab_size=vocab_size, max_positions=max_positions,
                      init_std=init_std)


@functools.cache
def get_draft(family: str = "llama", seed: int = 0, noise: float = 0.0, dtype: torch.dtype = torch.float64,
              vocab_size: int = 64, max_positions: int = 512, init_std: float = 0.2):
    """noise 0.0 -> same weights as the target (a separate copy)."""
    return perturbed(get_model(family, seed, dtype, vocab_size, max_positions, init_std), noise, seed=seed + 1000)
