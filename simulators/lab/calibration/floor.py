"""`python -m simulators calibrate floor`: how far a few real prompts' eta, token/s and speedup stray from their
task's, stored so that a simulated number on N prompts never shows a band narrower than that.

A per-task source (a profile, the prior) predicts one block efficiency and speedup for a task; a run of a few
prompts of it measures those prompts. How far their real figures are from the task's is a floor under the error of
any such prediction on them (`check spread` reports it). The held-out bands (`calibrate bands`) were measured on
groups of 2-10 prompts, so they hold this floor at those sizes, not below them: a run of 1-2 prompts can miss by
more. From real sweeps' records of one task (several files pool their prompts; a speedup pairs each prompt with
vanilla's run in the same file), per strategy and k in `--prompts` (2k <= the prompts recorded): the 80% quantile
of |x(k random prompts) / x(all) - 1| for x = eta, token/s and speedup, the largest over the strategy's points
(parameter settings). Written to conf/calibration/prompt_floor.yaml under the task; other tasks are kept.

    python -m simulators calibrate floor --records he10.jsonl --records he_fit.jsonl --dataset humaneval

`simulators.trust.record_decisions` widens a simulated record's band of each metric to the floor at the largest
measured k <= the run's prompts where that is wider (`prompt_floor` in the band says so); a band never narrows and
an unmeasured one (`?`) stays unmeasured. Reads records only (no tokenizer, no weights).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import yaml

from ouroboros.errors import OuroborosError
from ouroboros.paths import check_writable
from simulators.checks.spread import (
    LEVEL,
    Prompt,
    parse_sizes,
    prompt_rows,
    record_args,
    speedup_spread,
    spread,
    tps_spread,
)
from simulators.profiles import conf_root

FLOOR_PATH = conf_root() / "calibration" / "prompt_floor.yaml"
METRICS = ("block_efficiency", "tokens_per_s", "speedup")


def add_args(ap) -> None:
    record_args(ap, "1,2,4,8,16")
    ap.add_argument("--dataset", required=True, help="the dataset kind whose points to read; its task names the "
                    "entry (humaneval, mtbench, ...)")
    ap.add_argument("--out", default=None, help="where the floors go (default conf/calibration/prompt_floor.yaml)")


def measure(paths: list[str], model: str, dataset: str, sizes: list[int], draws: int, seed: int
            ) -> dict[str, dict[str, Any]]:
    """strategy -> {prompts: the most any of its points recorded, block_efficiency / tokens_per_s / speedup:
    {k: floor}} (vanilla left out: its eta and speedup are 1 by definition)."""
    rows, strategies = prompt_rows(paths, model, dataset)
    vanilla: dict[tuple[str, int], Prompt] = {}   # each file's own vanilla runs (pooling keeps one per prompt)
    for i, path in enumerate(paths):
        own, kinds = prompt_rows([path], model, dataset)
        vanilla.update(((pid, i), p._replace(file=i)) for key, ps in own.items() if kinds[key] == "vanilla"
                       for pid, p in ps.items())
    rng = random.Random(seed)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(rows):
        name = strategies[key]
        if name == "vanilla":
            continue
        ps = rows[key]
        mine = {i: p for i, p in ps.items() if (i, p.file) in vanilla}
        got = out.setdefault(name, {"prompts": 0, **{m: {} for m in METRICS}})
        got["prompts"] = max(got["prompts"], len(ps))
        for k in sizes:
            if 2 * k > len(ps):
                continue
            values = {"block_efficiency": spread({i: (p.tokens, p.forwards) for i, p in ps.items()}, k, draws,
                                                 rng)[0],
                      "tokens_per_s": tps_spread(ps, k, draws, rng),
                      "speedup": speedup_spread(mine, {i: vanilla[(i, p.file)] for i, p in mine.items()}, k, draws,
                                                rng)}
            for m, v in values.items():
                if v is not None:
                    got[m][k] = round(max(v, got[m].get(k, 0.0)), 4)
    return {s: {"prompts": e["prompts"], **{m: e[m] for m in METRICS if e[m]}} for s, e in out.items()}


def main(a: Any, out=print) -> int:
    from simulators.sim_profiles import git_commit
    from simulators.trust import dataset_task

    for path in a.records:
        if not os.path.isfile(path):
            raise OuroborosError(f"--records {path!r}: no such file")
    if a.draws < 100:
        raise OuroborosError(f"--draws {a.draws}: at least 100 subsets")
    sizes = parse_sizes(a.prompts)
    task = dataset_task({"kind": a.dataset})
    if not task:
        raise OuroborosError(f"--dataset {a.dataset!r}: not the dataset kind of one task (humaneval, mtbench, gsm8k, "
                             "mbpp)")
    path = Path(a.out) if a.out else FLOOR_PATH
    check_writable(path, "--out")   # before the records are read
    doc: dict[str, Any] = {}
    if path.is_file():
        with open(path, encoding="utf-8") as f:
            doc = dict(yaml.safe_load(f) or {})
    floors = measure(a.records, a.model, a.dataset, sizes, a.draws, a.seed)
    if not floors:
        raise OuroborosError("--records: no real point of a strategy other than vanilla has recorded prompts")
    out(f"real figures of k prompts against all recorded ones ({len(a.records)} records file(s), {a.draws} random "
        f"subsets each), 80% quantile, eta / token/s / speedup:")
    out(f"{'strategy':<13}{'N':>4}" + "".join(f"{'k=' + str(k):>24}" for k in sizes))
    for name, e in floors.items():
        def pct(m: str, k: int, e: dict[str, Any] = e) -> str:
            v = (e.get(m) or {}).get(k)
            return "-" if v is None else f"{v:.0%}"
        out(f"{name:<13}{e['prompts']:>4}" + "".join(
            f"{pct('block_efficiency', k) + ' / ' + pct('tokens_per_s', k) + ' / ' + pct('speedup', k):>24}"
            for k in sizes))
    tasks = dict(doc.get("tasks") or {})
    tasks[task] = {"pair": a.model, "records": len(a.records),
                   "command": f"python -m simulators calibrate floor --dataset {a.dataset} --prompts "
                              f"{','.join(map(str, sizes))} --draws {a.draws} --seed {a.seed}"
                              + " --records <real sweep records>" * len(a.records),
                   "commit": git_commit(), "strategies": floors}
    doc = {"level": LEVEL, "tasks": dict(sorted(tasks.items()))}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("# GENERATED (do not edit by hand): written by "
                "`python -m simulators calibrate floor` (simulators/calibration/floor.py): per task and "
                "strategy, how far the\n# real eta, token/s and speedup of k random prompts stray from all recorded "
                "ones (80% quantile). Read by\n# simulators/trust.py: a simulated record's band on N prompts is at "
                "least the floor at the largest k <= N.\n")
        yaml.safe_dump(doc, f, sort_keys=False, width=120)
    out(f"floors of {task} written to {path}")
    return 0
