"""`python -m simulators bench {speed,grid}`: how fast the simulator itself runs (wall clock of this machine).

speed: simulated new tokens per CPU second of this process (one core), per strategy, surrogate LMs, Yi-34B/6B
  profile on a800x2 (the cost model is a few multiplications per forward; the loop and proposers dominate).
grid: the paper's 27-point sensitivity grid (gamma in {3,4,5} x W in {14,15,16} x beta in {5,6,7}; beta is
  taken as the n-gram level N) x `--prompts` prompts x `--tokens` new tokens, ouroboros, over `--workers`
  processes; prints the wall time and the modelled token/s range of the grid.

Knows nothing of real models.
"""

from __future__ import annotations

import itertools
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from ouroboros.loop.decode import decode
from ouroboros.strategies import build_proposer, get_spec
from simulators.architectures import load_conf
from simulators.pair import make_pair

STRATEGIES: dict[str, dict[str, Any]] = {
    "vanilla": {},
    "speculative": {"gamma": 4},
    "pld": {},
    "lookahead": {"W": 15, "N": 6, "G": 15},
    "ouroboros": {"gamma": 4, "W": 15, "N": 6, "G": 15, "K": 3},
    "rest": {"corpus": list(range(2, 200)) * 4},
    "cascade": {"gamma": 4},
}


def simulate(strategy: str, params: dict[str, Any], n_prompts: int, max_new: int, seed: int = 0,
             corpus: str = "code") -> dict[str, float]:
    pair = make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "a800x2"), {"corpus": corpus}, seed=seed)
    prompts = pair.default_prompts(n_prompts, seed)
    prop = build_proposer(strategy, params, pair.target, pair.draft if get_spec(strategy).needs_draft_model else None)
    new, modelled = 0, 0.0
    t0, c0 = time.perf_counter(), time.process_time()
    for p in prompts:
        r = decode(pair.target, prop, p.ids, max_new, pair.eos_ids)
        new += r.new_tokens
        modelled += r.elapsed_s
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"new_tokens": new, "wall_s": wall, "cpu_s": cpu, "sim_tokens_per_cpu_s": new / cpu,
            "modelled_tps": new / modelled}


def speed(n_prompts: int, max_new: int, only: list[str] | None) -> None:
    print(f"{'strategy':<13}{'tokens':>8}{'wall s':>9}{'cpu s':>9}{'sim tok / cpu s':>17}{'modelled tok/s':>16}")
    simulate("vanilla", {}, 1, 8)  # build the surrogate tables once, outside the timings
    for name, params in STRATEGIES.items():
        if only and name not in only:
            continue
        r = simulate(name, params, n_prompts, max_new)
        print(f"{name:<13}{r['new_tokens']:>8}{r['wall_s']:>9.2f}{r['cpu_s']:>9.2f}{r['sim_tokens_per_cpu_s']:>17,.0f}"
              f"{r['modelled_tps']:>16.2f}")


def _grid_point(args: tuple[int, int, int, int, int]) -> tuple[tuple[int, int, int], dict[str, float]]:
    gamma, W, beta, n_prompts, max_new = args
    params = {"gamma": gamma, "W": W, "G": W, "N": beta, "K": 3}
    return (gamma, W, beta), simulate("ouroboros", params, n_prompts, max_new, corpus="prose")


def grid(n_prompts: int, max_new: int, workers: int) -> None:
    points = [(g, w, b, n_prompts, max_new) for g, w, b in itertools.product((3, 4, 5), (14, 15, 16), (5, 6, 7))]
    points.sort(key=lambda p: -p[1] * p[2])  # largest windows first: less idle time at the end
    t0 = time.perf_counter()
    simulate("vanilla", {}, 1, 8, corpus="prose")  # build the surrogate tables once; forked workers inherit them
    with ProcessPoolExecutor(workers) as ex:
        results = list(ex.map(_grid_point, points))
    wall = time.perf_counter() - t0
    tps = [r["modelled_tps"] for _, r in results]
    best = max(results, key=lambda kv: kv[1]["modelled_tps"])
    worst = min(results, key=lambda kv: kv[1]["modelled_tps"])
    total = sum(r["new_tokens"] for _, r in results)
    cpu = sum(r["cpu_s"] for _, r in results)
    print(f"27-point grid x {n_prompts} prompts x {max_new} tokens ({total} simulated tokens) on {workers} "
          f"processes: {wall:.1f} s wall, {cpu:.1f} CPU s in the workers ({total / cpu:,.0f} tokens per CPU s)")
    print(f"modelled token/s: best {best[1]['modelled_tps']:.2f} at (gamma, W, beta) = {best[0]}, worst "
          f"{worst[1]['modelled_tps']:.2f} at {worst[0]}, std {statistics.pstdev(tps):.2f}")


def add_args(ap) -> None:
    ap.add_argument("what", choices=["speed", "grid"])
    ap.add_argument("--prompts", type=int, default=None)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", default=None, help="comma-separated strategies (speed)")


def main(a) -> int:
    if a.what == "speed":
        speed(a.prompts or 20, a.tokens, a.only.split(",") if a.only else None)
    else:
        grid(a.prompts or 100, a.tokens, a.workers)
    return 0
