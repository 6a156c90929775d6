"""Typed proposer statistics flatten to the record's keys (golden)."""

from collections import Counter

from ouroboros.strategies.stats import Drafting, Harvest, Horizontal, PoolUse, prefixed


def test_pool_use_flat_golden():
    use = PoolUse(lookups=2, hits=1, proposed=Counter({"pool:verify": 3}), accepted=Counter({"pool:verify": 1}))
    assert use.flat("lengthen.") == {"lengthen.lookups": 2, "lengthen.hits": 1, "lengthen.proposed:pool:verify": 3,
                                     "lengthen.accepted:pool:verify": 1}
    assert PoolUse().flat() == {"lookups": 0, "hits": 0}


def test_other_families_golden():
    assert Harvest(Counter(verify=2, corrected=0)).flat() == {"harvested:verify": 2, "harvested:corrected": 0}
    assert Drafting(4, 9).flat() == {"draft_forwards": 4, "drafted_tokens": 9}
    assert Horizontal(1, 3, 2).flat() == {"horizontal_hits": 1, "horizontal_proposed": 3, "horizontal_accepted": 2}
    assert prefixed("draft.", {"hits": 1}) == {"draft.hits": 1}
