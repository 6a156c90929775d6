"""The proposer protocol: what a strategy is. Two working methods (propose, observe) plus lifecycle.

- `begin(prompt)`: a new prompt starts (prefill the proposer's own model, index the prompt, ...).
- `propose(state) -> Draft`: the token tree for this step; may be empty (vanilla). Its depth should not
  exceed `state.max_depth()` (tokens past the budget can never be emitted).
- `observe(verdict, scores, state)`: what the target decided (accepted path, bonus, predictions at every
  node); sync the proposer's model, harvest phrases, ...
- `stats()`: cumulative strategy-specific counters for this prompt (pool lookups, hits, ...).
- `counters`: forwards / tokens of the proposer's own model(s), read by the loop per step.

A proposer knows nothing of the loop's bookkeeping, sinks or configs other than its own dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ouroboros.backends.base import Counters, Scores
from ouroboros.draft import Draft
from ouroboros.verify import Verdict


@dataclass
class DecodeState:
    tokens: list[int]    # committed sequence, prompt + generated (the target backend's list: read only)
    prompt_len: int
    remaining: int       # tokens still allowed by max_new_tokens (and the context)
    room: int            # free positions left in the target's context
    # The run's sampling verifier (None when greedy). Proposers that draw random drafts take their draws from
    # its stream (`sampler.generator(device)`), so draft and verification randomness come from one seeded run.
    sampler: Any = None
    # False in an inner drafting loop that keeps no step records: verification may skip #Match (n_match = -1).
    record: bool = True

    def max_depth(self) -> int:
        """Deepest useful draft: the bonus token needs one more slot, the context must hold the tree."""
        return max(0, min(self.remaining - 1, self.room - 1))


class Proposer(Protocol):
    counters: Counters
    needs_draft_model: bool          # the registry hands it the draft backend
    tree_models: tuple[str, ...]     # which backends ("target", "draft") it may give a token tree to score

    def begin(self, prompt: list[int]) -> None: ...
    def propose(self, state: DecodeState) -> Draft: ...
    def observe(self, verdict: Verdict, scores: Scores, state: DecodeState) -> None: ...
    def stats(self) -> dict[str, float]: ...


@runtime_checkable
class ChecksFiles(Protocol):
    """A strategy config that names files: `check_files` proves, before any model loads, that the files it reads
    exist and parse and that the files it writes can be written (OuroborosError, one line, otherwise)."""

    def check_files(self) -> None: ...


class ModelFreeProposer:
    """Shared no-op lifecycle for proposers without a model of their own."""

    tree_models: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.counters = Counters()

    def begin(self, prompt: list[int]) -> None:
        pass

    def observe(self, verdict: Verdict, scores: Scores, state: DecodeState) -> None:
        pass

    def stats(self) -> dict[str, float]:
        return {}
