"""Decision fidelity: the simulator's token decisions against a real pair's, per strategy, on the same prompts.

    python -m simulators.realcheck --strategies vanilla,speculative:gamma=4,pld --ids HumanEval/0,... \\
        --max-new-tokens 64 --dtype bfloat16 --threads 1 --hardware h100 --dir ~/.cache/ouroboros/decisions/he/a
    python -m simulators.calibrate decisions --dir ~/.cache/ouroboros/decisions/he --name qwen_coder_humaneval
    python -m simulators.validate decisions --dir ~/.cache/ouroboros/decisions/he --sim qwen_coder_humaneval

1. Real side: runs recorded once by `simulators.realcheck` (one folder per process: `real.jsonl` + one trace per
   run, token-level, in the cache directory, never in git). Their statistics are recomputed by replaying each
   trace on the `sim` backend with the same strategy (the same decisions, forward for forward; checked: same
   outputs, no unrecorded context), so a new surrogate is re-checked in seconds with no model loaded.
2. Simulated side: the same strategies on the surrogate, on the same prompts (each real token id mapped to a
   surrogate id as `sim.prompt_tokens=tokenizer` does, so lengths and repeats are the real ones; REST's datastore
   too), pooled over SIM_SEEDS surrogate seeds (the surrogate's expected statistics, not one noisy draw).
3. Per strategy: eta (block efficiency), c (draft tokens per draft forward), A (accepted length), #Match per
   target forward, pool / datastore hit rate by source, acceptance per draft position; side by side with the
   relative error. Prompts are split by position: even ones fit (`calibrate decisions`), odd ones evaluate.

Surrogate fit (`fit_profile`): coordinate search on the fit prompts over the draft's agreement knobs (alpha_easy,
alpha_hard, hard_frac, burst_len), the target's copying (p_copy), top-continuation rate (p_top), the locality
of its choices (pos_grain, choice_ctx) and of its confident continuations (local_frac, local_ctx), against every
run's eta, c, #Match and hit rates (and speculative's per-position acceptance) at once; `--start PROFILE` begins
from a stored profile's knobs, `--rounds` sets the passes.
Text prior (`fit_prior`, `python -m simulators.calibrate prior`): the target's text knobs alone, shared by several
tasks' recordings and fitted on all of them at once; conf/sim/default.yaml holds the result, for every pair with no
recordings of its own. `--holdout TASK` checks how it transfers to a task it was not fitted on.
Knows nothing of real models (the real side is traces).
"""

from __future__ import annotations

import glob
import itertools
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ouroboros.backends.base import OuroborosError
from ouroboros.decode import decode
from ouroboros.metrics import PromptResult, RunResult, pool_rates
from ouroboros.strategies import build_proposer, get_spec
from simulators.pair import make_pair
from simulators.profiles import load_conf
from simulators.realcheck import trace_name, warm_up
from simulators.replay import load_trace, trace_prompts

FIT_KEYS = ("eta", "c", "match")  # + every hit rate, + speculative's per-position acceptance
FIT_GRID = (                      # SimConfig fields and the values tried (tests/test_sim_config.py checks them)
    ("corpus", ("pycode", "prose")),  # the text kind (a real instruct model explains in prose, then codes); "code"
                                      # (stdlib top-level modules) is not tried: REST's stdlib datastore holds it
    ("induction", (0.0, 0.1, 0.2, 0.3, 0.45, 0.6)),   # match-length copying (the real pair copies its prompt)
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
POSITIONS = 6                    # per-position acceptance shown for draft positions 1..POSITIONS
SIM_SEEDS = 3                    # the simulated side pools its prompt results over this many surrogate seeds: a
                                 # surrogate statistic is an expectation, not one draw of a 5-prompt x 64-token text
SIM_HARDWARE = "h100"            # decisions need no clock; any profile the pair fits on


@dataclass
class RealRun:
    label: str
    name: str
    params: dict[str, Any]
    budget: int
    results: list[PromptResult] = field(default_factory=list)   # replayed, in recorded order per folder
    prompts: list[list[int]] = field(default_factory=list)       # real prompt ids, same order
    groups: list[int] = field(default_factory=list)              # which folder (one proposer per folder)
    unrecorded: dict[str, int] = field(default_factory=dict)     # prompt id -> contexts the replay asked, not recorded


def folders(root: str) -> list[str]:
    """`root` itself if it holds real.jsonl, else its sub-folders that do (one per recording process)."""
    if os.path.exists(os.path.join(root, "real.jsonl")):
        return [root]
    out = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(root, "*", "real.jsonl")))
    if not out:
        raise OuroborosError(f"no recorded runs under {root} (real.jsonl): record with simulators.realcheck first")
    return out


def load_real(root: str, model: str = "qwen_coder") -> dict[str, RealRun]:
    """Every recorded run under `root`, replayed: the real decisions' statistics, per prompt."""
    runs: dict[str, RealRun] = {}
    for g, d in enumerate(folders(root)):
        rows: dict[str, list[dict[str, Any]]] = {}
        with open(os.path.join(d, "real.jsonl"), encoding="utf-8") as f:
            for ln in f:
                rec = json.loads(ln)
                rows.setdefault(rec["run"], []).append(rec)
        for label, rs in rows.items():
            tpath = os.path.join(d, trace_name(label))
            sim = make_pair(load_conf("model", model), load_conf("hardware", SIM_HARDWARE),
                            {"tokens": "replay", "trace": tpath})
            by_id = {p.id: p for p in trace_prompts(load_trace(tpath))}
            name, params = rs[0]["name"], rs[0]["params"]
            proposer = build_proposer(name, params, sim.target, sim.draft if get_spec(name).needs_draft_model else None)
            run = runs.setdefault(label, RealRun(label, name, params, rs[0]["budget"]))
            warm_up(sim, proposer, by_id[rs[0]["prompt_id"]].ids)
            lms = (sim.target.lm, sim.draft.lm)  # type: ignore[attr-defined]
            for r in rs:
                p = by_id[r["prompt_id"]]
                before = sum(lm.misses for lm in lms)
                res = decode(sim.target, proposer, p.ids, r["budget"], sim.eos_ids, prompt_id=p.id)
                proposer.checkpoint()
                if res.output != r["output"]:
                    raise OuroborosError(f"{label}: the replay of {p.id} differs from the recorded output")
                missed = sum(lm.misses for lm in lms) - before
                if missed:
                    run.unrecorded[p.id] = missed
                run.results.append(res)
                run.prompts.append(list(p.ids))
                run.groups.append(g)
    return runs


def unrecorded_notes(real: dict[str, RealRun]) -> list[str]:
    """One line per run whose replay asked contexts the recording never saw, though its outputs are the real ones.
    Cause: in bf16 a real model can answer one context two ways in forwards of different shapes (a near-tie). A
    trace keeps each such context's answers per forward (replay.Recorder), so its replay is exact; a trace
    recorded before that keeps the last answer only, the replay takes the other branch there and, through a pool
    carried from prompt to prompt (Ouroboros), drafts differently on every later prompt. That run's statistics
    are then the replay's, approximate on those prompts: re-record it."""
    return [f"note: {run.label}: {sum(run.unrecorded.values())} contexts not in the trace on prompt(s) "
            f"{', '.join(run.unrecorded)} (outputs identical; a bf16 near-tie recorded with one answer only: "
            "re-record with this version), its statistics there are the replay's"
            for run in real.values() if run.unrecorded]


def stats(results: list[PromptResult]) -> dict[str, float]:
    """The decision statistics of a set of prompt results (one definition for both sides)."""
    tot = RunResult("x", results).totals()
    ps = tot["proposer_stats"]
    out = {"eta": tot["block_efficiency"], "A": tot["accepted_length"], "match": tot["match_per_forward"]}
    drafted, dfw = ps.get("drafted_tokens"), ps.get("draft_forwards")
    if drafted is None:
        drafted, dfw = tot["draft_tokens"], tot["draft_forwards"]
    if dfw:
        out["c"] = drafted / dfw
    for k, v in pool_rates(ps).items():
        if k.endswith("hit_rate"):  # "hit_rate" (the strategy's pool / datastore), "draft.hit_rate", ...
            out["hit:" + (k[: -len("hit_rate")].rstrip(".:_") or "pool")] = v
    prop, acc = tot["position_proposed"], tot["position_accepted"]
    for i in range(min(POSITIONS, len(prop))):
        if prop[i]:
            out[f"pos{i + 1}"] = acc[i] / prop[i]
    return out


def split(n: int) -> tuple[list[int], list[int]]:
    """(fit, evaluate) prompt positions: even positions fit, odd ones evaluate (never the same prompt)."""
    return list(range(0, n, 2)), list(range(1, n, 2))


def sim_results(run: RealRun, which: list[int], sim_opts: dict[str, Any], mapper, model: str = "qwen_coder",
                seed: int = 0) -> list[PromptResult]:
    """The run's strategy on the surrogate over the prompts at positions `which` (one proposer per recording
    folder, in recorded order, as the real run had). `mapper(surrogate tokenizer)` -> real id -> surrogate id."""
    opts = {**sim_opts, "prompt_tokens": "surrogate"}  # prompts come as real ids, mapped by `mapper`
    pair = make_pair(load_conf("model", model), load_conf("hardware", SIM_HARDWARE), opts, seed=seed)
    real_ids = pair.tokenizer.real_ids  # sim.pieces=real: the surrogate speaks the real ids, nothing to map
    map_id = int if real_ids else mapper(pair.tokenizer)
    needs = get_spec(run.name).needs_draft_model
    params = dict(run.params) if real_ids else mapped_params(run, map_id)
    recall = float(opts.get("recall") or 0) and not opts.get("recall_text")
    if run.name == "rest" and params.get("datastore") and recall:
        # sim.recall: the target knows the text of the datastore it verifies drafts from (mapped to its ids)
        pair = make_pair(load_conf("model", model), load_conf("hardware", SIM_HARDWARE),
                         {**opts, "recall_text": params["datastore"]}, seed=seed)
    proposers: dict[int, Any] = {}
    out = []
    for i in which:
        g = run.groups[i]
        if g not in proposers:
            proposers[g] = build_proposer(run.name, params, pair.target, pair.draft if needs else None)
            first = run.groups.index(g)  # the folder's first prompt: the real run warmed up on it
            warm_up(pair, proposers[g], [map_id(t) for t in run.prompts[first]])
        ids = [map_id(t) for t in run.prompts[i]]
        out.append(decode(pair.target, proposers[g], ids, run.budget, pair.eos_ids, prompt_id=run.results[i].prompt_id))
        proposers[g].checkpoint()
    return out


def mapped_params(run: RealRun, map_id) -> dict[str, Any]:
    """The run's strategy options with every real token id in them mapped to a surrogate id: REST's datastore
    (`corpus: [ids]` inline, or a `datastore:` file, rebuilt in surrogate ids next to it as `<name>.sim-<digest>.npz`,
    once) holds the real tokenizer's ids; the other strategies' options hold none. In a datastore file, a token whose
    text the surrogate has no piece for (`map_id.piece` gives None, where the map has it: `IdMap`) becomes a document
    break: the surrogate can never write it, and a hashed stand-in would collide with a piece it does write (every
    context would then find a match). An inline corpus is one document: it keeps the hashed stand-ins."""
    params = dict(run.params)
    if run.name != "rest":
        return params
    if params.get("corpus"):
        params["corpus"] = [map_id(int(t)) for t in params["corpus"]]
    elif params.get("datastore"):
        params["datastore"] = mapped_datastore(str(params["datastore"]), getattr(map_id, "piece", map_id))
    return params


_MAPPED: dict[tuple[str, Any], str] = {}  # (datastore path, id map) -> its mapped copy, once per process


def mapped_datastore(path: str, map_id) -> str:
    """A REST datastore file with its documents mapped token by token (separators kept); the mapped copy is keyed
    by a digest of the mapping of every token id it holds, so another surrogate vocabulary gets its own file."""
    key = (os.path.abspath(path), map_id)
    if key not in _MAPPED:
        _MAPPED[key] = _mapped_datastore(path, map_id)
    return _MAPPED[key]


def _mapped_datastore(path: str, map_id) -> str:
    import hashlib

    import numpy as np

    from ouroboros.datastore import SEP, Datastore

    ds = Datastore.load(path)
    toks = ds.tokens.tolist()
    mapped = [SEP if t == SEP else m if (m := map_id(t)) is not None else SEP for t in toks]
    digest = hashlib.sha1(np.asarray(mapped, dtype=np.int32).tobytes()).hexdigest()[:12]
    out = f"{os.path.splitext(path)[0]}.sim-{digest}.npz"
    if not os.path.exists(out):
        docs: list[list[int]] = [[]]
        for t in mapped:
            if t == SEP:
                docs.append([])
            else:
                docs[-1].append(t)
        Datastore.build(docs).save(out)
    return out


class IdMap:
    """real id -> surrogate id as `sim.prompt_tokens=tokenizer` maps prompts (a hashed stand-in for text the
    surrogate has no piece for); `piece`: the same, but None there (REST's datastore, `mapped_params`)."""

    def __init__(self, tok: Any):
        self.tok = tok

    def __call__(self, real_id: int) -> int:
        return self.tok.surrogate_id(real_id)

    def piece(self, real_id: int) -> int | None:
        return self.tok.piece_id(real_id)


def id_mapper(model: str = "qwen_coder", tokenizer_dir: str | None = None):
    """surrogate tokenizer -> (real token id -> surrogate id), as `sim.prompt_tokens=tokenizer` maps them (needs
    the pair's tokenizer; one map per surrogate vocabulary)."""
    from transformers import AutoTokenizer

    from simulators.tokens import RealCountTokenizer, fetched_tokenizer_dir

    real = AutoTokenizer.from_pretrained(tokenizer_dir or str(fetched_tokenizer_dir(load_conf("model", model))))
    maps: dict[int, Any] = {}

    def mapper(surrogate):
        if id(surrogate) not in maps:
            maps[id(surrogate)] = IdMap(RealCountTokenizer(surrogate, real))
        return maps[id(surrogate)]

    return mapper


def sim_pooled(run: RealRun, which: list[int], sim_opts: dict[str, Any], mapper, seeds: int = SIM_SEEDS
               ) -> list[PromptResult]:
    """`sim_results` over surrogate seeds 0..seeds-1, pooled (each seed is another surrogate text and draft)."""
    return [r for seed in range(seeds) for r in sim_results(run, which, sim_opts, mapper, seed=seed)]


def compare(real: dict[str, RealRun], sim_opts: dict[str, Any], mapper, which: str = "eval",
            seeds: int = SIM_SEEDS) -> list[dict[str, Any]]:
    rows = []
    for label, run in real.items():
        fit_pos, eval_pos = split(len(run.results))
        pos = {"eval": eval_pos, "fit": fit_pos}.get(which, list(range(len(run.results))))   # "all": every prompt
        r = stats([run.results[i] for i in pos])
        s = stats(sim_pooled(run, pos, sim_opts, mapper, seeds))
        rows.append({"run": label, "prompts": len(pos), "real": r, "sim": s})
    return rows


def rel(s: float | None, r: float | None) -> float | None:
    if s is None or r is None or r == 0:
        return None
    return s / r - 1


def table(rows: list[dict[str, Any]]) -> str:
    lines = []
    for row in rows:
        r, s = row["real"], row["sim"]
        keys = [k for k in ("eta", "c", "A", "match") if k in r] + sorted(k for k in r if k.startswith("hit:")) + \
            [k for k in r if k.startswith("pos")]
        cells = []
        for k in keys:
            e = rel(s.get(k), r[k])
            cells.append(f"{k} {r[k]:.2f}/{s.get(k, float('nan')):.2f}" + (f" ({e:+.0%})" if e is not None else ""))
        lines.append(f"{row['run']} [{row['prompts']} prompts, real/sim]: " + "; ".join(cells))
    return "\n".join(lines)


def score(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets: eta and c within 10%, #Match and hit rates within 15%."""
    n_ok = n_all = 0
    misses = []
    for row in rows:
        for k, v in row["real"].items():
            lim = 0.10 if k in ("eta", "c") else 0.15 if (k == "match" or k.startswith("hit:")) else None
            if lim is None or not v:
                continue
            e = rel(row["sim"].get(k), v)
            n_all += 1
            if e is not None and abs(e) <= lim:
                n_ok += 1
            else:
                misses.append(f"{row['run']} {k} {'n/a' if e is None else f'{e:+.0%}'}")
    return {"ok": n_ok, "all": n_all, "misses": misses}


# -------------------------------------------------------------------------------------------- the fit
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


# The text prior (`fit_prior`): the surrogate TARGET's knobs that describe how a real LM's greedy text behaves
# (copying, runner-up choices, locality), shared by every task, for the pairs no real run was recorded for (their
# draft agreement is a profile's own fit). pieces stays bpe (words carry their leading space, as in real tokenizers:
# their characters per token, docs/simulator-fidelity.md); the corpus follows the task's kind. surprise_copy stays
# off (1.0): on, the surrogate predicts at every step to know whether a token surprised it, which made simulations
# 2.1x slower (the 27-point grid 87.5 s against its 60 s target), and the fit without it reached the same error
# (2.394 against 2.396 with surprise_copy 0.75 searched; docs/simulator-fidelity.md). forgive stays off too:
# searched from the prior it stays at 0, and on it makes simulations about 3x slower. recall is off:
# it needs the text a REST run's target knows (sim.recall_text), which a pair without recordings does not have.
PRIOR_KNOBS = ("induction", "induction_decay", "p_copy", "p_top", "pos_grain", "choice_ctx", "local_frac",
               "local_ctx", "local_novel", "vocab")
PRIOR_START = {"induction": 0.0, "induction_decay": 1.0, "surprise_copy": 1.0, "p_copy": 0.0, "p_top": 0.75,
               "pos_grain": 1, "choice_ctx": 0, "local_frac": 0.0, "local_ctx": 1, "local_novel": False,
               "vocab": 4096, "pieces": "bpe"}
CODE_TASKS = ("humaneval", "mbpp")


def task_corpus(task: str) -> str:
    """The surrogate corpus of a task's kind: pycode for code tasks, else prose."""
    return "pycode" if task in CODE_TASKS else "prose"


def fit_prior(tasks: dict[str, tuple[dict[str, RealRun], dict[str, Any]]], mapper, out=print, rounds: int = 2,
              seeds: int = SIM_SEEDS, jobs: int = 1, start: dict[str, Any] | None = None) -> dict[str, Any]:
    """Coordinate search of the PRIOR_KNOBS shared by all `tasks` (task -> (its recorded runs, its own options: the
    draft's agreement and the corpus)), minimising the sum of their `fit_error`s on their fit prompts. Returns
    the prior's knobs (PRIOR_KNOBS and pieces)."""
    fit_real = {t: fit_real_stats(real) for t, (real, _) in tasks.items()}

    def error(o: dict[str, Any]) -> float:
        return sum(fit_error(real, fit_real[t], {**base, **o}, mapper, seeds) for t, (real, base) in tasks.items())

    grids = {k: g for k, g in FIT_GRID if k in PRIOR_KNOBS}
    return coordinate_search({**PRIOR_START, **(start or {})}, grids, error, out, rounds, 0, jobs)


def joint_grid(knobs: tuple[str, ...], grids: dict[str, tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Every combination of the knobs' grid values, those with local_frac = 0 (where the other local knobs do
    nothing) only once."""
    combos = list(itertools.product(*(grids[k] for k in knobs)))
    if knobs and knobs[0] == "local_frac":
        firsts = tuple(grids[k][0] for k in knobs[1:])
        combos = [c for c in combos if c[0] or c[1:] == firsts]
    return combos


def add_args(ap) -> None:
    ap.add_argument("--dir", required=True, help="recorded runs (simulators.realcheck --dir), or a folder of them")
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
    ap.add_argument("--knobs", default=None, help="search only these knobs (comma-separated; the others stay as "
                    "--start has them); default: all of " + ", ".join(k for k, _ in FIT_GRID))


def calibrate_main(a) -> int:
    """`python -m simulators.calibrate decisions`: fit on the fit prompts, write the profile."""
    from pathlib import Path

    from simulators.sim_profiles import check_profile_name, git_commit, load_profile, write_profile

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
        check_profile_name(a.start)
        start = load_profile(a.start)
        base = {k: start[k] for k in (knob for knob, _ in FIT_GRID) if k in start}
        earlier = start.get("fit") or {}
        start_fit = {"profile": a.start, **{k: earlier[k] for k in ("command", "commit") if k in earlier}}
    base["corpus"] = a.corpus or base.get("corpus") or task_corpus(a.task)
    real = load_real(a.dir, a.model)
    for line in unrecorded_notes(real):
        print(line)
    mapper = id_mapper(a.model, a.tokenizer)
    opts = fit_profile(real, mapper, base, rounds=a.rounds, near=a.near, jobs=a.jobs, model=a.model, knobs=knobs)
    n = len(next(iter(real.values())).results)
    fields: dict[str, Any] = {"pair": a.model, "profile": a.name}
    fields.update((k, opts[k]) for k in (knob for knob, _ in FIT_GRID) if k in opts)
    fields["prompt_tokens"] = "tokenizer"
    fit = {"pair": a.model, "task": a.task,
           "inputs": {"recorded_runs": sorted(r.replace(str(Path.home()), "~") for r in real), "prompts": n,
                      "fit_prompts": "even positions",
                      "max_new_tokens": next(iter(real.values())).budget},
           "inputs_source": "real greedy runs of the pair recorded by simulators.realcheck (traces kept in the cache "
                            "directory, not in git); no published figure is used",
           "method": "simulators.decisions.fit_profile: coordinate search of "
                     + (', '.join(knobs) if knobs else "the knobs above") + f" ({a.rounds} "
                     f"round{'s' * (a.rounds > 1)}"
                     f"{', from ' + a.start if a.start else ''}"
                     f"{'; the other knobs as it has them' if knobs and a.start else ''}"
                     f"{'; the other knobs at their defaults' if knobs and not a.start else ''}"
                     f"{f', within {a.near} grid step' + 's' * (a.near > 1) if a.near else ''}) on the fit prompts, "
                     "the surrogate "
                     f"pooled over {SIM_SEEDS} seeds, minimising squared relative errors of every run's eta, c, "
                     "#Match, hit rates and speculative's per-position acceptance",
           "command": f"python -m simulators.calibrate decisions --dir <recorded runs> --name {a.name} --task {a.task}"
                      + (f" --start {a.start}" if a.start else "") + f" --rounds {a.rounds}"
                      + (f" --near {a.near}" if a.near else "") + (f" --knobs {','.join(knobs)}" if knobs else ""),
           "commit": git_commit()}
    if start_fit:
        fit["start"] = start_fit    # the profile the search began from, and how that one was fitted
    path = write_profile(a.name, f"{a.model}, {a.task}: calibration profile (recorded real decisions)", fields, fit,
                         Path(a.out_dir) if a.out_dir else None)
    print(f"wrote {path}")
    return 0


def prior_args(ap) -> None:
    ap.add_argument("--model", default="qwen_coder", help="the real pair (conf/model/<name>.yaml)")
    ap.add_argument("--tasks", default="humaneval,gsm8k,mtbench",
                    help="tasks whose recorded runs the prior is fitted on (each with its profile's draft agreement)")
    ap.add_argument("--root", default=None, help="where the recordings are (default <cache>/decisions; one "
                                                 "<model>-<task>-<max new tokens> folder per task)")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="the recorded budget")
    ap.add_argument("--holdout", default=None, help="one of --tasks left out of the fit: its held-out prompts are "
                                                    "then scored under the prior and under the current defaults")
    ap.add_argument("--tokenizer", default=None, help="the pair's tokenizer directory (default: the fetched one)")
    ap.add_argument("--rounds", type=int, default=2, help="passes of the coordinate search (>= 1)")
    ap.add_argument("--jobs", type=int, default=1, help="processes evaluating a knob's grid values at once (>= 1)")


def prior_main(a, out=print) -> dict[str, Any]:
    """`python -m simulators.calibrate prior`: the text prior (`fit_prior`) on the tasks' recorded runs; prints the
    knobs for conf/sim/default.yaml (and simulators.pair.SIM_DEFAULTS), and each task's fit-prompt error under the
    prior and under the current defaults; with --holdout, the left-out task's held-out score under both."""
    from ouroboros.fetch import default_cache_dir
    from simulators.pair import SIM_DEFAULTS
    from simulators.sim_profiles import load_profile, pair_profiles

    if a.rounds < 1:
        raise OuroborosError(f"--rounds must be >= 1, got {a.rounds}")
    if a.jobs < 1:
        raise OuroborosError(f"--jobs must be >= 1, got {a.jobs}")
    tasks = [t for t in a.tasks.split(",") if t]
    own = pair_profiles(a.model)
    missing = [t for t in tasks if t not in own]
    if missing or not tasks:
        raise OuroborosError(f"--tasks: {a.model} has no decision profile for {', '.join(missing) or 'no task'} "
                             f"(its profiles: {', '.join(f'{k}={v}' for k, v in own.items()) or 'none'})")
    if a.holdout is not None and (a.holdout not in tasks or len(tasks) < 2):
        raise OuroborosError(f"--holdout must be one of --tasks ({', '.join(tasks)}) with another left to fit on, "
                             f"got {a.holdout!r}")
    root = a.root or str(default_cache_dir() / "decisions")
    dirs = {t: os.path.join(root, f"{a.model}-{t}-{a.max_new_tokens}") for t in tasks}
    for t, d in dirs.items():
        if not os.path.isdir(d):
            raise OuroborosError(f"no recorded runs of {t} in {d} (record them with simulators.realcheck: "
                                 "docs/simulator-fidelity.md)")
    mapper = id_mapper(a.model, a.tokenizer)
    data: dict[str, tuple[dict[str, RealRun], dict[str, Any]]] = {}
    for t in tasks:
        prof = load_profile(own[t])
        base = {k: v for k, v in prof.items() if k not in (*PRIOR_START, "fit")}
        data[t] = (load_real(dirs[t], a.model), {**base, "corpus": task_corpus(t)})
    fit_on = {t: v for t, v in data.items() if t != a.holdout}
    out(f"text prior: fitting {', '.join(PRIOR_KNOBS)} on the fit prompts of {', '.join(fit_on)} ({a.model}; each "
        "task with its own profile's draft agreement and its kind's corpus)")
    prior = fit_prior(fit_on, mapper, out, a.rounds, jobs=a.jobs)
    knobs = {k: prior[k] for k in PRIOR_START}
    defaults = {k: SIM_DEFAULTS[k] for k in knobs}
    out("prior (conf/sim/default.yaml, simulators.pair.SIM_DEFAULTS): "
        + ", ".join(f"{k}: {v}" for k, v in knobs.items()))
    result: dict[str, Any] = {"prior": knobs, "tasks": {}}
    for t, (real, base) in data.items():
        fr = fit_real_stats(real)
        e_prior, e_def = (fit_error(real, fr, {**base, **k}, mapper, SIM_SEEDS) for k in (knobs, defaults))
        line = f"{t}: fit-prompt error {e_prior:.3f} under the prior, {e_def:.3f} under the current defaults"
        row: dict[str, Any] = {"error_prior": e_prior, "error_defaults": e_def}
        if t == a.holdout:
            sc = [score(compare(real, {**base, **k}, mapper, "eval")) for k in (knobs, defaults)]
            line += (f"; held-out task, held-out prompts within target: {sc[0]['ok']}/{sc[0]['all']} under the prior, "
                     f"{sc[1]['ok']}/{sc[1]['all']} under the current defaults")
            row.update(score_prior=sc[0]["ok"], score_defaults=sc[1]["ok"], cells=sc[0]["all"])
        out(line)
        result["tasks"][t] = row
    return result


def validate_main(root: str, sim: str | None, model: str = "qwen_coder", tokenizer: str | None = None,
                  out=print) -> dict[str, Any]:
    """`python -m simulators.validate decisions`: real vs simulated statistics on the held-out prompts."""
    from simulators.sim_profiles import load_profile

    opts = load_profile(sim) if sim else {}
    opts.pop("fit", None)
    real = load_real(root, model)
    mapper = id_mapper(model, tokenizer)
    rows = compare(real, opts, mapper, "eval")
    for line in unrecorded_notes(real):
        out(line)
    out(f"held-out prompts (odd positions), sim={sim or 'default'}:")
    out(table(rows))
    sc = score(rows)
    out(f"within target (eta, c 10%; #Match, hit rates 15%): {sc['ok']}/{sc['all']}; misses: "
        + (", ".join(sc["misses"]) or "none"))
    ref = score(sampling_rows(real))
    out(f"prompt-sampling reference: the fit prompts' own REAL statistics taken as the prediction of the held-out "
        f"ones: {ref['ok']}/{ref['all']} within target (what any predictor fitted to those prompts alone can expect "
        "when the prompt sets differ); misses: " + (", ".join(ref["misses"]) or "none"))
    return {"rows": rows, "score": sc, "sampling": ref}


def sampling_rows(real: dict[str, RealRun]) -> list[dict[str, Any]]:
    """compare()'s rows with the fit prompts' real statistics in the simulator's place: how far apart the two
    prompt sets' real statistics are (a prompt-agnostic predictor fitted on one set predicts, at best, that set)."""
    rows = []
    for label, run in real.items():
        fit_pos, eval_pos = split(len(run.results))
        rows.append({"run": label, "prompts": len(eval_pos), "real": stats([run.results[i] for i in eval_pos]),
                     "sim": stats([run.results[i] for i in fit_pos])})
    return rows
