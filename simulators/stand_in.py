"""REST's stand-in datastore: a simulated `strategy=rest` run given no `strategy.params.datastore` retrieves from
one the simulator builds itself, in the surrogate's token ids, from standard-library text the surrogate target does
not write (simulators/corpus.py `STAND_INS`: a real datastore is not the target's own text either). It is built once
per process and saved to a temporary .npz that the REST proposer loads as any datastore. With `sim.recall` on and no
`sim.recall_text`, the target of a pair built for such a run knows its text (`make_pair(..., rest_stand_in=True)`),
as `check decisions` gives a REST run's target its own datastore. A real backend has no stand-in.

Reached from ouroboros through the sim backend kind only (simulators/plugin.py). Knows nothing of the loop.
"""

from __future__ import annotations

import functools
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from ouroboros.strategies.datastore import Datastore
from simulators.corpus import load_corpus, stand_in_docs
from simulators.simconfig import SimConfig
from simulators.tokens import real_tokenizer_dir


@dataclass(frozen=True)
class StandIn:
    path: str            # the .npz (a temporary file of this process)
    text: str            # what it holds, in words
    tokens: int          # its size in the surrogate's ids
    corpus: str          # the surrogate corpus it stands beside (sim.corpus)
    datastore: Datastore = field(repr=False, compare=False)

    def note(self, sim: dict[str, Any] | SimConfig | None) -> str:
        """The run's `note:` line."""
        opts = options(sim)
        knows = f"; the target knows its text (sim.recall={opts.recall:g})" if target_knows(opts) else ""
        return (f"decisions: rest has no strategy.params.datastore, so it retrieves from the simulator's stand-in: "
                f"{self.text}, {self.tokens:,} tokens in the surrogate's ids, text the target (sim.corpus="
                f"{self.corpus}) does not write{knows}; a real run needs strategy.params.datastore=PATH (python -m "
                "ouroboros.rest_datastore)")

    def record(self, sim: dict[str, Any] | SimConfig | None) -> dict[str, Any]:
        """The record's `decisions.rest_datastore`."""
        return {"stand_in": self.text, "tokens": self.tokens, "beside_corpus": self.corpus,
                "target_knows_it": target_knows(options(sim)),
                "real_run": "needs strategy.params.datastore=PATH (python -m ouroboros.rest_datastore)"}


def target_knows(opts: SimConfig) -> bool:
    """Whether the target of a pair built for a run on the stand-in knows its text: sim.recall on and no
    sim.recall_text (the rule `check decisions` applies to a REST run's own datastore)."""
    return bool(opts.recall) and not opts.recall_text


def options(sim: dict[str, Any] | SimConfig | None) -> SimConfig:
    return sim if isinstance(sim, SimConfig) else SimConfig.from_dict(sim)


def rest_stand_in(sim: dict[str, Any] | SimConfig | None, model: dict[str, Any]) -> StandIn:
    """The stand-in for a run with these sim options (its surrogate corpus and tokenizer) on `model` (whose real
    tokenizer `sim.pieces=real` reads)."""
    opts = options(sim)
    real_dir = str(real_tokenizer_dir(opts.tokenizer, model)) if opts.pieces == "real" else None
    return build(opts.corpus, opts.vocab, opts.pieces, real_dir)


@functools.cache
def build(corpus: str, vocab: int, pieces: str, tokenizer_dir: str | None) -> StandIn:
    tok = load_corpus(corpus, vocab, pieces, tokenizer_dir).tokenizer
    text, docs = stand_in_docs(corpus)
    ids = [tok.encode(d) for d in docs]
    ds = Datastore.build(ids)
    fd, path = tempfile.mkstemp(prefix=f"rest-{corpus}-{pieces}-", suffix=".npz", dir=_folder().name)
    os.close(fd)
    ds.save(path)
    return StandIn(path, text, sum(map(len, ids)), corpus, ds)


@functools.cache
def _folder() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="ouroboros-stand-in-")   # removed when the process ends
