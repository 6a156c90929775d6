"""pld: prompt-lookup decoding (Saxena 2023). The draft is the continuation of an earlier occurrence of the
last n tokens in the prompt + generated text, n from max_ngram down to min_ngram.

Pure kernel `lookup_continuation` (worked example, golden):
    tokens [1, 2, 3, 9, 1, 2], max_ngram=2, num_pred=2  ->  [3, 9]   (bigram [1, 2] first seen at 0)
    prefer="first" takes the earliest occurrence (as transformers' prompt_lookup_num_tokens does),
    prefer="last" the most recent one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from ouroboros.loop.draft import Draft
from ouroboros.strategies.base import DecodeState, ModelFreeProposer


@dataclass
class PLDConfig:
    max_ngram: int = 3           # longest suffix n-gram to look up (HF's max_matching_ngram_size default: 2)
    min_ngram: int = 1
    num_pred_tokens: int = 10    # draft length (HF's prompt_lookup_num_tokens)
    prefer: str = "first"        # "first" (HF) or "last" occurrence

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise OuroborosError(f"pld needs 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")
        check_range("pld.num_pred_tokens", self.num_pred_tokens, lo=1)
        if self.prefer not in ("first", "last"):
            raise OuroborosError(f"pld.prefer must be 'first' or 'last', got {self.prefer!r}")


def lookup_continuation(tokens: np.ndarray, max_ngram: int, min_ngram: int, num_pred: int,
                        prefer: str = "first") -> list[int]:
    """Continuation (<= num_pred tokens) after an earlier occurrence of the longest matching suffix n-gram."""
    n_tok = len(tokens)
    for n in range(min(max_ngram, n_tok - 1), min_ngram - 1, -1):
        suffix = tokens[n_tok - n:]
        # windows starting at 0..n_tok-n-1 (the suffix itself, at n_tok-n, has no continuation)
        hits = tokens[: n_tok - n] == suffix[0]
        for j in range(1, n):
            hits &= tokens[j: n_tok - n + j] == suffix[j]
        idx = np.flatnonzero(hits)
        if idx.size:
            start = int(idx[0] if prefer == "first" else idx[-1]) + n
            return tokens[start: start + num_pred].tolist()
    return []


class PLDProposer(ModelFreeProposer):
    needs_draft_model = False
    context_only = True

    def __init__(self, cfg: PLDConfig, target=None, draft=None):
        super().__init__()
        self.cfg = cfg
        self._lookups = 0
        self._hits = 0

    def begin(self, prompt: list[int]) -> None:
        self._lookups = self._hits = 0

    def propose(self, state: DecodeState) -> Draft:
        k = min(self.cfg.num_pred_tokens, state.max_depth())
        if k <= 0:
            return Draft()
        c = self.cfg
        cont = lookup_continuation(np.asarray(state.tokens, dtype=np.int64), c.max_ngram, c.min_ngram, k, c.prefer)
        self._lookups += 1
        self._hits += bool(cont)
        return Draft.chain(cont, source="prompt")

    def stats(self) -> dict[str, float]:
        return {"lookups": self._lookups, "hits": self._hits}
