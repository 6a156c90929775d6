"""How far a few real prompts' figures stray from their task's: `python -m simulators check spread` reports it,
`python -m simulators calibrate floor` stores it as the floor under every simulated band. One topic, one module:
they share the records' flags, the subset sizes' checks and the spread itself.

`check spread`: how far the real eta of a few prompts strays from the task's own.

A per-task prediction (a profile, a prior, a published figure) names one block efficiency for a task; a check of
it runs a handful of prompts. How far those prompts' real eta can be from the task's, with the simulator not
involved at all, is the floor under every such check: a held-out error on k prompts smaller than this spread is
luck, and a target ("within 10% on 8 prompts") tighter than it cannot be met by any per-task prediction.

From real sweep records (one or several files; the same strategy and parameters over several files pool their
prompts, a prompt measured twice counts once, its last line), per point: the pooled eta of all N recorded prompts
(tokens / target forwards), its per-prompt range, and for each k of `--prompts` with 2k <= N the 80% quantile
and the median of |eta(k prompts) / eta(all N) - 1| over `--draws` random k-prompt subsets (seeded).

    python -m simulators check spread --records he_fit.jsonl --records he10.jsonl --dataset humaneval --prompts 4,8

Reads records only (no tokenizer, no weights). Not a test: spreads are reported, never asserted.

`calibrate floor`: how far a few real prompts' eta, token/s and speedup stray from their
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

import json
import os
import random
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from ouroboros.errors import OuroborosError
from ouroboros.paths import check_writable
from ouroboros.strategies import is_peer
from simulators.architectures import conf_root

LEVEL = 0.8   # the quantile reported, as the bands' central 80%
FLOOR_PATH = conf_root() / "calibration" / "prompt_floor.yaml"
METRICS = ("block_efficiency", "tokens_per_s", "speedup")


def record_args(ap, prompts: str) -> None:
    """The flags `check spread` and `calibrate floor` share (records, pair, subset sizes, draws, seed)."""
    ap.add_argument("--records", action="append", required=True, metavar="R.jsonl",
                    help="a real sweep's records file (repeatable; the same point over several files pools prompts)")
    ap.add_argument("--model", default="qwen_coder", help="the pair (conf/model) the records must be of")
    ap.add_argument("--prompts", default=prompts, help="subset sizes k, comma-separated (each >= 1)")
    ap.add_argument("--draws", type=int, default=4000, help="random k-prompt subsets per point and k (>= 100)")
    ap.add_argument("--seed", type=int, default=0, help="the subsets' random seed")


def add_args(ap) -> None:
    record_args(ap, "4,8")
    ap.add_argument("--dataset", default=None, help="the dataset kind whose points to read (needed where a file "
                    "holds several)")


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise OuroborosError(f"--prompts {text!r}: comma-separated whole numbers, e.g. 4,8") from None
    if not sizes or min(sizes) < 1:
        raise OuroborosError(f"--prompts {text!r}: each size must be >= 1")
    return sorted(set(sizes))


class Prompt(NamedTuple):
    tokens: int        # new tokens
    forwards: int      # target forwards (decode steps)
    seconds: float     # its decode time as recorded (elapsed_s; 0 where the record has none)
    file: int          # which records file (a speedup pairs a prompt with vanilla's of the same file)


def prompt_rows(paths: list[str], model: str, dataset: str | None) -> tuple[dict[str, dict[str, Prompt]],
                                                                             dict[str, str]]:
    """(point name -> prompt id -> Prompt, point name -> strategy), from every real greedy point of the files
    (vanilla included: its eta is 1, a check that the records are what they say). A point is its label and
    parameters: one label with other parameters in another file is another point, named `label [2]`."""
    from ouroboros.running.sinks import RecordFile
    from simulators.lab.decisions.stats import real_points

    out: dict[str, dict[str, Prompt]] = {}
    strategies: dict[str, str] = {}
    names: dict[tuple[str, str], str] = {}
    for i, path in enumerate(paths):
        chosen = real_points(path, model, dataset, lambda r: not is_peer(r["strategy"]),
                             "of a decoding strategy", " (peers do not count)")
        latest = {rec["point_id"]: rec for rec in chosen}
        for pid, rec in latest.items():
            ident = (rec["label"], json.dumps([rec["strategy"], rec.get("params") or {}], sort_keys=True))
            if ident not in names:
                same = sum(label == rec["label"] for label, _ in names)
                names[ident] = rec["label"] + (f" [{same + 1}]" if same else "")
            key = names[ident]
            strategies[key] = str(rec["strategy"])
            for prompt_id, line in RecordFile(path).finished_prompts(pid).items():
                steps = line.get("steps") or []
                if steps:
                    out.setdefault(key, {})[prompt_id] = Prompt(sum(int(s["new_tokens"]) for s in steps),
                                                                len(steps), float(line.get("elapsed_s") or 0), i)
    return out, strategies


def per_prompt(paths: list[str], model: str, dataset: str | None) -> dict[str, dict[str, tuple[int, int]]]:
    """point name -> prompt id -> (new tokens, target forwards) (see prompt_rows)."""
    rows, _ = prompt_rows(paths, model, dataset)
    return {key: {pid: (p.tokens, p.forwards) for pid, p in ps.items()} for key, ps in rows.items()}


def pooled_eta(prompts: dict[str, tuple[int, int]]) -> float:
    return sum(t for t, _ in prompts.values()) / sum(n for _, n in prompts.values())


def strays(ids: list[str], of, k: int, draws: int, rng: random.Random) -> list[float]:
    """|of(k random ids) / of(all ids) - 1| over `draws` random k-subsets, sorted."""
    whole = of(ids)
    return sorted(abs(of(rng.sample(ids, k)) / whole - 1) for _ in range(draws))


def quantile(devs: list[float]) -> float:
    return devs[min(len(devs) - 1, int(LEVEL * len(devs)))]


def spread(prompts: dict[str, tuple[int, int]], k: int, draws: int, rng: random.Random) -> tuple[float, float]:
    """(80% quantile, median) of |eta(k random prompts) / eta(all) - 1| over `draws` subsets (pooled etas)."""
    def eta(sub: list[str]) -> float:
        return sum(prompts[i][0] for i in sub) / sum(prompts[i][1] for i in sub)

    devs = strays(sorted(prompts), eta, k, draws, rng)
    return quantile(devs), devs[len(devs) // 2]


def tps(point: dict[str, Prompt], sub: list[str]) -> float:
    """Total tokens over total time of these prompts."""
    return sum(point[i].tokens for i in sub) / sum(point[i].seconds for i in sub)


def tps_spread(point: dict[str, Prompt], k: int, draws: int, rng: random.Random) -> float | None:
    """80% quantile of |token/s(k random prompts) / token/s(all) - 1|; None where fewer than 2k prompts or a
    prompt's time is missing."""
    ids = sorted(point)
    if len(ids) < 2 * k or any(point[i].seconds <= 0 for i in ids):
        return None
    return quantile(strays(ids, lambda sub: tps(point, sub), k, draws, rng))


def speedup_spread(point: dict[str, Prompt], vanilla: dict[str, Prompt], k: int, draws: int,
                   rng: random.Random) -> float | None:
    """80% quantile of |speedup(k random prompts) / speedup(all) - 1| over `draws` subsets, where a speedup is the
    paper's (total tokens over total time, against vanilla's on the same prompts), each prompt paired with
    vanilla's run in the same records file (other files ran at other times, on another machine state: such a
    prompt is left out); None when fewer than 2k prompts pair so, or a time is missing."""
    ids = sorted(i for i, p in point.items() if i in vanilla and vanilla[i].file == p.file)
    if len(ids) < 2 * k or any(point[i].seconds <= 0 or vanilla[i].seconds <= 0 for i in ids):
        return None
    return quantile(strays(ids, lambda sub: tps(point, sub) / tps(vanilla, sub), k, draws, rng))


def cell(got: tuple[float, float] | None) -> str:
    return "-" if got is None else f"{100 * got[0]:.1f}% / {100 * got[1]:.1f}%"


def report(paths: list[str], model: str, dataset: str | None, sizes: list[int], draws: int, seed: int,
           out=print) -> dict[str, dict[int, tuple[float, float]]]:
    points = per_prompt(paths, model, dataset)
    if not points:
        raise OuroborosError("--records: no prompt of a real point has recorded steps")
    rng = random.Random(seed)
    heads = "".join(f"{'k=' + str(k) + ' 80% / median':>22}" for k in sizes)
    out(f"real eta of k prompts against all N recorded ones ({', '.join(paths)}; {draws} random subsets each): "
        f"no per-task prediction is closer on k prompts than this, 80% of the time")
    out(f"{'point':<44}{'N':>4}{'eta':>7}{'per prompt':>14}{heads}")
    got: dict[str, dict[int, tuple[float, float]]] = {}
    for key in sorted(points):
        ps = points[key]
        etas = sorted(t / n for t, n in ps.values())
        whole = pooled_eta(ps)
        got[key] = {k: spread(ps, k, draws, rng) for k in sizes if 2 * k <= len(ps)}
        cells = "".join(f"{cell(got[key].get(k)):>22}" for k in sizes)
        out(f"{key[:43]:<44}{len(ps):>4}{whole:>7.2f}{f'{etas[0]:.2f}-{etas[-1]:.2f}':>14}{cells}")
    out("-: fewer than 2k prompts recorded")
    return got


def checked_sizes(a: Any) -> list[int]:
    """The checks `check spread` and `calibrate floor` share (records files exist, enough draws): the subset sizes."""
    for path in a.records:
        if not os.path.isfile(path):
            raise OuroborosError(f"--records {path!r}: no such file")
    if a.draws < 100:
        raise OuroborosError(f"--draws {a.draws}: at least 100 subsets")
    return parse_sizes(a.prompts)


def main(args: Any) -> int:
    sizes = checked_sizes(args)
    report(args.records, args.model, args.dataset, sizes, args.draws, args.seed)
    return 0


def floor_args(ap) -> None:
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


def floor_main(a: Any, out=print) -> int:
    from simulators.sim_profiles import git_commit
    from simulators.trust import dataset_task

    sizes = checked_sizes(a)
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
                "`python -m simulators calibrate floor` (simulators/lab/spread.py): per task and "
                "strategy, how far the\n# real eta, token/s and speedup of k random prompts stray from all recorded "
                "ones (80% quantile). Read by\n# simulators/trust.py: a simulated record's band on N prompts is at "
                "least the floor at the largest k <= N.\n")
        yaml.safe_dump(doc, f, sort_keys=False, width=120)
    out(f"floors of {task} written to {path}")
    return 0
