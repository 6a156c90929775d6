"""`python -m simulators check spread`: how far the real eta of a few prompts strays from the task's own.

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
"""

from __future__ import annotations

import json
import random
from typing import Any, NamedTuple

from ouroboros.errors import OuroborosError

LEVEL = 0.8   # the quantile reported, as the bands' central 80%


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
    from ouroboros.sinks import RecordFile
    from simulators.decisions import real_points

    out: dict[str, dict[str, Prompt]] = {}
    strategies: dict[str, str] = {}
    names: dict[tuple[str, str], str] = {}
    for i, path in enumerate(paths):
        chosen = real_points(path, model, dataset, lambda r: not r["strategy"].startswith("hf_"),
                             "of a decoding strategy", " (hf_* peers do not count)")
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


def main(args: Any) -> int:
    import os

    for path in args.records:
        if not os.path.isfile(path):
            raise OuroborosError(f"--records {path!r}: no such file")
    if args.draws < 100:
        raise OuroborosError(f"--draws {args.draws}: at least 100 subsets")
    sizes = parse_sizes(args.prompts)
    report(args.records, args.model, args.dataset, sizes, args.draws, args.seed)
    return 0
