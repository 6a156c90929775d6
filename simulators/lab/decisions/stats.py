"""Decision statistics: a real pair's recorded runs against the simulator's decisions on the same prompts, per strategy.

1. Real side: runs recorded once by `python -m simulators check clock` (one folder per process: `real.jsonl` + one
   trace per run, token-level, in the cache directory, never in git). Their statistics are recomputed by replaying
   each trace on the `sim` backend with the same strategy (the same decisions, forward for forward; checked: same
   outputs, no unrecorded context), so a new surrogate is re-checked in seconds with no model loaded.
2. Simulated side: the same strategies on the surrogate, on the same prompts (each real token id mapped to a
   surrogate id as `sim.prompt_tokens=tokenizer` does, so lengths and repeats are the real ones; REST's datastore
   too), pooled over SIM_SEEDS surrogate seeds (the surrogate's expected statistics, not one noisy draw).
3. Per strategy: eta (block efficiency), c (draft tokens per draft forward), A (accepted length), #Match per
   target forward, pool / datastore hit rate by source, acceptance per draft position; side by side with the
   relative error (`compare`, `table`, `score`). Prompts are split by position: even ones fit
   (`python -m simulators calibrate decisions`: simulators/lab/decisions/fit.py), odd ones evaluate
   (`python -m simulators check decisions`: simulators/lab/decisions/check.py).

    python -m simulators check clock --strategies vanilla,speculative:gamma=4,pld --ids HumanEval/0,... \\
        --max-new-tokens 64 --dtype bfloat16 --threads 1 --hardware h100 --dir ~/.cache/ouroboros/decisions/he/a
    python -m simulators calibrate decisions --dir ~/.cache/ouroboros/decisions/he --name qwen_coder_humaneval
    python -m simulators check decisions --dir ~/.cache/ouroboros/decisions/he --sim qwen_coder_humaneval

Knows nothing of real models (the real side is traces), of fitting or of the command line.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field
from typing import Any

from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.loop.metrics import PromptResult, RunResult, pool_rates
from ouroboros.prompts.datasets import Prompt
from ouroboros.strategies import build_proposer, get_spec, is_peer
from simulators.architectures import load_conf
from simulators.pair import make_pair, sim_options, specials_eos
from simulators.replay import WARMUP_TOKENS, load_trace, replays_warmup, trace_name, trace_prompts, warm_up
from simulators.surrogate import LOOP_PERIOD, extends_loop

POSITIONS = 6                    # per-position acceptance shown for draft positions 1..POSITIONS
SIM_SEEDS = 3                    # the simulated side pools its prompt results over this many surrogate seeds: a
                                 # surrogate statistic is an expectation, not one draw of a 5-prompt x 64-token text
SIM_HARDWARE = "h100"            # decisions need no clock; any profile the pair fits on


BARE_PROMPTS = {"chat": "auto", "template": "{prompt}"}   # what `check clock --dataset <kind>` rendered before it
                                                         # took the dataset's YAML (and what those recordings used)


@dataclass
class RealRun:
    label: str
    name: str
    params: dict[str, Any]
    budget: int
    results: list[PromptResult] = field(default_factory=list)   # replayed, in recorded order per folder
    prompts: list[list[int]] = field(default_factory=list)       # real prompt ids, same order
    groups: list[int] = field(default_factory=list)              # which folder (one proposer per folder)
    categories: list[str] = field(default_factory=list)          # the prompts' dataset categories, same order
    unrecorded: dict[str, int] = field(default_factory=dict)     # prompt id -> contexts the replay asked, not recorded
    # how the recorded prompts were rendered (chat, template); recordings that do not say it used bare prompts
    prompt_format: dict[str, Any] = field(default_factory=lambda: dict(BARE_PROMPTS))
    warmup: int = WARMUP_TOKENS    # the real run's warm-up decode of its first prompt (a sweep's: the harness's)


def leaky_warmup(rec: dict[str, Any], cfg: dict[str, Any]) -> bool:
    """Whether a real sweep's record was warmed up on its measured proposer (schema 1: what that decode learnt
    stayed in a proposer that keeps state across prompts), so a replay must warm up the same way; from schema 2
    on the harness warms up on a throw-away proposer, which leaves the measured one as it was (no replay needed)."""
    return bool(cfg.get("warmup", True)) and int(rec.get("schema", 1)) < 2


def folders(root: str) -> list[str]:
    """`root` itself if it holds real.jsonl, else its sub-folders that do (one per recording process)."""
    if os.path.exists(os.path.join(root, "real.jsonl")):
        return [root]
    out = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(root, "*", "real.jsonl")))
    if not out:
        raise OuroborosError(f"no recorded runs under {root} (real.jsonl): record with `python -m simulators "
                             "check clock` first")
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
            run = runs.setdefault(label, RealRun(label, name, params, rs[0]["budget"],
                                                 prompt_format=rs[0].get("prompt_format") or dict(BARE_PROMPTS),
                                                 warmup=WARMUP_TOKENS if replays_warmup(rs[0]) else 0))
            if run.warmup:   # recorded before the harness warmed up on a throw-away proposer: as recorded
                warm_up(sim, proposer, by_id[rs[0]["prompt_id"]].ids, run.warmup)
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
                run.categories.append(p.category)
    return runs


def load_sweep(path: str, model: str = "qwen_coder", dataset: str | None = None, tokenizer_dir: str | None = None,
               prompts=None) -> dict[str, RealRun]:
    """Every real (wall-clock) greedy point of a sweep's records file (`python -m ouroboros.sweep ... out=PATH`) on the
    dataset kind `dataset` (None: the file must hold one), whose strategy the simulator runs (not vanilla, not the
    hf_* peers), as RealRuns: per prompt, the point's own `prompt_result` line (steps and pool statistics; the last
    one where a resumed point measured a prompt twice), in the sweep's prompt order; the prompts rendered again from
    the record's dataset config with the pair's tokenizer. One proposer per point over all its prompts, warmed up as
    the harness did: what a sweep runs (prompt by prompt, each point's state carried on). Points of one label from
    several sweeps (the same strategy on other `dataset.ids`) make one run, each sweep's prompts a group with its
    own proposer and warm-up, as each process had. No trace is needed: the real side's statistics are the recorded
    steps themselves. Records of another pair than `model` are refused. `prompts(dataset config, seed)`: how the
    prompts are rendered again (default: `load_prompts` with the pair's tokenizer)."""
    from ouroboros.loop.metrics import StepRecord
    from ouroboros.running.harness import WARMUP_TOKENS as SWEEP_WARMUP
    from ouroboros.running.sinks import RecordFile

    chosen = real_points(path, model, dataset,
                         lambda r: r["strategy"] != "vanilla" and not is_peer(r["strategy"]),
                         "of a simulated strategy", " (vanilla and peers do not count; a sweep still running "
                         "writes a point's record when it finishes)")
    if prompts is None:
        prompts = real_prompts(model, tokenizer_dir)
    latest = {rec["point_id"]: rec for rec in chosen}   # the last record of a point wins (a re-measured point)
    runs: dict[str, RealRun] = {}
    prompts_of: dict[str, list[Any]] = {}
    for rec in latest.values():
        cfg = rec["config"]
        key = json.dumps(cfg["dataset"], sort_keys=True)
        if key not in prompts_of:
            prompts_of[key] = prompts(cfg["dataset"], int(cfg.get("seed", 0)))
        done = RecordFile(path).finished_prompts(rec["point_id"])
        ps = [p for p in prompts_of[key] if p.id in done]
        if not ps:
            continue
        budget = int(rec["max_new_tokens"])
        fmt = {k: cfg["dataset"].get(k) for k in ("chat", "template") if k in cfg["dataset"]}
        run = runs.get(rec["label"])
        if run is None:
            run = runs[rec["label"]] = RealRun(rec["label"], rec["strategy"], dict(rec["params"]), budget,
                                               prompt_format=fmt,
                                               warmup=min(SWEEP_WARMUP, budget) if leaky_warmup(rec, cfg) else 0)
        elif (run.budget, run.prompt_format) != (budget, fmt):
            raise OuroborosError(f"--records {path!r}: {rec['label']} was measured at {run.budget} and {budget} new "
                                 "tokens or with two prompt formats; keep one budget and format per records file")
        # another sweep of the same point on other prompts (dataset.ids): its own proposer, as that process had
        group = max(run.groups, default=-1) + 1
        for p in ps:
            d = done[p.id]
            run.results.append(PromptResult(d["prompt_id"], d["prompt_len"], list(d["output"]), d["elapsed_s"],
                                            d["prefill_s"], d["stop_reason"],
                                            [StepRecord(**s) for s in d["steps"]], dict(d["proposer_stats"])))
            run.prompts.append(list(p.ids))
            run.groups.append(group)
            run.categories.append(p.category)
    return runs


def real_points(path: str, model: str, dataset: str | None, keep, what: str, why: str = "") -> list[dict[str, Any]]:
    """The records of a records file's real (wall-clock) greedy points on dataset kind `dataset` (None: the file
    must hold one) that `keep(record)` accepts; none, another pair's, or several kinds unnamed: one-line errors
    (`what` names the points wanted in the first, `why` says what does not count)."""
    from ouroboros.running.sinks import read_records

    if not os.path.isfile(path):
        raise OuroborosError(f"--records {path!r}: no such file")
    records = [r for r in read_records(path) if r.get("backend") != "sim" and not r.get("sampled")]
    kinds = sorted({r["config"]["dataset"]["kind"] for r in records})
    if dataset is None and len(kinds) > 1:
        raise OuroborosError(f"--records {path!r} holds real runs on {', '.join(kinds)}: name one with --dataset")
    on = [r for r in records if dataset is None or r["config"]["dataset"]["kind"] == dataset]
    chosen = [r for r in on if keep(r)]
    if not chosen:
        have = ", ".join(sorted({r["label"] for r in on})) or "none"
        raise OuroborosError(f"--records {path!r}: no finished real greedy point {what}"
                             + (f" on dataset {dataset!r}" if dataset else "") + (why or f" (points: {have})"))
    pair = load_conf("model", model)
    for rec in chosen:
        if not same_pair(rec["config"].get("model") or {}, pair):
            got = (rec["config"].get("model") or {}).get("kind")
            raise OuroborosError(f"--records {path!r}: point {rec['label']} ran the {got!r} pair, not --model "
                                 f"{model} ({pair.get('kind')!r}): fit and check a pair on its own records")
    return chosen


def same_pair(recorded: dict[str, Any], model: dict[str, Any]) -> bool:
    """Whether a record's model config is the pair of conf/model/<name>.yaml: the same kind, and with or without
    the draft as that YAML has it (loading options such as bf16_upcast_rows do not change decisions' source)."""
    return recorded.get("kind") == model.get("kind") and recorded.get("draft", True) == model.get("draft", True)


def real_prompts(model: str, tokenizer_dir: str | None = None):
    """(dataset config, seed) -> its prompts as a real run of the pair renders them (the pair's tokenizer)."""
    from transformers import AutoTokenizer

    from ouroboros.prompts.datasets import load_prompts
    from simulators.tokens import real_tokenizer_dir

    tok = AutoTokenizer.from_pretrained(str(real_tokenizer_dir(tokenizer_dir, load_conf("model", model))))
    return lambda dataset, seed: load_prompts(dataset, tok, None, seed)


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


def repeat_share(outputs: list[list[int]]) -> float:
    """The share of output tokens that start or continue a third back-to-back copy of a span of up to LOOP_PERIOD
    tokens (what sim.loop_guard never writes; a real LM's greedy text rarely does: docs/simulator.md)."""
    n = sum(len(o) for o in outputs)
    hits = sum(extends_loop(tuple(reversed(o[max(0, i - 3 * LOOP_PERIOD): i])), o[i])
               for o in outputs for i in range(1, len(o)))
    return hits / n if n else 0.0


def self_repeat(outputs: list[list[int]], n: int = 8) -> float:
    """The share of each output's n-grams that occurred earlier in the same output (how much a text repeats itself;
    back-to-back loops are `repeat_share`'s)."""
    seen_all = hits = 0
    for o in outputs:
        seen: set[tuple[int, ...]] = set()
        for i in range(len(o) - n + 1):
            g = tuple(o[i:i + n])
            hits += g in seen
            seen.add(g)
            seen_all += 1
    return hits / seen_all if seen_all else 0.0


def cross_share(outputs: list[list[int]], n: int = 4, chunk: int | None = None) -> float:
    """The share of each output's n-grams that occurred in an earlier output of its run (how much answers to
    different prompts share their text: what suffix's global tree of earlier outputs drafts from). `chunk`: the
    outputs are consecutive runs of that many (pooled surrogate seeds), each its own run."""
    hits = tot = 0
    size = chunk or len(outputs) or 1
    for start in range(0, len(outputs), size):
        seen: set[tuple[int, ...]] = set()
        for o in outputs[start: start + size]:
            grams = [tuple(o[i:i + n]) for i in range(len(o) - n + 1)]
            hits += sum(g in seen for g in grams)
            tot += len(grams)
            seen.update(grams)
    return hits / tot if tot else 0.0


def prompt_share(prompts: list[list[int]], outputs: list[list[int]], n: int = 8) -> float:
    """The share of the outputs' n-grams that occur in their own prompt (how much an output copies its prompt)."""
    hits = tot = 0
    for p, o in zip(prompts, outputs, strict=True):
        have = {tuple(p[i:i + n]) for i in range(len(p) - n + 1)}
        for i in range(len(o) - n + 1):
            hits += tuple(o[i:i + n]) in have
            tot += 1
    return hits / tot if tot else 0.0


def text_stats(results: list[PromptResult], prompts: list[list[int]] | None = None,
               chunk: int | None = None) -> dict[str, float]:
    """How much the outputs repeat themselves and (given their `prompts`, in order) copy their prompts (shown beside
    the decision statistics, never fitted)."""
    outputs = [r.output for r in results]
    if not outputs:
        return {}
    out = {"repeat": repeat_share(outputs), "self8": self_repeat(outputs), "cross4": cross_share(outputs, chunk=chunk)}
    if prompts is not None:
        out["prompt8"] = prompt_share(prompts, outputs)
    return out


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
    # what the clock charges per step besides eta: draft-model forwards and the target forward's width (tokens)
    steps = [s for r in results for s in r.steps]
    if steps:
        if tot["draft_forwards"]:
            out["dfw"] = tot["draft_forwards"] / len(steps)
        out["width"] = sum(s.target_tokens for s in steps) / len(steps)
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
                seed: int = 0, prompts: list[list[int]] | None = None) -> list[PromptResult]:
    """The run's strategy on the surrogate over the prompts at positions `which` (one proposer per recording
    folder, in recorded order, as the real run had). `mapper(surrogate tokenizer)` -> real id -> surrogate id.
    `prompts`: a list the prompts' surrogate ids are appended to (in the results' order)."""
    opts = {**sim_opts, "prompt_tokens": "surrogate"}  # prompts come as real ids, mapped by `mapper`
    pair = make_pair(load_conf("model", model), load_conf("hardware", SIM_HARDWARE), opts, seed=seed)
    real_ids = pair.tokenizer.real_ids  # sim.pieces=real: the surrogate speaks the real ids, nothing to map
    map_id = int if real_ids else mapper(pair.tokenizer, specials_eos(sim_options(opts)))
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
            if run.warmup:
                warm_up(pair, proposers[g], [map_id(t) for t in run.prompts[first]], run.warmup)
        ids = [map_id(t) for t in run.prompts[i]]
        if pair.by_category and i < len(run.categories):   # sim.by_category: the prompt's category profile
            pair.route([Prompt(run.results[i].prompt_id, ids, None, run.categories[i])])
        if prompts is not None:
            prompts.append(ids)
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

    from ouroboros.strategies.datastore import SEP, Datastore

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
    the pair's tokenizer; one map per surrogate vocabulary and special-token rule: `specials_eos` as
    `RealCountTokenizer`'s)."""
    from transformers import AutoTokenizer

    from simulators.tokens import RealCountTokenizer, fetched_tokenizer_dir

    real = AutoTokenizer.from_pretrained(tokenizer_dir or str(fetched_tokenizer_dir(load_conf("model", model))))
    maps: dict[tuple[int, bool], Any] = {}

    def mapper(surrogate, specials_eos: bool = False):
        key = (id(surrogate), specials_eos)
        if key not in maps:
            maps[key] = IdMap(RealCountTokenizer(surrogate, real, specials_eos))
        return maps[key]

    return mapper


def sim_pooled(run: RealRun, which: list[int], sim_opts: dict[str, Any], mapper, seeds: int = SIM_SEEDS,
               prompts: list[list[int]] | None = None) -> list[PromptResult]:
    """`sim_results` over surrogate seeds 0..seeds-1, pooled (each seed is another surrogate text and draft);
    `prompts` as `sim_results`'."""
    return [r for seed in range(seeds) for r in sim_results(run, which, sim_opts, mapper, seed=seed, prompts=prompts)]


def compare(real: dict[str, RealRun], sim_opts: dict[str, Any], mapper, which: str = "eval",
            seeds: int = SIM_SEEDS) -> list[dict[str, Any]]:
    rows = []
    for label, run in real.items():
        fit_pos, eval_pos = split(len(run.results))
        pos = {"eval": eval_pos, "fit": fit_pos}.get(which, list(range(len(run.results))))   # "all": every prompt
        sim_prompts: list[list[int]] = []
        real_res, sim_res = [run.results[i] for i in pos], sim_pooled(run, pos, sim_opts, mapper, seeds, sim_prompts)
        r = {**stats(real_res), **text_stats(real_res, [run.prompts[i] for i in pos])}
        s = {**stats(sim_res), **text_stats(sim_res, sim_prompts, chunk=len(pos))}
        rows.append({"run": label, "strategy": run.name, "prompts": len(pos), "real": r, "sim": s})
    return rows


def rel(s: float | None, r: float | None) -> float | None:
    if s is None or r is None or r == 0:
        return None
    return s / r - 1


def table(rows: list[dict[str, Any]]) -> str:
    lines = []
    for row in rows:
        r, s = row["real"], row["sim"]
        keys = [k for k in ("eta", "c", "A", "match", "dfw", "width") if k in r] + \
            sorted(k for k in r if k.startswith("hit:")) + [k for k in r if k.startswith("pos")]
        cells = []
        for k in keys:
            e = rel(s.get(k), r[k])
            cells.append(f"{k} {r[k]:.2f}/{s.get(k, float('nan')):.2f}" + (f" ({e:+.0%})" if e is not None else ""))
        for k in ("repeat", "self8", "prompt8", "cross4"):   # shares near 0: shown as they are, not as relative errors
            if k in r:
                cells.append(f"{k} {r[k]:.3f}/{s.get(k, float('nan')):.3f}")
        lines.append(f"{row['run']} [{row['prompts']} prompts, real/sim]: " + "; ".join(cells))
    return "\n".join(lines)


def floor_lines(rows: list[dict[str, Any]], task: str | None) -> list[str]:
    """How far each row's eta error is from the prompt floor (trust.floor_for: how far that many real prompts' eta
    stray from the task's, 80% quantile): an error within it is what any predictor that does not know these prompts
    can expect one time in five or more; one beyond it is the simulator's own. No line where no floor was measured."""
    from simulators.trust import floor_for

    within: list[str] = []
    beyond: list[str] = []
    cells: list[str] = []
    for row in rows:
        fl = floor_for(task, str(row.get("strategy", "")), int(row["prompts"])).get("block_efficiency")
        e = rel(row["sim"].get("eta"), row["real"].get("eta"))
        if fl is None or e is None:
            continue
        k, v = fl
        cells.append(f"{row['run']} {e:+.0%} / {v:.0%}" + (f" (at {k})" if k != row["prompts"] else ""))
        (within if abs(e) <= v else beyond).append(row["run"])
    if not cells:
        return []
    return [f"eta error / prompt floor (how far that many real {task} prompts' eta stray from the task's, 80%; "
            f"conf/calibration/prompt_floor.yaml): " + ", ".join(cells),
            f"beyond the floor (the simulator's own error): {', '.join(beyond) or 'none'}; within it (not told apart "
            f"from which prompts were drawn): {', '.join(within) or 'none'}"]


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
