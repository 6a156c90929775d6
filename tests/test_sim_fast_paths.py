"""The simulator's fast paths give exactly what the plain paths give: lazily evaluated predictions
(`LazyPreds`) equal eager ones, whatever is read first, and behave as a plain list everywhere else."""

import copy
import pickle
import random

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ouroboros.loop.draft import Draft
from simulators import make_pair
from simulators.backend import LazyPreds
from simulators.surrogate import prompt_key

MODEL = yaml.safe_load(open("conf/model/yi34b_6b.yaml"))
HW = yaml.safe_load(open("conf/hardware/a800x2.yaml"))


def random_tree(rng: random.Random, n: int, vocab: int) -> Draft:
    d = Draft()
    for _ in range(n):
        d.add_node(rng.randrange(vocab), rng.randrange(-1, len(d)), "x")
    return d


def eager(lm, root, draft: Draft) -> list[int]:
    states, out = [], [lm.predict(root)]
    for t, p in zip(draft.tokens, draft.parents, strict=True):
        st = lm.step(states[p] if p >= 0 else root, t)
        states.append(st)
        out.append(lm.predict(st))
    return out


@pytest.mark.parametrize("tokens", ["surrogate", "iid"])
@pytest.mark.parametrize("side", ["target", "draft"])
def test_lazy_preds_equal_eager_in_any_read_order(tokens, side):
    pair = make_pair(MODEL, HW, {"tokens": tokens}, seed=2)
    lm = getattr(pair, side).lm
    rng = random.Random(0)
    for _ in range(30):
        root = lm.start()
        for t in pair.default_prompts(1, rng.randrange(100))[0].ids:
            root = lm.step(root, t)
        d = random_tree(rng, rng.randrange(0, 25), lm.vocab_size)
        ref = eager(lm, root, d)
        lazy = LazyPreds(root, d.tokens, d.parents, lm.step, lm.predict)
        order = list(range(-len(ref), len(ref)))
        rng.shuffle(order)
        for i in order[: len(order) // 3]:
            assert lazy[i] == ref[i]
        assert lazy == ref and list(lazy) == ref and lazy[1:] == ref[1:]


def test_lazy_preds_behave_as_a_list():
    table = {(): 7}

    def step(st, t):
        return st + (t,)

    def predict(st):
        return table.get(st, len(st) * 10 + (st[-1] if st else 0))

    lazy = LazyPreds((), [1, 2, 3], [-1, 0, -1], step, predict)  # node 2 hangs off the root
    assert lazy[3] == 13 and lazy[0] == 7
    assert list.__getitem__(lazy, 1) is None  # unread entries are not computed
    assert lazy.state(1) == (1, 2) and lazy.state(-1) == ()
    assert lazy == [7, 11, 22, 13] and repr(lazy) == "[7, 11, 22, 13]"
    for other in (copy.copy(lazy), copy.deepcopy(lazy), pickle.loads(pickle.dumps(lazy))):
        assert type(other) is list and other == [7, 11, 22, 13]
    fresh = LazyPreds((), [1, 2, 3], [-1, 0, -1], step, predict)
    assert 22 in fresh and fresh.index(13) == 3 and fresh + [0] == [7, 11, 22, 13, 0]
    assert len(LazyPreds((), [], [], step, predict)) == 1


@pytest.mark.parametrize("p_copy,induction,alpha_copy,surprise", [(0.0, 0.0, None, 1.0), (0.5, 0.0, None, 1.0),
                                                                  (0.0, 0.3, 0.7, 1.0), (0.4, 0.6, None, 0.5),
                                                                  (0.0, 0.3, 0.9, 0.3)])
@pytest.mark.parametrize("corpus", ["code", "pycode", "prose"])
def test_fast_surrogate_equals_reference(corpus, p_copy, induction, alpha_copy, surprise):
    pair = make_pair(MODEL, HW, {"corpus": corpus, "alpha_easy": 0.7, "alpha_hard": 0.3, "p_copy": p_copy,
                                 "copy_window": 16, "induction": induction, "induction_decay": 0.6,
                                 "alpha_copy": alpha_copy, "surprise_copy": surprise}, seed=5)
    p, q = pair.target.lm, pair.draft.lm
    rng = random.Random(1)
    assert p.predict(p.start()) == p.reference_predict(p.start())  # the empty context: the hashed fallback
    for _ in range(300):
        st, ref = p.start(), p.start()
        toks = pair.default_prompts(1, rng.randrange(50))[0].ids[: rng.randrange(0, 40 if p_copy or induction else 12)]
        toks += [rng.randrange(p.vocab_size) for _ in range(rng.randrange(0, 4))]  # unseen contexts too
        for t in toks:
            st, ref = p.step(st, t), p.reference_step(ref, t)
            assert st == ref
            assert p.predict(st) == p.reference_predict(st) and q.predict(st) == q.reference_predict(st)


@pytest.mark.parametrize("n_cand", [0, 1, 3])
@pytest.mark.parametrize("W,L", [(1, 1), (3, 1), (4, 3)])
def test_window_probes_in_bulk_equal_node_by_node(n_cand, W, L):
    from ouroboros.loop.draft import PROBE
    from ouroboros.strategies.lookahead import JacobiWindow

    rng = random.Random(W * 10 + L)
    w = JacobiWindow(W, L + 1)
    w.levels = [[rng.randrange(50) for _ in range(W)] for _ in range(L)]
    fast, ref = Draft.chain(list(range(n_cand))), Draft.chain(list(range(n_cand)))
    nodes = w.add_probes(fast)
    parent, rows = -1, []  # the layout node by node: level-0 chain under the root, (l, i) under (l - 1, i)
    for t in w.levels[0]:
        parent = ref.add_node(t, parent, "window", PROBE)
        rows.append(parent)
    ref_nodes = [rows]
    for lvl in w.levels[1:]:
        ref_nodes.append([ref.add_node(t, ref_nodes[-1][i], "window", PROBE) for i, t in enumerate(lvl)])
    assert nodes == ref_nodes and fast == ref
    fast.validate()


def test_golden_copied():
    from simulators.surrogate import NGramLM

    # context a b c a b (window reversed: the last token first): "a b" occurred before, followed by c
    assert NGramLM.copied((2, 1, 3, 2, 1)) == 3
    assert NGramLM.copied((2, 1, 9, 2, 1, 3, 2, 1)) == 9   # the most recent occurrence wins
    assert NGramLM.copied((5, 5, 5)) == 5                  # x x x: the pair (x, x) was followed by x
    assert NGramLM.copied((2, 1, 3, 2, 4)) is None         # b occurred, but after c, not after a
    assert NGramLM.copied((2, 1)) is None


def test_copying_surrogate_copies_as_often_as_asked():
    """With p_copy = 1 every prediction whose last two tokens occurred before repeats what followed them, unless
    that would start a third back-to-back copy of a span (sim.loop_guard): then it writes something else; without
    the guard it copies every time and locks into the loop 13 2 5 9."""
    from simulators.surrogate import NGramLM, extends_loop, plain_config

    lm = NGramLM(plain_config(p_copy=1.0, copy_window=64, loop_guard=True))
    st, hits, found, guarded = lm.start(), 0, 0, 0
    for t in [5, 9, 13, 2, 5, 9]:
        st = lm.step(st, t)
    out = []
    for _ in range(60):
        c = NGramLM.copied(st.window)
        nxt = lm.predict(st)
        if c is not None and extends_loop(st.window, c):
            guarded += 1
            assert nxt != c
        elif c is not None:
            found += 1
            hits += nxt == c
        st = lm.step(st, nxt)
        out.append(nxt)
    assert out[:2] == [13, 2]   # 5 9 -> 13 (what followed 5 9), then 9 13 is new, 13 -> 2 copied ...
    assert found == hits > 10 and guarded > 0
    lm = NGramLM(plain_config(p_copy=1.0, copy_window=64))
    st = lm.start()
    for t in [5, 9, 13, 2, 5, 9]:
        st = lm.step(st, t)
    out = []
    for _ in range(12):
        out.append(lm.predict(st))
        st = lm.step(st, out[-1])
    assert out == [13, 2, 5, 9] * 3


def test_surrogate_text_never_writes_a_span_three_times_back_to_back():
    """sim.loop_guard (simulators/surrogate.py: LOOP_PERIOD, LOOP_EXCESS): whatever the copying knobs, the target's
    greedy text holds no span of up to LOOP_PERIOD tokens three times in a row; without it these configurations
    lock into a cycle (the last assertion)."""
    from simulators.surrogate import LOOP_PERIOD, NGramLM, plain_config

    for knobs in ({"p_copy": 1.0}, {"induction": 0.9, "induction_decay": 0.5}, {"p_copy": 0.5, "pos_grain": 16,
                                                                                  "choice_ctx": 3}):
        lm = NGramLM(plain_config(copy_window=2 * LOOP_PERIOD + 1, loop_guard=True, **knobs))  # sees 2 copies
        st, out = lm.start(), []
        for t in [5, 9, 13, 2, 5, 9, 13, 2]:
            st = lm.step(st, t)
            out.append(t)
        for _ in range(200):
            nxt = lm.predict(st)
            st = lm.step(st, nxt)
            out.append(nxt)
        gen = out[8:]
        for p in range(1, LOOP_PERIOD + 1):
            for i in range(len(gen) - 2 * p):
                assert not (gen[i:i + p] == gen[i + p:i + 2 * p] == gen[i + 2 * p:i + 3 * p]), (knobs, p, i)
    lm = NGramLM(plain_config(copy_window=64, p_copy=1.0))
    st, out = lm.start(), []
    for t in [5, 9, 13, 2, 5, 9, 13, 2]:
        st = lm.step(st, t)
    for _ in range(12):
        out.append(lm.predict(st))
        st = lm.step(st, out[-1])
    assert out == [5, 9, 13, 2] * 3


def test_golden_longest_match():
    from simulators.surrogate import longest_match

    # context 5 6 7 5 6 (window reversed): "5 6" occurred before, followed by 7
    assert longest_match((6, 5, 7, 6, 5), 16) == (2, 7)
    # context 1 2 9 2 3 1 2: "1 2" (L=2, followed by 9) beats the more recent "2" alone (followed by 3)
    assert longest_match((2, 1, 3, 2, 9, 2, 1), 16) == (2, 9)
    assert longest_match((4, 8, 4, 3), 16) == (1, 8)          # context 3 4 8 4: "4" was followed by 8
    assert longest_match((4, 8, 3), 16) == (0, -1)            # the last token never occurred before
    assert longest_match((5, 5, 5, 5), 2) == (2, 5)           # capped at 2 tokens, the most recent occurrence
    assert longest_match((5,), 16) == (0, -1)


def test_induction_copies_by_match_length_whatever_came_before():
    """Match-length copying (sim.induction): a long match is copied almost surely, a one-token match with about
    the asked probability, and the decision rests on the matched suffix alone (a garbled earlier token or another
    position gives the same copy)."""
    from simulators.surrogate import NGramLM, longest_match, plain_config

    lm = NGramLM(plain_config(induction=0.3, induction_decay=0.5))
    assert lm.induction_p[0] == pytest.approx(0.3) and lm.induction_p[3] == pytest.approx(1 - 0.7 * 0.125)
    rng = random.Random(3)
    one = long = one_n = long_n = 0
    for _ in range(400):
        span = [rng.randrange(200, 3000) for _ in range(6)]
        noise = [rng.randrange(3000, 4000) for _ in range(5)]
        ctx = span + noise + span[:5]                      # the span repeats: a 5-token match, followed by span[5]
        st_ = lm.start()
        for t in ctx:
            st_ = lm.step(st_, t)
        assert longest_match(st_.window, 16) == (5, span[5])
        long_n += 1
        long += lm.predict(st_) == span[5]
        shifted = lm.start()                               # the same last 5 tokens after other ones, elsewhere
        for t in [7] * 9 + span + [4001] + span[:5]:
            shifted = lm.step(shifted, t)
        assert lm.induced(shifted) == lm.induced(st_)
        ctx1 = span + noise + [span[0]]                    # a one-token match, followed by span[1]
        st1 = lm.start()
        for t in ctx1:
            st1 = lm.step(st1, t)
        one_n += 1
        one += lm.induced(st1) == span[1]
    assert long / long_n > 0.9
    assert 0.2 < one / one_n < 0.4
    assert NGramLM(plain_config()).induced(st_) is None      # off by default


def test_draft_agrees_on_copies_as_asked():
    """alpha_copy: where the target copies by induction the draft agrees with that probability, elsewhere with
    its stretches' agreement."""
    pair = make_pair(MODEL, HW, {"induction": 0.5, "induction_decay": 0.5, "alpha_copy": 1.0, "alpha_easy": 0.0,
                                 "alpha_hard": 0.0}, seed=1)
    p, q = pair.target.lm, pair.draft.lm
    copies = others = 0
    for prompt in pair.default_prompts(20, 4):
        st_ = p.start()
        for t in prompt.ids + prompt.ids[:10]:
            st_ = p.step(st_, t)
            if p.induced(st_) is not None:
                copies += 1
                assert q.predict(st_) == p.predict(st_)
            else:
                others += 1
                assert q.predict(st_) != p.predict(st_)
    assert copies > 50 and others > 50


def test_copying_is_weaker_right_after_a_token_the_target_would_not_write():
    """surprise_copy: the same repeated span is copied less often when the token before the match was not the
    target's own choice (k = 0) than when the context is the target's own text (k = SURPRISE_MAX)."""
    from simulators.surrogate import SURPRISE_MAX, LMState, NGramLM, longest_match, plain_config

    lm = NGramLM(plain_config(induction=0.3, induction_decay=0.6, surprise_copy=0.2))
    assert lm.surprise_s[0] == pytest.approx(0.2) and lm.surprise_s[SURPRISE_MAX] == pytest.approx(1 - 0.8 / 16)
    st_ = lm.start()
    for t in lm.prompts(1, 3)[0]:
        st_ = lm.step(st_, t)
    own = lm.predict(st_)
    assert lm.step(st_, own).calm == min(st_.calm + 1, SURPRISE_MAX)
    other = (own % (lm.plain_vocab - 1)) + 1
    assert lm.step(st_, other).calm == 0
    rng = random.Random(5)
    counts = {0: 0, SURPRISE_MAX: 0}
    for _ in range(300):
        span = tuple(rng.randrange(200, 3000) for _ in range(3))
        window = tuple(reversed(span + (7, 8, 9) + span[:2]))  # the context: span, 7 8 9, span[:2]
        assert longest_match(window, 16) == (2, span[2])
        for k in counts:
            counts[k] += lm.induced(LMState(40, window[:8][::-1], window, k)) == span[2]
    assert counts[SURPRISE_MAX] > 120 and counts[0] < 0.5 * counts[SURPRISE_MAX]


# ----------------------------------------------------------------------------- fast == reference, any configuration
SKIP = {"vocab", "pieces", "recall_text", "alpha"}   # fixed below (no real tokenizer; the memory drawn apart)
INT_CAP = 64                                          # integer knobs without an upper bound are drawn up to this


def _field_values(f, cfg_so_far):
    """A hypothesis strategy over one text / draft knob's valid values, from SimConfig's metadata alone, so a new
    knob is covered without editing this test."""
    from hypothesis import strategies as hs

    from simulators.simconfig import type_hints

    m, hint = f.metadata, type_hints()[f.name]
    if m["choices"]:
        return hs.sampled_from(m["choices"])
    if hint is bool:
        return hs.booleans()
    hi = m["hi"]
    if isinstance(hi, str):
        hi = cfg_so_far[hi]
    if hint in (int, int | None):
        return hs.integers(int(m["lo"]), int(hi) if hi is not None else INT_CAP)
    top = hi if hi is not None else 1.0
    values = hs.sampled_from([m["lo"], top]) | hs.floats(m["lo"], top, exclude_max=bool(m["hi_open"]))
    values = values.filter(lambda v: not (m["hi_open"] and v >= top))
    return (hs.none() | values) if hint == (float | None) else values


@st.composite
def surrogate_configs(draw):
    import dataclasses

    from simulators.simconfig import SimConfig

    knobs = {}
    for f in dataclasses.fields(SimConfig):
        if f.metadata["group"] in ("text", "draft") and f.name not in SKIP:
            knobs[f.name] = draw(_field_values(f, knobs), label=f.name)
    return SimConfig(vocab=4096, pieces=draw(st.sampled_from(["words", "bpe"]), label="pieces"), **knobs)


@st.composite
def token_runs(draw):
    """Tokens fed to the target: corpus text, its own continuation, and wrong tokens among them."""
    return draw(st.lists(st.tuples(st.sampled_from(["corpus", "own", "wrong"]), st.integers(0, 4095)),
                         min_size=1, max_size=60), label="tokens")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=surrogate_configs(), run=token_runs(), seed=st.integers(0, 3), with_memory=st.booleans())
def test_fast_paths_equal_reference_for_any_configuration(cfg, run, seed, with_memory):
    """The target's step / predict and the draft's predict (the hot closures) equal their plain references for any
    valid configuration of the text prior and the draft's agreement, on any mix of corpus text, the target's own
    continuation and wrong tokens (with recall, on a memory of the corpus' own text), the prompt ending halfway."""
    from simulators.surrogate import NGramLM, NoisyDraftLM

    memory = _corpus_memory(cfg.corpus, cfg.pieces) if with_memory else None
    lm = NGramLM(cfg, seed=seed, memory=memory)
    q = NoisyDraftLM(lm, cfg, seed=seed + 1)
    corpus = lm.corpus.ids
    st_, ref, fed = lm.start(), lm.start(), []
    for i, (kind, x) in enumerate(run):
        assert st_ == ref
        own = lm.predict(st_)
        assert own == lm.reference_predict(st_) and q.predict(st_) == q.reference_predict(st_)
        tok = corpus[(x * 7 + i) % len(corpus)] if kind == "corpus" else own if kind == "own" else own % 4000 + 1
        st_, ref = lm.step(st_, tok), lm.reference_step(ref, tok)
        fed.append(tok)
        if i == len(run) // 2:   # the prompt ends here: what follows is its own output (copy_from, topic)
            st_, ref = lm.begin(st_, fed), lm.begin(ref, fed)
    assert st_ == ref and lm.predict(st_) == lm.reference_predict(st_)


_MEMORIES: dict[tuple[str, str], object] = {}


def _corpus_memory(corpus: str, pieces: str):
    from ouroboros.strategies.datastore import Datastore
    from simulators.corpus import load_corpus

    if (corpus, pieces) not in _MEMORIES:
        _MEMORIES[corpus, pieces] = Datastore.build([load_corpus(corpus, 4096, pieces).ids[:20000]])
    return _MEMORIES[corpus, pieces]


def test_golden_extends_loop():
    from simulators.surrogate import extends_loop

    assert not extends_loop((1, 2, 1), 2)      # 1 2 1 2: a span twice
    assert extends_loop((2, 1, 2, 1), 1)       # 1 2 1 2 1: a third copy starts
    assert extends_loop((5, 5), 5) and not extends_loop((5,), 5) and not extends_loop((7, 5, 5), 5)
    assert not extends_loop((), 3)


def test_golden_repeats_output_and_prompt_bound_matches():
    from simulators.surrogate import SELF_N, NGramLM, longest_match, repeats_output

    assert SELF_N == 8
    ctx = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7]
    w = tuple(reversed(ctx))
    assert repeats_output(w, 8, out=16)               # "1..8" would end a second time
    assert not repeats_output(w, 8, out=8)            # ... but its first copy ends in the prompt (8+ tokens back)
    assert not repeats_output(w, 9, out=16)           # "2..7 9" is new
    assert not repeats_output(w[:7], 8, out=7)        # too short a context to hold an 8-gram twice
    # context 5 6 7 | 5 6 (the prompt: 5 6 7): the match "5 6" is in the prompt, followed by 7
    assert longest_match((6, 5, 7, 6, 5), 16, lo=2) == (2, 7)
    # context 5 6 7 | 5 6 9 5 6 (the prompt: 5 6 7): the output's own "5 6 9" is not copied, the prompt's "5 6 7" is
    assert longest_match((6, 5, 9, 6, 5, 7, 6, 5), 16) == (2, 9)
    assert longest_match((6, 5, 9, 6, 5, 7, 6, 5), 16, lo=5) == (2, 7)
    assert longest_match((6, 5, 9, 6, 5, 7, 6, 5), 16, lo=6) == (0, -1)   # prompt 5 6: what followed is output
    assert NGramLM.copied((6, 5, 9, 6, 5, 7, 6, 5), lo=5) == 7
    assert NGramLM.copied((6, 5, 9, 6, 5, 7, 6, 5)) == 9


def test_begin_marks_the_prompt_end_and_every_path_carries_it():
    """`begin` marks where the output starts; every step after it keeps the mark (the fast paths build states as
    raw tuples), and the sim backend marks the state after its prompt."""
    from simulators.surrogate import NGramLM, plain_config

    for knobs in ({}, {"induction": 0.5}, {"induction": 0.5, "surprise_copy": 0.5}, {"forgive": 0.5},
                  {"local_novel": True, "local_frac": 0.5}):
        lm = NGramLM(plain_config(copy_from="prompt", **knobs))
        st = lm.start()
        for t in [5, 9, 13, 2]:
            st = lm.step(st, t)
        st = lm.begin(st, [5, 9, 13, 2])
        assert st.origin == 4 and st.key == prompt_key([5, 9, 13, 2]) != 0
        for t in [7, 8, 9]:
            st = lm.step(st, t)
            assert st.origin == 4 and st.key == prompt_key([5, 9, 13, 2]) and len(st) == 8
        assert lm.copy_lo(st) == 3
    pair = make_pair(MODEL, HW, {"corpus": "code", "induction": 0.5, "copy_from": "prompt"}, seed=1)
    prompt = pair.default_prompts(1, 0)[0].ids
    pair.target.prefill(prompt)
    assert pair.target._states[-1].origin == len(prompt) and pair.target._states[-2].origin == 0
    assert pair.target._states[-1].key == prompt_key(prompt) and pair.target._states[-2].key == 0


def test_the_draft_s_hard_stretches_are_each_prompt_s_own():
    """Which stretches are hard for the surrogate draft depends on the prompt (its key from `begin`), so answers
    of different prompts over the same positions do not share them; without a key (no `begin`) it is as before."""
    from simulators.surrogate import NGramLM, NoisyDraftLM, plain_config

    lm = NGramLM(plain_config())
    q = NoisyDraftLM(lm, plain_config(hard_frac=0.5), seed=3)
    keys = [prompt_key([i, i + 1]) for i in range(40)]
    patterns = {tuple(q._is_hard(s, k) for s in range(12)) for k in keys}
    assert len(patterns) > 30                      # 40 prompts: nearly all their own
    assert [q._is_hard(s) for s in range(12)] == [q._is_hard(s, 0) for s in range(12)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 10**6), st.sampled_from(["context", "prompt"]), st.booleans(), st.booleans(),
       st.sampled_from([0.0, 0.5]), st.sampled_from([0.0, 0.6, 0.9]), st.sampled_from([0.0, 0.5]),
       st.sampled_from([0.0, 0.9]))
def test_guards_and_prompt_copying_fast_paths_equal_reference(seed, copy_from, self_guard, loop_guard, p_copy,
                                                              induction, forgive, topic):
    """sim.copy_from, sim.self_guard (with the loop guard and the copying, forgiving and topic knobs): the fast
    paths give the plain path's predictions, on prompts marked by `begin` and their continuations."""
    cfg = {"corpus": "code", "copy_from": copy_from, "self_guard": self_guard, "loop_guard": loop_guard,
           "p_copy": p_copy, "induction": induction, "induction_decay": 0.5, "forgive": forgive, "copy_window": 48,
           "alpha_copy": 0.9 if induction else None, "topic": topic, "topic_len": 256}
    pair = make_pair(MODEL, HW, cfg, seed=seed % 7)
    p, q = pair.target.lm, pair.draft.lm
    rng = random.Random(seed)
    prompt = pair.default_prompts(1, rng.randrange(50))[0].ids[: rng.randrange(1, 40)]
    st_, ref = p.start(), p.start()
    for t in prompt:
        st_, ref = p.step(st_, t), p.reference_step(ref, t)
    st_, ref = p.begin(st_, prompt), p.begin(ref, prompt)
    for _ in range(48):
        assert st_ == ref
        nxt = p.predict(st_)
        assert nxt == p.reference_predict(ref) and q.predict(st_) == q.reference_predict(ref)
        t = nxt if rng.random() < 0.8 else rng.randrange(1, p.plain_vocab)
        st_, ref = p.step(st_, t), p.reference_step(ref, t)


def test_self_guarded_surrogate_never_repeats_its_own_8_grams():
    """sim.self_guard: whatever the copying knobs, the target's greedy output holds no 8-gram twice (the prompt's
    own repeats are not its output); without the guard these configurations do repeat themselves."""
    from simulators.lab.decisions.stats import self_repeat
    from simulators.surrogate import NGramLM, plain_config

    prompt = [5, 9, 13, 2, 5, 9, 13, 2, 17, 21]
    for knobs in ({"p_copy": 1.0}, {"induction": 0.9, "induction_decay": 0.5},
                  {"p_copy": 0.5, "pos_grain": 16, "choice_ctx": 3, "local_frac": 0.6}):
        outs = {}
        for guard in (True, False):
            lm = NGramLM(plain_config(copy_window=256, self_guard=guard, **knobs))
            st_ = lm.start()
            for t in prompt:
                st_ = lm.step(st_, t)
            st_, out = lm.begin(st_), []
            for _ in range(200):
                out.append(lm.predict(st_))
                st_ = lm.step(st_, out[-1])
            outs[guard] = out
        assert self_repeat([outs[True]]) == 0.0, knobs
        assert self_repeat([outs[False]]) > 0.05, knobs
