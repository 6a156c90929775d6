"""`python -m ouroboros.run [model=...] [strategy=...] [strategy.params.gamma=...]`: one strategy (+ the
vanilla baseline) over a prompt set, in one process; prints a table and appends a JSONL record.

The only module besides the other entry points that sees a DictConfig: it converts to plain dicts at once.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from ouroboros.backends.base import OuroborosError
from ouroboros.backends.hf import HFBackend
from ouroboros.datasets import load_prompts
from ouroboros.harness import StrategyRun, run_strategy
from ouroboros.metrics import RunResult, speedup
from ouroboros.models import load_pair
from ouroboros.strategies import get_spec, make_config


def format_table(results: list[RunResult], baseline: RunResult | None) -> str:
    head = f"{'strategy':<16}{'tokens':>8}{'seconds':>10}{'tok/s':>10}{'speedup':>9}{'eta':>7}{'A':>7}{'#Match':>8}"
    lines = [head, "-" * len(head)]
    for r in results:
        t = r.totals()
        sp = f"{speedup(baseline, r):.2f}x" if baseline is not None else "-"
        lines.append(f"{r.strategy:<16}{t['new_tokens']:>8}{t['elapsed_s']:>10.3f}{t['tokens_per_s']:>10.1f}{sp:>9}"
                     f"{t['block_efficiency']:>7.2f}{t['accepted_length']:>7.2f}{t['match_per_forward']:>8.2f}")
    return "\n".join(lines)


def main_plain(cfg: dict[str, Any]) -> list[RunResult]:
    import torch

    if cfg.get("threads"):
        torch.set_num_threads(int(cfg["threads"]))
    strat = cfg["strategy"]
    make_config(strat["name"], strat.get("params") or {})  # validate before any model loads
    if cfg["max_new_tokens"] <= 0:
        raise OuroborosError(f"max_new_tokens must be >= 1, got {cfg['max_new_tokens']}")
    pair = load_pair(cfg["model"], dtype=cfg["dtype"], device=cfg["device"])
    target = HFBackend(pair.target, name="target")
    draft = HFBackend(pair.draft, name="draft") if pair.draft is not None else None
    prompts = load_prompts(cfg["dataset"], pair.tokenizer, target.vocab_size, cfg["seed"])
    runs = []
    if cfg.get("baseline") and cfg["baseline"] != strat["name"]:
        runs.append(StrategyRun(cfg["baseline"]))
    runs.append(StrategyRun(strat["name"], dict(strat.get("params") or {})))
    for sr in runs:
        get_spec(sr.name)
    ids = [p.ids for p in prompts]
    budgets = [p.max_new_tokens or cfg["max_new_tokens"] for p in prompts]
    results = [run_strategy(sr, target, draft, ids, budgets, pair.eos_ids, prompt_ids=[p.id for p in prompts],
                            warmup=cfg["warmup"], progress=True) for sr in runs]
    base = results[0] if runs[0].name == "vanilla" else None
    print(format_table(results, base))
    if base is not None:
        for r in results[1:]:
            same = sum(a.output == b.output for a, b in zip(base.prompts, r.prompts, strict=True))
            print(f"{r.strategy}: {same}/{len(r.prompts)} outputs token-identical to vanilla")
    write_records(cfg, results, base)
    return results


def write_records(cfg: dict[str, Any], results: list[RunResult], base: RunResult | None) -> None:
    import torch
    import transformers

    path = cfg.get("out")
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "machine": platform.machine(), "threads": torch.get_num_threads()}
    with open(path, "a", encoding="utf-8") as f:
        for r in results:
            rec = {"time": time.time(), "config": cfg, "env": env, "backend": "hf", "totals": r.totals(),
                   "speedup": speedup(base, r) if base is not None else None,
                   "prompts": [p.summary() for p in r.prompts]}
            f.write(json.dumps(rec) + "\n")
    print(f"records appended to {path}")


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    plain = OmegaConf.to_container(cfg, resolve=True)
    try:
        main_plain(plain)  # type: ignore[arg-type]
    except OuroborosError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
