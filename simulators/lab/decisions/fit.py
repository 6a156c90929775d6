"""`python -m simulators calibrate decisions`: a sim profile fitted to a real pair's recorded decisions.

Coordinate search (`fit_profile`) on the fit prompts (even positions; lab/decisions/stats.py) over the draft's
agreement knobs (alpha_easy, alpha_hard, hard_frac, burst_len), the target's copying (p_copy), top-continuation rate
(p_top), the locality of its choices (pos_grain, choice_ctx) and of its confident continuations (local_frac,
local_ctx), against every run's eta, c, #Match and hit rates (and speculative's per-position acceptance) at once;
`--start PROFILE` begins from a stored profile's knobs, `--rounds` sets the passes. The profile is written to
conf/sim/<name>.yaml with its provenance. Knows nothing of real models (the real side is traces).
"""

from __future__ import annotations

import itertools
from typing import Any

from ouroboros.errors import OuroborosError
from simulators.architectures import load_conf
from simulators.lab.decisions.stats import (
    SIM_SEEDS,
    RealRun,
    id_mapper,
    load_real,
    load_sweep,
    sim_pooled,
    split,
    stats,
    unrecorded_notes,
)

FIT_KEYS = ("eta", "c", "match")  # + every hit rate, + speculative's per-position acceptance
FIT_GRID = (                      # SimConfig fields and the values tried (tests/test_sim_config.py checks them)
    ("corpus", ("pycode", "prose")),  # the text kind (a real instruct model explains in prose, then codes); "code"
                                      # (stdlib top-level modules) is not tried: REST's stdlib datastore holds it
    ("induction", (0.0, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 0.9)),   # match-length copying (the real pair copies its prompt)
    ("induction_decay", (1.0, 0.8, 0.6, 0.4, 0.2)),
    ("surprise_copy", (1.0, 0.75, 0.5, 0.3)),        # less copying right after a token the target would not write
    ("alpha_copy", (None, 0.9, 0.95, 1.0)),           # the draft's agreement on copies
    ("alpha_easy", (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.96, 0.98)),
    ("alpha_hard", (0.0, 0.1, 0.2, 0.3, 0.45, 0.6, 0.75, 0.9)),
    ("hard_frac", (0.1, 0.25, 0.4, 0.6)),
    ("burst_len", (4, 8, 24, 64)),
    ("p_copy", (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)),
    ("p_top", (0.4, 0.5, 0.6, 0.75, 0.85, 0.95)),
    ("pos_grain", (1, 16, 64, 256)),   # position-invariance of the target's choices (Jacobi / pool guesses)
    ("choice_ctx", (0, 6, 4, 3, 2)),   # how local its choices are (0: the whole 8-token tail)
    ("local_frac", (0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0)),  # contexts its last local_ctx tokens alone decide
    ("local_ctx", (1, 2, 3)),                                     # (Jacobi guesses)
    ("local_novel", (False, True)),    # ... only where those tokens are new in the context (no loops)
    ("forgive", (0.0, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8)),  # reading past a wrong token as if it were its own
    ("forgive_run", (3, 1, 2, 4, 6)),   # ... after this many own tokens (the default first: a tie, as at forgive 0,
                                        # keeps it)
    ("recall", (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)),  # going on with REST's datastore text right after
                                                                #  a wrong token
    ("recall_min", (6, 4, 5, 8)),           # ... where its last this many tokens occur in it (the default first)
    ("vocab", (4096, 8192)),
    ("pieces", ("words", "bpe", "real")),  # real: the pair's own tokenizer (vocab then unused)
)
# Knobs that act only together, searched jointly after the single ones in each round: local_frac does nothing at
# one local_ctx and overshoots at another (and loops the text unless local_novel), so a one-knob-at-a-time search
# from local_frac = 0 never moves any of them.
FIT_JOINT = (("local_frac", "local_ctx", "local_novel"),)
# Rules of the surrogate that a fit does not search but a profile keeps: written from the start profile as it has them
CARRIED = ("loop_guard", "self_guard", "copy_from")


def fit_error(real: dict[str, RealRun], fit_real: dict[str, dict[str, float]], opts: dict[str, Any], mapper,
              seeds: int) -> float:
    """The fit's objective on the fit prompts: the summed squared relative errors (floor 0.1) of every run's eta,
    c, #Match and hit rates, plus speculative's per-position acceptance."""
    e = 0.0
    for label, run in real.items():
        r = fit_real[label]
        s = stats(sim_pooled(run, split(len(run.results))[0], opts, mapper, seeds))
        keys = [k for k in r if k in FIT_KEYS or k.startswith("hit:")]
        if run.name == "speculative":
            keys += [k for k in r if k.startswith("pos")]
        e += sum((s.get(k, 0.0) - r[k]) ** 2 / max(r[k], 0.1) ** 2 for k in keys)
    return e


def has_real_tokenizer(model: str, tokenizer: str | None = None) -> bool:
    """Whether `sim.pieces=real` can run for this pair here (its tokenizer fetched, or given)."""
    from simulators.tokens import real_tokenizer_dir

    try:
        real_tokenizer_dir(tokenizer, load_conf("model", model))
    except OuroborosError:
        return False
    return True


_WORKER: dict[str, Any] = {}  # what a forked fit worker evaluates against (set before the pool forks)


def _worker_error(opts: dict[str, Any]) -> float:
    w = _WORKER
    return w["error"](opts)


def coordinate_search(opts: dict[str, Any], grids: dict[str, tuple[Any, ...]], error, out=print, rounds: int = 3,
                      near: int = 0, jobs: int = 1) -> dict[str, Any]:
    """Each knob in turn (then each FIT_JOINT group whose knobs are all in `grids`, jointly) takes the grid value
    minimising `error(opts)`; `rounds` passes. near > 0: a knob whose current value is on its grid tries only the
    values within `near` grid steps of it. jobs > 1: the grid values are evaluated in that many forked processes
    (same result). Ties: the first in grid order."""
    opts = dict(opts)
    steps: list[tuple[tuple[str, ...], list[tuple[Any, ...]]]] = [((k,), [(v,) for v in g]) for k, g in grids.items()]
    steps += [(knobs, joint_grid(knobs, grids)) for knobs in FIT_JOINT if all(k in grids for k in knobs)]
    pool = None
    if jobs > 1:
        import multiprocessing

        _WORKER["error"] = error
        pool = multiprocessing.get_context("fork").Pool(jobs)
    try:
        for _ in range(rounds):
            for knobs, full in steps:
                grid = full
                cur = tuple(opts.get(k) for k in knobs)
                if near and cur in full:
                    i = full.index(cur)
                    grid = full[max(0, i - near): i + near + 1]
                cands = [{**opts, **dict(zip(knobs, v, strict=True))} for v in grid]
                values = pool.map(_worker_error, cands, chunksize=1) if pool is not None else [error(o) for o in cands]
                best = min(range(len(grid)), key=values.__getitem__)
                opts.update(cands[best])
                out(f"fit {' + '.join(knobs)} = {' + '.join(map(str, grid[best]))} (error {values[best]:.4f})")
    finally:
        if pool is not None:
            pool.close()
            pool.join()
        _WORKER.clear()
    return opts


def fit_real_stats(real: dict[str, RealRun]) -> dict[str, dict[str, float]]:
    """Every run's real statistics over its fit prompts (even positions)."""
    return {label: stats([run.results[i] for i in split(len(run.results))[0]]) for label, run in real.items()}


def fit_profile(real: dict[str, RealRun], mapper, base: dict[str, Any] | None = None, out=print,
                rounds: int = 3, seeds: int = SIM_SEEDS, near: int = 0, jobs: int = 1,
                model: str = "qwen_coder", knobs: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Coordinate search (`coordinate_search`) of the surrogate's knobs (FIT_GRID; `knobs`: only those) on the FIT
    prompts only (even positions), minimising `fit_error`; `rounds` passes (the knobs interact); near > 0: a refit
    from a stored profile tries only values near its own. Returns sim options."""
    opts: dict[str, Any] = {"corpus": "pycode", **(base or {})}
    fit_real = fit_real_stats(real)
    grids = dict(FIT_GRID)
    if knobs:
        grids = {k: grids[k] for k in knobs}
    if "pieces" in grids and not has_real_tokenizer(model, opts.get("tokenizer")):
        grids["pieces"] = tuple(v for v in grids["pieces"] if v != "real")
        out(f"fit: pieces=real not tried (no tokenizer of {model} here: `python -m ouroboros.fetch` it, or "
            "sim.tokenizer=<dir>)")

    def error(o: dict[str, Any]) -> float:
        return fit_error(real, fit_real, o, mapper, seeds)

    return coordinate_search(opts, grids, error, out, rounds, near, jobs)


CODE_TASKS = ("humaneval", "mbpp")


def task_corpus(task: str) -> str:
    """The surrogate corpus of a task's kind: pycode for code tasks, else prose."""
    return "pycode" if task in CODE_TASKS else "prose"


def joint_grid(knobs: tuple[str, ...], grids: dict[str, tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Every combination of the knobs' grid values, those with local_frac = 0 (where the other local knobs do
    nothing) only once."""
    combos = list(itertools.product(*(grids[k] for k in knobs)))
    if knobs and knobs[0] == "local_frac":
        firsts = tuple(grids[k][0] for k in knobs[1:])
        combos = [c for c in combos if c[0] or c[1:] == firsts]
    return combos


def add_args(ap) -> None:
    ap.add_argument("--out-dir", default=None, help="where profiles are written (default conf/sim/)")
    ap.add_argument("--dir", default=None, help="recorded runs (`check clock --dir`), or a folder of them")
    ap.add_argument("--records", default=None, help="or a real sweep's records file (`python -m ouroboros.sweep ... "
                                                    "out=PATH` on backend=hf): its points' steps, no trace needed")
    ap.add_argument("--dataset", default=None, help="with --records: the dataset kind whose points to fit (default: "
                                                    "--task)")
    ap.add_argument("--name", default="qwen_coder_humaneval", help="profile name: conf/sim/<name>.yaml")
    ap.add_argument("--model", default="qwen_coder", help="the real pair (conf/model/<name>.yaml)")
    ap.add_argument("--task", default="humaneval")
    ap.add_argument("--corpus", default=None, choices=["code", "pycode", "prose"],
                    help="the surrogate corpus the search starts from (default: pycode for humaneval / mbpp, else "
                         "prose; the fit then tries pycode and prose)")
    ap.add_argument("--tokenizer", default=None, help="the pair's tokenizer directory (default: the fetched one)")
    ap.add_argument("--start", default=None, help="start the search from this profile's knobs (conf/sim/<name>.yaml; "
                                                  "default: the surrogate's defaults)")
    ap.add_argument("--rounds", type=int, default=3, help="passes of the coordinate search (>= 1)")
    ap.add_argument("--near", type=int, default=0, help="each knob tries only grid values within this many steps "
                                                        "of its current one (0: the whole grid)")
    ap.add_argument("--jobs", type=int, default=1, help="processes evaluating a knob's grid values at once (>= 1)")
    ap.add_argument("--runs", default=None, help="fit only the runs of these strategies (comma-separated names, e.g. "
                                                 "speculative,cascade for the draft's agreement knobs); default: all")
    ap.add_argument("--knobs", default=None, help="search only these knobs (comma-separated; the others stay as "
                    "--start has them); default: all of " + ", ".join(k for k, _ in FIT_GRID))


def main(a) -> int:
    """Fit on the fit prompts, write the profile."""
    from pathlib import Path

    from ouroboros.paths import check_out_dir
    from simulators.architectures import check_name, conf_root
    from simulators.sim_profiles import check_profile_name, git_commit, load_profile, write_profile

    check_name(a.model, "--model")
    load_conf("model", a.model)   # an unknown pair is one line before any recording is read
    check_name(a.name, "--name")   # the profile is written as <out-dir>/<name>.yaml
    check_out_dir(a.out_dir or conf_root() / "sim", "--out-dir")
    if (a.dir is None) == (a.records is None):
        raise OuroborosError("calibrate decisions needs exactly one of --dir (recorded runs) or --records (a real "
                             "sweep's records file)")
    if a.rounds < 1:
        raise OuroborosError(f"--rounds must be >= 1, got {a.rounds}")
    if a.near < 0:
        raise OuroborosError(f"--near must be >= 0, got {a.near}")
    if a.jobs < 1:
        raise OuroborosError(f"--jobs must be >= 1, got {a.jobs}")
    knobs = tuple(k.strip() for k in a.knobs.split(",") if k.strip()) if a.knobs is not None else None
    if knobs is not None:
        bad = [k for k in knobs if k not in dict(FIT_GRID)]
        if bad or not knobs:
            raise OuroborosError(f"--knobs: {', '.join(bad) or repr(a.knobs)} not a fitted knob (one of "
                                 f"{', '.join(k for k, _ in FIT_GRID)})")
    base: dict[str, Any] = {}
    start_fit: dict[str, Any] | None = None
    if a.start:
        check_profile_name(check_name(a.start, "--start"))
        start = load_profile(a.start)
        base = {k: start[k] for k in (*(knob for knob, _ in FIT_GRID), *CARRIED) if k in start}
        earlier = start.get("fit") or {}
        start_fit = {"profile": a.start, **{k: earlier[k] for k in ("command", "commit") if k in earlier}}
        if earlier.get("task") == a.task and (earlier.get("inputs") or {}).get("recorded_runs"):
            start_fit["recorded_runs"] = list(earlier["inputs"]["recorded_runs"])   # what its knobs were fitted to
            start_fit["fit_prompt_ids"] = list(earlier["inputs"].get("fit_prompt_ids") or [])
    base["corpus"] = a.corpus or base.get("corpus") or task_corpus(a.task)
    real = load_real(a.dir, a.model) if a.dir else load_sweep(a.records, a.model, a.dataset or a.task, a.tokenizer)
    if getattr(a, "runs", None):
        names = {n.strip() for n in a.runs.split(",") if n.strip()}
        missing = sorted(names - {r.name for r in real.values()})
        if missing or not names:
            raise OuroborosError(f"--runs: {', '.join(missing) or repr(a.runs)} not among the recorded runs' "
                                 f"strategies ({', '.join(sorted({r.name for r in real.values()}))})")
        real = {k: r for k, r in real.items() if r.name in names}
    for line in unrecorded_notes(real):
        print(line)
    mapper = id_mapper(a.model, a.tokenizer)
    opts = fit_profile(real, mapper, base, rounds=a.rounds, near=a.near, jobs=a.jobs, model=a.model, knobs=knobs)
    n = len(next(iter(real.values())).results)
    fields: dict[str, Any] = {"pair": a.model, "profile": a.name}
    fields.update((k, opts[k]) for k in (*(knob for knob, _ in FIT_GRID), *CARRIED) if k in opts)
    fields["prompt_tokens"] = "tokenizer"
    fit = {"pair": a.model, "task": a.task,
           "inputs": {"recorded_runs": sorted({r.replace(str(Path.home()), "~") for r in real}
                                              | set((start_fit or {}).get("recorded_runs", []) if knobs else [])),
                      "prompts": n,
                      **({"categories": cats} if (cats := sorted({c for r in real.values() for c in r.categories
                                                                   if c})) else {}),
                      "fit_prompts": "even positions",
                      "fit_prompt_ids": sorted({run.results[i].prompt_id for run in real.values()
                                                for i in split(len(run.results))[0]}
                                               | set((start_fit or {}).get("fit_prompt_ids", []) if knobs else [])),
                      "prompt_format": next(iter(real.values())).prompt_format,
                      "max_new_tokens": next(iter(real.values())).budget},
           "inputs_source": ("real greedy runs of the pair recorded by `python -m simulators check clock` (traces "
                             "kept in the cache directory, not in git)" if a.dir else
                             "the per-step records of a real greedy sweep of the pair (`python -m ouroboros.sweep "
                             "... backend=hf`; the records file is not in git)") + "; no published figure is used",
           "method": "simulators.lab.decisions.fit.fit_profile: coordinate search of "
                     + (', '.join(knobs) if knobs else "the knobs above") + f" ({a.rounds} "
                     f"round{'s' * (a.rounds > 1)}"
                     f"{', from ' + a.start if a.start else ''}"
                     f"{'; the other knobs as it has them' if knobs and a.start else ''}"
                     f"{'; the other knobs at their defaults' if knobs and not a.start else ''}"
                     f"{f', within {a.near} grid step' + 's' * (a.near > 1) if a.near else ''}) on the fit prompts, "
                     "the surrogate "
                     f"pooled over {SIM_SEEDS} seeds, minimising squared relative errors of every run's eta, c, "
                     "#Match, hit rates and speculative's per-position acceptance",
           "command": "python -m simulators calibrate decisions "
                      + ("--dir <recorded runs>" if a.dir
                         else f"--records <sweep records> --dataset {a.dataset or a.task}")
                      + f" --name {a.name} --task {a.task}"
                      + (f" --start {a.start}" if a.start else "") + f" --rounds {a.rounds}"
                      + (f" --near {a.near}" if a.near else "") + (f" --knobs {','.join(knobs)}" if knobs else "")
                      + (f" --runs {a.runs}" if getattr(a, "runs", None) else ""),
           "commit": git_commit()}
    if start_fit:
        fit["start"] = start_fit    # the profile the search began from, and how that one was fitted
    path = write_profile(a.name, f"{a.model}, {a.task}: calibration profile ("
                         + ("recorded real decisions)" if a.dir else "a real sweep's decisions)"), fields, fit,
                         Path(a.out_dir) if a.out_dir else None)
    print(f"wrote {path}")
    return 0
