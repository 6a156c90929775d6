"""Surrogate language models: fast, deterministic stand-ins for a target p and a draft q.

A `TokenModel` decides the greedy next token of a context. It is incremental so trees are cheap to score:
`start()` -> the state of the empty context, `step(state, token)` -> the state after one more token,
`predict(state)` -> the next token. The target's states are `LMState` named tuples (position, tail = the last
TAIL_LEN tokens, and the slots its copying, surprise and forgiving knobs need).

- `NGramLM` (the surrogate target): a back-off n-gram table (orders 1..`order`) built from an embedded
  corpus (simulators/corpus.py: Python standard-library source for "code", the interpreter's own help topics
  for "prose"; no download). The greedy choice is the table's top continuation of the longest known suffix,
  replaced by a runner-up when a hash of the position and the last TAIL_LEN tokens says so, so the text is varied
  and repeats common phrases (as code does); with `sim.loop_guard` it never writes a span three times back to
  back (`extends_loop`: a real LM's greedy text does not cycle), and with `sim.self_guard` never an 8-gram its output
  already holds unless its prompt does (`repeats_output`: nor does it write its own text again). Optionally
  (`p_copy`) it copies from its own context as real LMs do (with `sim.copy_from=prompt`: from its prompt only): what
  followed the last two tokens the last time (simulators/lab/copyrate.py
  measures how often real text does). Its varied choices (runner-up, copy) hash the position and the tail;
  `pos_grain` > 1 hashes the position only in blocks of that many tokens and `choice_ctx` only the last few tail
  tokens, so it continues a phrase the same way a few tokens later or after a wrong earlier token, as a real LM
  (nearly position-invariant, mostly local) does: what lookahead's Jacobi guesses and phrase pools rely on.
- `NoisyDraftLM` (the surrogate draft): agrees with the target unless a mismatch event fires. Events are
  bursty (positions fall into easy / hard stretches of `burst_len` tokens with agreement `alpha_easy` /
  `alpha_hard`; which are hard is each prompt's own, by its key from `begin`), content-bound (the same local
  context is always right or always wrong, as a real small model is) and realistic in kind (the target's
  runner-up, or a token one place too early).
- `IIDDraftLM`: agrees with the target with probability `alpha` independently at every position (for
  Leviathan et al.'s closed form E = (1 - alpha^(gamma + 1)) / (1 - alpha)).

The text depends on the Python version's standard library (the corpus), not on PYTHONHASHSEED (only int
tuples are hashed). This module knows nothing of clocks, costs or strategies.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, NamedTuple, Protocol

from simulators.corpus import load_corpus, ngram_table, prompt_starts
from simulators.simconfig import P_SHIFT, TAIL_LEN, SimConfig

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_INV53 = 1.0 / (1 << 53)


def uniform(h: int) -> float:
    """A float in [0, 1) from a hash (Python's tuple hash is already xxHash-mixed; one Fibonacci multiply
    spreads it to the top bits)."""
    return (((h * _GOLDEN) & _MASK64) >> 11) * _INV53


class TokenModel(Protocol):
    vocab_size: int

    def start(self) -> Any: ...
    def step(self, state: Any, token: int) -> Any: ...
    def predict(self, state: Any) -> int: ...


INDUCTION_MAX = 16  # longest suffix match match-length copying looks for (tokens)
FORGIVE_CTX = 3     # tail tokens (with the wrong token) that decide whether the target reads past it (sim.forgive)
SURPRISE_MAX = 4    # steps after a token the target would not have written at which copying counts as recovered
RANK_FILL = 32      # common tokens that fill a simulated forward's top-k after the contexts' continuations (ranked)
TOP = 3             # continuations the back-off table keeps per context (the top one and two runner-ups)
CONTENT_LEN = 3     # last tokens that decide whether the draft agrees (content-bound mismatches)
# A real LM's greedy text does not cycle. Of the real Qwen2.5-Coder pair's greedy 128-token tokens, 0.5% (HumanEval,
# 46 outputs) and 0.1% (MT-Bench, 30) start or continue a third back-to-back copy of a span of up to 16 tokens (the
# same shares for spans up to 64 or 128); one multi-turn output of 10 looped. The surrogate's short contexts
# re-decide a recurring context the same way (copying, position-blocked choices): without a guard 54% of its
# HumanEval tokens did (HumanEval/0-23), 3.7% of its MT-Bench ones. With sim.loop_guard it never writes a third copy
# (LOOP_EXCESS 1: none of its tokens; allowing a third copy's first token, LOOP_EXCESS 2, left 4.0%). Spans of up
# to 64 tokens (LOOP_PERIOD 64) fitted the HumanEval recordings worse (docs/simulator.md).
# `repeat_share` in simulators/lab/decisions/stats.py measures it.
LOOP_PERIOD = 16
LOOP_EXCESS = 1
# Nor does it write its own text again: of the real pair's greedy output 8-grams, none (HumanEval, 36 outputs) and
# 0.9% (MT-Bench, 30) occur earlier in the same output without occurring in the prompt; of the surrogate's, 31-60% and
# 3-4% did (two seeds), as its position-invariant copying re-entered text it had copied or written (periods longer
# than LOOP_PERIOD). With sim.self_guard it never writes an 8-gram its output already holds (unless its prompt does).
SELF_N = 8

# Hash salts: each of the surrogates' independent decisions hashes its inputs with its own salt, so no two of them
# are correlated (the runner-up pick hashes (choice key, seed) with none).
SALT_SHIFT = 3         # draft: a mismatch is one token too early, or the runner-up
SALT_HARD = 7          # draft: a stretch is hard
SALT_COPY = 11         # target: copy what followed the last two tokens (p_copy)
SALT_LOCAL = 13        # target: the last local_ctx tokens alone decide this context (local_frac)
SALT_LOCAL_PICK = 17   # target: ... and which of their continuations
SALT_INDUCTION = 19    # target: continue the longest earlier match (induction)
SALT_COPY_AGREES = 23  # draft: agrees where the target copies (alpha_copy)
SALT_FORGIVE = 29      # target: reads a token it would not have written as its own (forgive)
SALT_RECALL = 31       # target: goes on with text it knows (recall)
SALT_TOPIC = 37        # target: goes on as its topic passage does (topic); with the prompt: which passage
SALT_PROMPT = 41       # a prompt's own key (`begin`): the draft's hard stretches are per prompt


# The plain n-gram target: the text prior's copying, locality and position-invariance off, in the surrogate's own
# word pieces: what simulators/lab/copyrate.py compares real text with, and the tests' baseline
# (`plain_config(**knobs)`).
PLAIN_TEXT: dict[str, Any] = {"vocab": 4096, "pieces": "words", "p_copy": 0.0, "induction": 0.0, "pos_grain": 1,
                              "choice_ctx": 0, "local_frac": 0.0, "local_ctx": 1}


def plain_config(**knobs: Any) -> SimConfig:
    return SimConfig(**{**PLAIN_TEXT, **knobs})


class LMState(NamedTuple):
    """The surrogate target's state after a context (both its paths build the same ones)."""
    pos: int                         # tokens so far
    tail: tuple[int, ...]            # the last TAIL_LEN tokens as the target reads them (forgive: its own there)
    window: tuple[int, ...] = ()     # the last copy_window tokens as written, the last first (only when copying)
    calm: int = SURPRISE_MAX         # steps since a token it would not have written (capped; only surprise_copy < 1)
    run: int = 0                     # tokens it would have written, in a row (capped at forgive_run; only forgiving)
    origin: int = 0                  # the prompt's length (`begin`; sim.copy_from=prompt copies from tokens before it)
    topic: int = -1                  # where its topic passage starts in the corpus (`begin`, sim.topic; -1: none)
    key: int = 0                     # the prompt's own key (`begin`; 0: none): which stretches are hard for the draft


def prompt_key(prompt: Sequence[int]) -> int:
    """A prompt's own key (never 0, which means none): its tokens hashed (ints only: not PYTHONHASHSEED's)."""
    return (hash((tuple(prompt), SALT_PROMPT)) & _MASK64) or 1


_new_state = tuple.__new__   # LMState(...) without the NamedTuple constructor's overhead (the hot paths)
_START = LMState(0, ())


def longest_match(window: tuple[int, ...], cap: int, lo: int = 0) -> tuple[int, int]:
    """(L, token): the longest suffix of the context (`window` reversed: the last token first) that occurred
    earlier in it, L tokens long (at most `cap`), and the token that followed its most recent such occurrence;
    (0, -1) when the last token never occurred before. Ties: the most recent occurrence. `lo` > 0: only
    occurrences whose following token is at least `lo` tokens back (`window[lo:]`: the prompt, sim.copy_from).

    Golden: context [5, 6, 7, 5, 6] (window (6, 5, 7, 6, 5)) -> (2, 7): "5 6" occurred before, followed by 7."""
    if len(window) < 2:
        return 0, -1
    x = window[0]
    best, tok, j, end = 0, -1, lo, len(window)
    index = window.index
    while True:
        try:
            j = index(x, j + 1)
        except ValueError:
            return best, tok
        n = 1
        while n < cap and j + n < end and window[j + n] == window[n]:
            n += 1
        if n > best:
            best, tok = n, window[j - 1]
            if n == cap:
                return best, tok


def extends_loop(window: tuple[int, ...], token: int) -> bool:
    """Whether `token` after the context (`window` reversed: the last token first) would continue a span of p <=
    LOOP_PERIOD tokens repeated back to back LOOP_EXCESS tokens past its second copy (with LOOP_EXCESS 1: start a
    third copy); only spans whose two copies the window holds (p <= copy_window / 2) are seen.

    Golden: after 1 2 1 (window (1, 2, 1)) the token 2 completes a second copy of "1 2": no loop; after 1 2 1 2
    (window (2, 1, 2, 1)) the token 1 would start a third: a loop."""
    head = window[:LOOP_PERIOD]
    if token not in head:
        return False
    n, j = len(window), -1
    while True:
        try:
            j = head.index(token, j + 1)
        except ValueError:
            return False
        p = j + 1                      # the token p places back equals this one
        need = p + LOOP_EXCESS - 1     # the earlier tokens that must repeat with period p too
        if need + p > n:
            continue
        k = 0
        while k < need and window[k] == window[k + p]:
            k += 1
        if k == need:
            return True


def repeats_output(window: tuple[int, ...], token: int, out: int) -> bool:
    """Whether `token` after the context (`window` reversed: the last token first) would end an n-gram (n = SELF_N)
    that already ends at one of the last `out` tokens (the output so far) and nowhere before them (the prompt's own
    n-grams an output may write again: a real LM restates its prompt, repeats included).

    Golden (SELF_N 8): after 1..8 9 1..7 (out 16) the token 8 ends "1..8" a second time: a repeat."""
    m = SELF_N - 1
    if len(window) < SELF_N:
        return False
    tail, index, j, mine = window[:m], window.index, -1, False
    while True:
        try:
            j = index(token, j + 1)
        except ValueError:
            return mine
        if window[j + 1: j + SELF_N] == tail:
            if j >= out:
                return False   # the prompt holds it
            mine = True


class NGramLM:
    """Back-off n-gram greedy LM configured by the text prior of a `SimConfig` (its fields' docs say what each
    knob models). `p_top`: how often the table's top continuation is taken (else a runner-up, chosen by a hash of
    the position and the tail). `p_copy` (induction, as real LMs copy from their context): how often, when the
    last two tokens occurred before within the last `copy_window` tokens, the token that followed their most recent
    occurrence is taken instead (decided by the same kind of hash).

    `induction` > 0 (match-length copying, checked first): the longest suffix of the context that occurred
    before within the window (L tokens, up to INDUCTION_MAX) is continued as its most recent occurrence was, with
    probability p(L) = 1 - (1 - induction) * induction_decay^(L - 1), decided by a hash of the matched suffix
    alone (not the position): a real LM copies after a single matching token sometimes and almost surely once a
    long span matches, and it copies the same way when earlier tokens are garbled (lookahead's Jacobi cells).
    `surprise_copy` < 1: right after a token the target would not have written itself (a draft's wrong guess, a
    Jacobi cell) it copies a match of L >= 2 tokens less, p(L) * (1 - (1 - surprise_copy) / 2^k) k steps later.
    `forgive` > 0: after at least `forgive_run` tokens it would have written itself, it reads a token it would not
    have written as its own one with that probability (a hash of the last FORGIVE_CTX tail tokens and the token):
    its tail then holds its own token, so it goes on as it would have; the copy window keeps the token as written.
    `recall` > 0 with a `memory` (a REST datastore in the surrogate's ids, `ouroboros.strategies.datastore.Datastore`):
    right
    after a token it would not have written, where its last >= `recall_min` tokens occur in the memory, it takes
    the memory's most frequent continuation of its longest matching suffix with that probability (checked first);
    a token so recalled keeps the run of own tokens at 0: it is reading known text, not writing its own.

    Two paths give the same answers: `reference_step` / `reference_predict` (plain, read these) and the closures
    `step` / `predict` (the hot paths, memoised and specialised to the knobs that are on), property-tested equal
    over random configurations (tests/test_sim_fast_paths.py)."""

    def __init__(self, cfg: SimConfig | None = None, seed: int = 0, memory: Any = None,
                 tokenizer_dir: str | None = None):
        c = self.cfg = cfg or SimConfig()
        self.seed, self.p_top, self.order, self.tail_len = seed, c.p_top, c.order, TAIL_LEN
        self.p_copy, self.pos_grain, self.copy_window = c.p_copy, c.pos_grain, c.copy_window
        self.forgive, self.forgive_run = c.forgive, c.forgive_run
        self.recall, self.recall_min, self.memory = c.recall, c.recall_min, memory
        self.recalling = self.recall > 0 and memory is not None
        self._recalled: dict[tuple[int, ...], int | None] = {}  # tail -> the memory's continuation (None: none)
        self.forgiving = self.forgive > 0 or self.recalling      # states count the run of own tokens
        self.induction, self.induction_decay = c.induction, c.induction_decay
        # p(L) for L = 1..INDUCTION_MAX: the chance that a suffix match of L tokens is copied
        self.induction_p = tuple(1 - (1 - c.induction) * c.induction_decay ** (n - 1)
                                 for n in range(1, INDUCTION_MAX + 1))
        self.local_frac, self.local_ctx = c.local_frac, c.local_ctx
        self.local_novel = c.local_novel and c.local_frac > 0
        self.loop_guard, self.self_guard = c.loop_guard, c.self_guard
        self.guarded = c.loop_guard or c.self_guard
        self.topic, self.topic_len = c.topic, c.topic_len
        self._topics: dict[int, dict[tuple[int, ...], int]] = {}   # passage start -> its table (topic_table)
        self.from_prompt = c.copy_from == "prompt"
        self.windowed = bool(c.p_copy or c.induction or self.local_novel)  # states carry the window
        self.surprised = bool(c.induction) and c.surprise_copy < 1        # states count calm steps
        self.surprise_copy = c.surprise_copy
        self.surprise_s = tuple(1 - (1 - c.surprise_copy) / 2**k for k in range(SURPRISE_MAX + 1))
        self.choice_ctx = c.choice_ctx or TAIL_LEN
        if c.pieces != "real":
            tokenizer_dir = None  # the surrogate's own pieces: no real tokenizer involved
        self.corpus = load_corpus(c.corpus, c.vocab, c.pieces, tokenizer_dir)
        self.vocab_size = self.corpus.tokenizer.vocab_size
        self.plain_vocab = self.corpus.tokenizer.plain_vocab  # ids 1..plain_vocab - 1: ordinary tokens
        self.eos_id = self.corpus.tokenizer.eos_id             # never copied (copy_from=prompt maps specials to it)
        self.table = ngram_table(c.corpus, c.vocab, c.order, TOP, c.pieces, tokenizer_dir)
        self._corpus_key = (c.corpus, c.vocab, c.pieces, tokenizer_dir)
        self._backoff: dict[tuple[int, ...], tuple[int, ...]] = {}  # last `order` tokens -> candidates (() = none)
        self._frequent: tuple[int, ...] | None = None
        self.step: Callable[[LMState, int], LMState] = self._fast_step()
        self.predict: Callable[[LMState], int] = self._fast_predict()

    def start(self) -> LMState:
        return _START

    def begin(self, state: LMState, prompt: Sequence[int] = ()) -> LMState:
        """The state after a prompt, marked as its end: what follows is the target's own output (sim.copy_from),
        keyed by the prompt's tokens (the draft's hard stretches are the prompt's own, not every prompt's at the
        same positions); with sim.topic, the answer's topic passage, picked by the prompt's tokens (and the seed)."""
        key = prompt_key(prompt)
        if not self.topic:
            return state._replace(origin=state.pos, key=key)
        u = uniform(hash((tuple(prompt), self.seed, SALT_TOPIC)))
        return state._replace(origin=state.pos, key=key,
                              topic=int(u * (len(self.corpus.ids) - self.topic_len + 1)))

    def topic_table(self, start: int) -> dict[tuple[int, ...], int]:
        """The passage of topic_len corpus tokens at `start` as a back-off table: each context of 1..order tokens
        -> its most frequent next ordinary token in the passage (ties: the first seen). The last few are kept."""
        got = self._topics.get(start)
        if got is None:
            ids = self.corpus.ids[start: start + self.topic_len]
            plain, eos, got = self.plain_vocab, self.eos_id, {}
            for n in range(1, self.order + 1):
                counts = Counter(g for g in zip(*(ids[i:] for i in range(n + 1)), strict=False)
                                 if 0 < g[-1] < plain and g[-1] != eos)
                for g, _ in sorted(counts.items(), key=itemgetter(1), reverse=True):  # ties: first seen first
                    got.setdefault(g[:-1], g[-1])
            if len(self._topics) >= 64:
                self._topics.clear()
            self._topics[start] = got
        return got

    def topical(self, state: LMState, key: tuple[Any, ...]) -> int | None:
        """The token its topic passage goes on with after the tail's longest suffix it holds (up to `order`
        tokens), where the coin (sim.topic, a hash of the choice key) says so; None: no passage (no `begin`, or
        topic off), the coin says no, or the passage holds not even the last token."""
        if state.topic < 0 or uniform(hash((key, self.seed, SALT_TOPIC))) >= self.topic:
            return None
        table, tail = self.topic_table(state.topic), state.tail
        for n in range(min(self.order, len(tail)), 0, -1):
            c = table.get(tail[-n:])
            if c is not None:
                return c
        return None

    def copy_lo(self, state: LMState) -> int:
        """How far back (in `window`) the tokens a copy may take start: 0 (anywhere), or with sim.copy_from=prompt
        past the output so far (the prompt's; none when no prompt was marked by `begin`)."""
        return state.pos - state.origin if self.from_prompt else 0

    # ------------------------------------------------------------------------------------- the plain path
    def reference_step(self, state: LMState, token: int) -> LMState:
        own = self.reference_predict(state) if self.surprised or self.forgiving else token
        read, run = token, state.run
        if self.forgiving:  # its own token, or one it reads as its own, lengthens the run; any other ends it
            if token == own and self.recalled(state) is not None:
                run = 0  # a token it recalled: it is still reading known text, not writing its own
            elif token == own or self.forgiven(state, token):
                read, run = own, min(state.run + 1, self.forgive_run)
            else:
                run = 0
        tail = (state.tail + (read,))[-TAIL_LEN:]
        window = ((token,) + state.window)[:self.copy_window] if self.windowed else ()
        calm = (0 if read != own else min(state.calm + 1, SURPRISE_MAX)) if self.surprised else state.calm
        return LMState(state.pos + 1, tail, window, calm, run, state.origin, state.topic, state.key)

    def reference_predict(self, state: LMState) -> int:
        r = self.recalled(state)
        if r is not None:
            return r
        c = self.induced(state)
        if c is not None:
            return c
        return self.reference_rest(state)

    def reference_rest(self, state: LMState) -> int:
        """The prediction when recall and match-length copying do not fire (never one that extends a loop)."""
        return self.unlooped(state, self._rest_choice(state))

    def refused(self, state: LMState, token: int) -> bool:
        """Whether the guards refuse `token` at `state`: it would extend a loop (sim.loop_guard, `extends_loop`) or
        repeat the output's own text (sim.self_guard, `repeats_output`)."""
        w = state.window
        return bool(w) and ((self.loop_guard and extends_loop(w, token)) or
                            (self.self_guard and repeats_output(w, token, state.pos - state.origin)))

    def unlooped(self, state: LMState, token: int) -> int:
        """`token`, or where the guards refuse it (`refused`), the first of the tail's `ranked` continuations that
        they do not."""
        if not self.guarded or not self.refused(state, token):
            return token
        for r in self.ranked(state.tail):
            if r != token and 0 < r < self.plain_vocab and not self.refused(state, r):
                return r
        return token

    def _rest_choice(self, state: LMState) -> int:
        if self.local_frac:
            lk = state.tail[-self.local_ctx:]
            if lk and uniform(hash((lk, self.seed, SALT_LOCAL))) < self.local_frac and not (
                    self.local_novel and longest_match(state.window, len(lk))[0] == len(lk)):
                return self.pick(self.candidates(lk), uniform(hash((lk, self.seed, SALT_LOCAL_PICK))))
        key = self.choice_key(state)
        if self.p_copy and uniform(hash((key, self.seed, SALT_COPY))) < self.p_copy:
            c = self.copied(state.window, self.copy_lo(state))
            if c is not None and c < self.plain_vocab and c != self.eos_id:
                return c
        if self.topic:
            t = self.topical(state, key)
            if t is not None:
                return t
        return self.pick(self.candidates(state.tail), uniform(hash((key, self.seed))))

    def forgiven(self, state: LMState, token: int) -> bool:
        """Whether the target reads `token` (one it would not have written at `state`) as its own (see forgive)."""
        return state.run >= self.forgive_run and \
            uniform(hash((state.tail[-FORGIVE_CTX:], token, self.seed, SALT_FORGIVE))) < self.forgive

    def induced(self, state: LMState) -> int | None:
        """The token match-length copying takes at this state (see the class doc), or None (no match, the coin
        says no, or the copy would be a special token)."""
        if not self.induction:
            return None
        n, tok = longest_match(state.window, INDUCTION_MAX, self.copy_lo(state))
        if not n or tok >= self.plain_vocab or tok == self.eos_id:
            return None
        p = self.induction_p[n - 1]
        if self.surprised and n > 1:  # a lone surprising token is still continued as it was before
            p *= self.surprise_s[state.calm]
        if uniform(hash((state.window[:n], self.seed, SALT_INDUCTION))) < p and not (
                self.guarded and self.refused(state, tok)):
            return tok
        return None

    @staticmethod
    def copied(window: tuple[int, ...], lo: int = 0) -> int | None:
        """The token after the most recent earlier occurrence of the last two tokens (`window` reversed: the last
        token first), or None; `lo` as `longest_match`'s."""
        if len(window) < 3:
            return None
        x, y = window[0], window[1]
        j = lo
        while True:
            try:
                j = window.index(x, j + 1)
            except ValueError:
                return None
            if j + 1 < len(window) and window[j + 1] == y:
                return window[j - 1]

    def candidates(self, tail: tuple[int, ...]) -> tuple[int, ...]:
        table = self.table
        for n in range(min(self.order, len(tail)), 0, -1):
            c = table.get(tail[-n:])
            if c:
                return c
        return (int(uniform(hash((tail, self.seed))) * (self.plain_vocab - 1)) + 1,)

    def ranked(self, tail: tuple[int, ...]) -> list[int]:
        """The continuations a real LM's top-k holds after this tail, best first: the longest matching context's
        (what `candidates` gives), then each shorter context's that are not yet listed, down to the last token's.
        A real model's runner-ups are the plausible next tokens of its shorter contexts too, not only of the one
        it decides on (Token Recycling reads them: docs/simulator.md). Then the corpus' most frequent tokens: a real
        top-k is always full, so a Token Recycling row holds k candidates and its tree is as wide as a real one's."""
        table, out = self.table, []
        for n in range(min(self.order, len(tail)), 0, -1):
            out += [c for c in table.get(tail[-n:], ()) if c not in out]
        out = out or list(self.candidates(tail))
        # a real forward's top-k is always full (k of a whole vocabulary): the rest of it are common tokens
        return out + [c for c in self.frequent if c not in out]

    @property
    def frequent(self) -> tuple[int, ...]:
        """The corpus' RANK_FILL most frequent ordinary tokens, most frequent first: the tail of `ranked`."""
        if self._frequent is None:
            counts = Counter(t for t in self.corpus.ids if 0 < t < self.plain_vocab)
            self._frequent = tuple(t for t, _ in counts.most_common(RANK_FILL))
        return self._frequent

    def choice_key(self, state: LMState) -> tuple[Any, ...]:
        """What the varied choices (copy or not, which runner-up) hash: the position (in blocks of `pos_grain`
        tokens) and the tail (its last `choice_ctx` tokens)."""
        g, c = self.pos_grain, self.choice_ctx
        if g == 1 and c == TAIL_LEN:
            return (state.pos, state.tail)
        return (state.pos // g, state.tail[-c:])

    def pick(self, cands: tuple[int, ...], u: float) -> int:
        """The top continuation with probability p_top (u < p_top), else a runner-up chosen by u."""
        if u < self.p_top or len(cands) == 1:
            return cands[0]
        return cands[1 + min(int((u - self.p_top) / (1 - self.p_top) * (len(cands) - 1)), len(cands) - 2)]

    def recalled(self, state: LMState) -> int | None:
        """The token the memory continues the context with at this state (see recall), or None (not right after a
        token the target would not have written, the coin says no, no match of recall_min tokens, or a special
        token)."""
        if not self.recalling or state.run or not state.pos:
            return None
        tail, m = state.tail, self.recall_min
        if len(tail) < m or uniform(hash((tail[-m:], self.seed, SALT_RECALL))) >= self.recall:
            return None
        if tail not in self._recalled:
            if len(self._recalled) > 100_000:
                self._recalled.clear()
            firsts = [c[0] for c in self.memory.continuations(list(tail), len(tail), m, 1, 64) if c]
            tok = Counter(firsts).most_common(1)[0][0] if firsts else None  # ties: the first seen
            self._recalled[tail] = tok if tok is not None and 0 < tok < self.plain_vocab else None
        return self._recalled[tail]

    # ------------------------------------------------------------------------------------- the hot paths
    def _fast_step(self) -> Callable[[LMState, int], LMState]:
        """`reference_step`, specialised to the knobs that are on."""
        if self.forgiving:
            self._memo: dict[int, tuple[LMState, int]] = {}
            return self._forgiving_step()
        new, cls, top, calm0, win = _new_state, LMState, SURPRISE_MAX, SURPRISE_MAX, self.copy_window
        if self.surprised:
            def step_surprise(state: LMState, token: int) -> LMState:
                k = 0 if token != self.predict(state) else min(state.calm + 1, top)
                return new(cls, (state.pos + 1, (state.tail + (token,))[-TAIL_LEN:],
                                 ((token,) + state.window)[:win], k, 0, state.origin, state.topic, state.key))

            return step_surprise
        if self.windowed:
            def step_window(state: LMState, token: int) -> LMState:
                return new(cls, (state.pos + 1, (state.tail + (token,))[-TAIL_LEN:],
                                 ((token,) + state.window)[:win], calm0, 0, state.origin, state.topic,
                                 state.key))

            return step_window

        def step(state: LMState, token: int) -> LMState:
            return new(cls, (state.pos + 1, (state.tail + (token,))[-TAIL_LEN:], (), calm0, 0, state.origin,
                             state.topic, state.key))

        return step

    def _forgiving_step(self) -> Callable[[LMState, int], LMState]:
        """`reference_step` with sim.forgive (or recall) on."""
        need, r, seed, fcut = self.forgive_run, self.forgive, self.seed, -FORGIVE_CTX
        mult, mask, scale = _GOLDEN, _MASK64, _INV53
        surprised, windowed, top = self.surprised, self.windowed, SURPRISE_MAX
        recalling, recalled, new, cls, win = self.recalling, self.recalled, _new_state, LMState, self.copy_window

        def step(state: LMState, token: int) -> LMState:
            own, run = self.predict(state), state.run   # memoised (`_fast_predict`): a strategy reads it too
            read = token
            if token == own and not run and recalling and recalled(state) is not None:
                pass  # a token it recalled: it is still reading known text (the run stays 0)
            elif token == own or (run >= need and (((hash((state.tail[fcut:], token, seed, SALT_FORGIVE)) * mult)
                                                    & mask) >> 11) * scale < r):
                read, run = own, (run + 1 if run < need else need)
            else:
                run = 0
            calm = (0 if read != own else min(state.calm + 1, top)) if surprised else state.calm
            window = ((token,) + state.window)[:win] if windowed else ()
            return new(cls, (state.pos + 1, (state.tail + (read,))[-TAIL_LEN:], window, calm, run, state.origin,
                             state.topic, state.key))

        return step

    def _fast_predict(self) -> Callable[[LMState], int]:
        """`reference_predict`: recall, then match-length copying, then `_fast_rest`."""
        rest = self.rest = self._fast_rest()
        predict: Callable[[LMState], int] = rest
        if self.induction:
            induced = self.induced

            def predict_induced(state: LMState) -> int:
                c = induced(state)
                return rest(state) if c is None else c

            predict = predict_induced
        if self.recalling:
            recalled, inner = self.recalled, predict

            def predict_recall(state: LMState) -> int:
                if state.run or not state.pos:  # not right after a token it would not have written
                    return inner(state)
                r = recalled(state)
                return inner(state) if r is None else r

            predict = predict_recall
        if not self.forgiving:
            return predict
        # With sim.forgive every step predicts at the state it leaves, which the decode loop has usually just asked
        # for (or will): keep the last predictions by state identity (the memo holds the states, so an id is never
        # reused while its entry lives; a prediction is a pure function of the state).
        memo, plain = self._memo, predict

        def predict_memo(state: LMState) -> int:
            hit = memo.get(id(state))
            if hit is not None and hit[0] is state:
                return hit[1]
            v = plain(state)
            if len(memo) >= 4096:
                memo.clear()
            memo[id(state)] = (state, v)
            return v

        return predict_memo

    def _fast_rest(self) -> Callable[[LMState], int]:
        """`reference_rest` with the back-off search memoised per context (the last `order` tokens decide it,
        except the unknown-context fallback, which hashes the whole tail). Not memoised per state: strategies
        rarely ask about the same context twice (lookahead's probes are new contexts every step)."""
        backoff, table, candidates = self._backoff, self.table, self.candidates
        order, seed, p_top = self.order, self.seed, self.p_top
        span = 1 - p_top
        mult, mask, scale = _GOLDEN, _MASK64, _INV53
        p_copy, copied, grain, cut = self.p_copy, self.copied, self.pos_grain, -self.choice_ctx
        from_prompt, plain, eos = self.from_prompt, self.plain_vocab, self.eos_id
        local = grain > 1 or self.choice_ctx < TAIL_LEN
        lfrac, lcut, pick, novel = self.local_frac, -self.local_ctx, self.pick, self.local_novel
        topic, topical = self.topic, self.topical

        def predict(state: LMState) -> int:
            tail = state.tail
            if lfrac:
                lk = tail[lcut:]
                if lk and (((hash((lk, seed, SALT_LOCAL)) * mult) & mask) >> 11) * scale < lfrac and not (
                        novel and longest_match(state.window, len(lk))[0] == len(lk)):
                    return pick(candidates(lk), (((hash((lk, seed, SALT_LOCAL_PICK)) * mult) & mask) >> 11) * scale)
            key = (state.pos // grain, tail[cut:]) if local else (state.pos, tail)   # choice_key
            if p_copy and (((hash((key, seed, SALT_COPY)) * mult) & mask) >> 11) * scale < p_copy:
                cp = copied(state.window, state.pos - state.origin if from_prompt else 0)
                if cp is not None and cp < plain and cp != eos:
                    return cp
            if topic:
                tp = topical(state, key)
                if tp is not None:
                    return tp
            ctx = tail[-order:]
            cands = backoff.get(ctx)
            if cands is None:
                cands = ()
                for n in range(len(ctx), 0, -1):
                    c = table.get(ctx[-n:])
                    if c:
                        cands = c
                        break
                backoff[ctx] = cands
            if not cands:
                cands = candidates(tail)
            u = (((hash((key, seed)) * mult) & mask) >> 11) * scale  # uniform(hash((key, seed)))
            if u < p_top or len(cands) == 1:
                out = cands[0]
            else:
                out = cands[1 + min(int((u - p_top) / span * (len(cands) - 1)), len(cands) - 2)]
            if len(backoff) > 1_000_000:
                backoff.clear()
            return out

        if not (self.windowed and self.guarded):
            return predict  # no window: nothing to loop over (the tail's hashes vary the text)
        choice, unlooped, refused = predict, self.unlooped, self.refused

        def predict_unlooped(state: LMState) -> int:
            c = choice(state)
            return unlooped(state, c) if refused(state, c) else c

        return predict_unlooped

    def prompts(self, n: int, seed: int, min_len: int = 32, max_len: int = 96) -> list[list[int]]:
        """Prompts cut from the corpus: for code, starting at a `def`; each `min_len..max_len` tokens."""
        ids = self.corpus.ids
        rng = random.Random(seed)
        starts = prompt_starts(*self._corpus_key[:2], max_len, *self._corpus_key[2:])
        return [ids[s: s + rng.randint(min_len, max_len)] for s in rng.sample(starts, min(n, len(starts)))]


# ---------------------------------------------------------------------------------------------- drafts
class NoisyDraftLM:
    """Draft q agreeing with `target` except at bursty, content-bound mismatch events (see module doc), with the
    draft-agreement knobs of a `SimConfig`. `alpha_copy` (None: off): where the target copies by match-length
    induction, the draft agrees with this probability instead (a small real model copies its context as reliably
    as a large one: the real pair's draft agreed on every copied token of HumanEval, on about 0.8 of the others)."""

    def __init__(self, target: NGramLM, cfg: SimConfig | None = None, seed: int = 1):
        c = cfg or SimConfig()
        self.alpha_copy = c.alpha_copy if target.induction else None  # without induction nothing is a copy
        self.target = target
        self.vocab_size, self.plain_vocab = target.vocab_size, target.plain_vocab
        self.alpha_easy, self.alpha_hard, self.hard_frac = c.alpha_easy, c.alpha_hard, c.hard_frac
        self.burst_len, self.seed = c.burst_len, seed
        self.start, self.step, self.begin = target.start, target.step, target.begin
        self._hard: dict[tuple[int, int], bool] = {}  # (stretch index, prompt key) -> hard?
        self.predict: Callable[[LMState], int] = self._fast_predict()  # == reference_predict

    def _is_hard(self, stretch: int, key: int = 0) -> bool:
        """Whether a stretch is hard: per prompt where the state has its key (`begin`), so answers of different
        prompts that pass the same positions do not share their hard stretches (with short answers they would all
        share the few at the start: the run's seed, not the draft, would decide SpS)."""
        return uniform(hash((stretch, key, self.seed, SALT_HARD) if key else (stretch, self.seed, SALT_HARD))
                       ) < self.hard_frac

    def reference_predict(self, state: LMState) -> int:
        t = self.target
        if self.alpha_copy is not None:
            c = t.induced(state)
            if c is not None:
                return c if self._copy_agrees(state) else self._mismatch(state, c)
            p = t.reference_rest(state)
        else:
            p = t.reference_predict(state)
        hard = self._is_hard(state.pos // self.burst_len, state.key)
        u = uniform(hash((state.tail[-CONTENT_LEN:], self.seed)))
        if u < (self.alpha_hard if hard else self.alpha_easy):
            return p
        return self._mismatch(state, p)

    def _copy_agrees(self, state: LMState) -> bool:
        return uniform(hash((state.tail[-CONTENT_LEN:], self.seed, SALT_COPY_AGREES))) < self.alpha_copy  # type: ignore[operator]

    def _mismatch(self, state: LMState, p: int) -> int:
        t, tail = self.target, state.tail
        if uniform(hash((tail, self.seed, SALT_SHIFT))) < P_SHIFT:   # one place too early: the token after p
            q = t.predict(t.step(state, p))
        else:                                                      # the target's runner-up
            cands = t.candidates(tail)
            q = cands[1] if len(cands) > 1 and cands[0] == p else cands[0]
        return q if q != p else (p % (self.plain_vocab - 1)) + 1

    def _fast_predict(self) -> Callable[[LMState], int]:
        hard_of, is_hard, mismatch, target_predict = self._hard, self._is_hard, self._mismatch, self.target.predict
        burst_len, cut, seed = self.burst_len, -CONTENT_LEN, self.seed
        alpha_easy, alpha_hard = self.alpha_easy, self.alpha_hard
        mult, mask, scale = _GOLDEN, _MASK64, _INV53
        induced, rest, copy_agrees = self.target.induced, self.target.rest, self._copy_agrees
        by_copy = self.alpha_copy is not None

        def predict(state: LMState) -> int:
            if by_copy:
                c = induced(state)
                if c is not None:
                    return c if copy_agrees(state) else mismatch(state, c)
                p = rest(state)
            else:
                p = target_predict(state)
            stretch = (state.pos // burst_len, state.key)
            hard = hard_of.get(stretch)
            if hard is None:
                hard = hard_of[stretch] = is_hard(*stretch)
            u = (((hash((state.tail[cut:], seed)) * mult) & mask) >> 11) * scale
            return p if u < (alpha_hard if hard else alpha_easy) else mismatch(state, p)

        return predict


class IIDDraftLM:
    """Draft q that equals the target's token with probability `alpha` (a SimConfig's), independently at every
    position."""

    def __init__(self, target: NGramLM, cfg: SimConfig | None = None, seed: int = 1):
        self.target, self.alpha, self.seed = target, (cfg or SimConfig()).alpha, seed
        self.vocab_size = target.vocab_size
        self.start, self.step, self.begin = target.start, target.step, target.begin

    def predict(self, state: LMState) -> int:
        p = self.target.predict(state)
        if uniform(hash(((state.pos, state.tail), self.seed))) < self.alpha:
            return p
        return (p % (self.vocab_size - 1)) + 1  # any other token (never EOS)
