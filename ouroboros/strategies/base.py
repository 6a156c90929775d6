"""What a strategy is: the `Proposer` protocol (defined in ouroboros/loop/contracts.py, re-exported here). Two working
methods (propose, observe) plus lifecycle:

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

from typing import Protocol, runtime_checkable

from ouroboros.loop.contracts import Counters, DecodeState, Proposer, Scores
from ouroboros.loop.verify import Verdict

__all__ = ["ChecksFiles", "DecodeState", "ModelFreeProposer", "Proposer"]


@runtime_checkable
class ChecksFiles(Protocol):
    """A strategy config that names files: `check_files` proves, before any model loads, that the files it reads
    exist and parse and that the files it writes can be written (OuroborosError, one line, otherwise)."""

    def check_files(self) -> None: ...


class ModelFreeProposer:
    """Shared no-op lifecycle for proposers without a model of their own."""

    tree_models: tuple[str, ...] = ()
    reads_logits = False
    context_only = False  # True: its drafts depend on the prompt and the accepted tokens only (no model's other
    #                       predictions), so a trace of a run's outputs replays it exactly (simulators.replay)

    def __init__(self) -> None:
        self.counters = Counters()

    def begin(self, prompt: list[int]) -> None:
        pass

    def observe(self, verdict: Verdict, scores: Scores, state: DecodeState) -> None:
        pass

    def stats(self) -> dict[str, float]:
        return {}

    def checkpoint(self) -> None:
        pass
