"""Prompt sets: each loader returns `Prompt`s (id, token ids, per-prompt max_new_tokens, category).

Kinds: `synthetic` (seeded random ids with repeated phrases; for models without a tokenizer). Knows nothing
of models beyond an optional tokenizer and the vocabulary size.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from ouroboros.backends.base import OuroborosError


@dataclass
class Prompt:
    id: str
    ids: list[int]
    max_new_tokens: int | None = None   # None -> the run's max_new_tokens
    category: str = ""
    text: str | None = None


def synthetic_prompts(n: int, length: int, vocab: int, seed: int) -> list[Prompt]:
    """Random token ids with repeated phrases (so prompt lookup and phrase pools have something to find)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        phrases = [[rng.randrange(2, vocab) for _ in range(rng.randint(2, 6))] for _ in range(4)]
        p: list[int] = []
        while len(p) < length:
            p += rng.choice(phrases) if rng.random() < 0.6 else [rng.randrange(2, vocab)]
        out.append(Prompt(id=f"synthetic-{i}", ids=p[:length], category="synthetic"))
    return out


def load_prompts(dataset: dict[str, Any], tokenizer: Any = None, vocab_size: int | None = None,
                 seed: int = 0) -> list[Prompt]:
    """Dispatch on dataset['kind']."""
    cfg = dict(dataset)
    kind = cfg.pop("kind", None)
    if kind == "synthetic":
        if vocab_size is None:
            raise OuroborosError("synthetic prompts need the model's vocabulary size")
        return synthetic_prompts(int(cfg.get("num_prompts", 8)), int(cfg.get("prompt_len", 48)), vocab_size, seed)
    raise OuroborosError(f"unknown dataset kind {kind!r}; known: synthetic")
