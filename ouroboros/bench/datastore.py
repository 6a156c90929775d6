"""REST retrieval benchmark: one lookup = `Datastore.continuations` + `continuation_tree` (what REST's proposer
does per draft), timed on contexts cut from the datastore's own corpus (each the `--ctx` tokens before a random
position, so the longest-suffix match, the occurrence count and the trie are a corpus's real ones). With
`--against FILE` (another version of ouroboros/strategies/datastore.py, e.g. `git show
<rev>:ouroboros/strategies/datastore.py >
/tmp/old.py`) both versions run the same lookups in the same process, alternating in rounds, and the trees are
compared.

    python -m ouroboros.bench.datastore --datastore ~/.cache/ouroboros/rest/stdlib_qwen.npz --against /tmp/old.py

Not a test: timings are reported, never asserted.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from typing import Any

import numpy as np

from ouroboros.argparser import ArgumentParser
from ouroboros.errors import OuroborosError, cli
from ouroboros.strategies import datastore as current
from ouroboros.strategies.rest import RestConfig


def load_version(path: str) -> Any:
    """A datastore module from a file (another version of ouroboros/strategies/datastore.py)."""
    if not os.path.isfile(path):
        raise OuroborosError(f"--against {path}: no such file")
    spec = importlib.util.spec_from_file_location("datastore_against", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in ("Datastore", "continuation_tree"):
        if not hasattr(mod, name):
            raise OuroborosError(f"--against {path} has no {name}: not a version of ouroboros/strategies/datastore.py")
    return mod


def contexts(tokens: np.ndarray, n: int, ctx: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    ends = rng.integers(ctx, len(tokens), size=n)
    return [tokens[e - ctx:e].tolist() for e in ends]


def lookups(mod: Any, ds: Any, ctxs: list[list[int]], cfg: RestConfig) -> tuple[float, list[Any]]:
    t0 = time.perf_counter()
    trees = [mod.continuation_tree(ds.continuations(c, cfg.max_suffix, cfg.min_suffix, cfg.depth,
                                                    cfg.max_occurrences), cfg.num_nodes) for c in ctxs]
    return time.perf_counter() - t0, trees


@cli
def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m ouroboros.bench.datastore", description=__doc__.split("\n\n")[0])
    ap.add_argument("--datastore", required=True, help="a .npz from python -m ouroboros.rest_datastore")
    ap.add_argument("--against", default=None, help="another version of ouroboros/strategies/datastore.py to compare "
                    "with")
    ap.add_argument("--lookups", type=int, default=900)
    ap.add_argument("--ctx", type=int, default=16, help="context tokens per lookup")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timing rounds (the best is reported)")
    ap.add_argument("--depth", type=int, default=RestConfig.depth)
    ap.add_argument("--num-nodes", type=int, default=RestConfig.num_nodes)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    if a.lookups < 1 or a.ctx < 1 or a.rounds < 1:
        raise OuroborosError("--lookups, --ctx and --rounds must be >= 1")
    cfg = RestConfig(datastore=a.datastore, depth=a.depth, num_nodes=a.num_nodes, max_suffix=a.ctx)
    versions = {"current": (current, current.Datastore.load(a.datastore))}
    if a.against:
        old = load_version(a.against)
        versions["against"] = (old, old.Datastore.load(a.datastore))
    tokens = versions["current"][1].tokens
    if len(tokens) <= a.ctx:
        raise OuroborosError(f"{a.datastore} holds {len(tokens)} tokens, too few for --ctx {a.ctx}")
    ctxs = contexts(tokens, a.lookups, a.ctx, a.seed)
    best = dict.fromkeys(versions, float("inf"))
    trees: dict[str, list[Any]] = {}
    for _ in range(a.rounds):
        for name, (mod, ds) in versions.items():
            dt, trees[name] = lookups(mod, ds, ctxs, cfg)
            best[name] = min(best[name], dt)
    print(f"{a.lookups} lookups on {a.datastore} ({len(tokens):,} tokens), depth {a.depth}, "
          f"num_nodes {a.num_nodes}, best of {a.rounds}:")
    for name, dt in best.items():
        print(f"  {name}: {dt * 1e3 / a.lookups:.3f} ms per lookup")
    if a.against:
        same = sum(x == y for x, y in zip(trees["current"], trees["against"], strict=True))
        print(f"  against / current time: {best['against'] / best['current']:.2f}x; identical trees: "
              f"{same}/{a.lookups}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
