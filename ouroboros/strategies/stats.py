"""Typed proposer statistics: one small dataclass per counter family, counted by the proposers and flattened
once per prompt (`flat()`) into the record's `proposer_stats` (the JSONL keys: "lookups", "hits",
"proposed:<source>", "accepted:<source>", "harvested:<source>", "draft_forwards", "drafted_tokens",
"pool_phrases", "pool_bytes"; a family counted for a sub-mechanism gets a prefix such as "lengthen.").

Golden: PoolUse(lookups=2, hits=1, proposed=Counter({"pool:verify": 3})).flat("lengthen.")
    -> {"lengthen.lookups": 2, "lengthen.hits": 1, "lengthen.proposed:pool:verify": 3}

Knows nothing of strategies, pools or records; draft sources are data (an open set), so they stay keys.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class PoolUse:
    """Lookups of a phrase pool (or a datastore) and what they gave: tokens proposed / accepted per source."""

    lookups: int = 0
    hits: int = 0
    proposed: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)

    def flat(self, prefix: str = "") -> dict[str, float]:
        out: dict[str, float] = {f"{prefix}lookups": self.lookups, f"{prefix}hits": self.hits}
        out.update({f"{prefix}proposed:{s}": n for s, n in self.proposed.items()})
        out.update({f"{prefix}accepted:{s}": n for s, n in self.accepted.items()})
        return out


@dataclass
class Harvest:
    """Phrases added to the pool, per source (lookahead window, verify, corrected, output)."""

    added: Counter[str] = field(default_factory=Counter)

    def flat(self) -> dict[str, float]:
        return {f"harvested:{s}": n for s, n in self.added.items()}


@dataclass
class Drafting:
    """The draft model's work: its forwards and the tokens it drafted (the paper's c is their ratio)."""

    draft_forwards: int = 0
    drafted_tokens: int = 0

    def flat(self) -> dict[str, float]:
        return {"draft_forwards": self.draft_forwards, "drafted_tokens": self.drafted_tokens}


@dataclass
class Horizontal:
    """Cascade's horizontal level: prompt-lookup tokens appended after the draft model's."""

    hits: int = 0
    proposed: int = 0
    accepted: int = 0

    def flat(self) -> dict[str, float]:
        return {"horizontal_hits": self.hits, "horizontal_proposed": self.proposed,
                "horizontal_accepted": self.accepted}


def pool_size(pool) -> dict[str, float]:
    """A phrase pool's size now (phrases, bytes)."""
    return {"pool_phrases": len(pool), "pool_bytes": pool.n_bytes}


def prefixed(prefix: str, stats: dict[str, float]) -> dict[str, float]:
    """An inner proposer's flat stats under `prefix` (e.g. Ouroboros' drafter: "draft.")."""
    return {prefix + k: v for k, v in stats.items()}
