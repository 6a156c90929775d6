"""vanilla: autoregressive greedy decoding as a degenerate proposer (always the empty draft)."""

from __future__ import annotations

from dataclasses import dataclass

from ouroboros.loop.draft import Draft
from ouroboros.strategies.base import DecodeState, ModelFreeProposer


@dataclass
class VanillaConfig:
    pass


class VanillaProposer(ModelFreeProposer):
    needs_draft_model = False
    context_only = True

    def __init__(self, cfg: VanillaConfig | None = None, target=None, draft=None):
        super().__init__()
        self._empty = Draft()

    def propose(self, state: DecodeState) -> Draft:
        return self._empty  # never mutated by anyone
