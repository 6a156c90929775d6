"""Step-by-step comparison of two proposers: the drafts they propose and the loop's records (timings aside)."""

import dataclasses

from ouroboros.backends.hf import HFBackend
from ouroboros.loop.decode import decode
from ouroboros.strategies import build_proposer

TIMING = {"draft_s", "verify_s", "other_s"}


def record_drafts(proposer):
    """Wrap proposer.propose so every draft's (tokens, parents, sources) is kept in proposer.drafts_seen."""
    proposer.drafts_seen = []
    inner = proposer.propose

    def propose(state):
        d = inner(state)
        proposer.drafts_seen.append((list(d.tokens), list(d.parents), list(d.sources)))
        return d

    proposer.propose = propose
    return proposer


def run_traced(name, params, target_model, draft_model, prompts, max_new):
    """Decode `prompts` in sequence with one proposer; returns [(output, records without timings)], drafts."""
    target, draft = HFBackend(target_model), HFBackend(draft_model)
    prop = record_drafts(build_proposer(name, params, target, draft))
    outs = []
    for p in prompts:
        res = decode(target, prop, p, max_new)
        recs = [{k: v for k, v in dataclasses.asdict(r).items() if k not in TIMING} for r in res.steps]
        outs.append((res.output, recs))
    return outs, prop.drafts_seen
