"""Losslessness on the `sim` backend: every registered strategy, through the one loop, is token-identical to an
independent greedy decoder on the surrogate target (which rebuilds the context state from scratch for every
token), for random prompts, budgets, EOS ids, hyper-parameters and draft agreements. Examples are cheap here."""

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategy_params import PARAMS

from ouroboros.loop.decode import decode
from ouroboros.strategies import REGISTRY, build_proposer
from simulators import make_pair
from simulators.simconfig import CORPORA
from simulators.stand_in import rest_stand_in

MODEL = yaml.safe_load(open("conf/model/yi34b_6b.yaml"))
HW = yaml.safe_load(open("conf/hardware/a800x2.yaml"))


def _memory_file() -> str:
    """sim.recall_text for the draws: a datastore of the code corpus' own text (so recall fires often)."""
    import os
    import tempfile

    from ouroboros.strategies.datastore import Datastore
    from simulators.surrogate import NGramLM, plain_config

    path = os.path.join(tempfile.mkdtemp(prefix="recall-"), "memory.npz")
    ids = NGramLM(plain_config(vocab=8192)).corpus.ids
    Datastore.build([ids[:20000], ids[40000:60000]]).save(path)
    return path


MEMORY = _memory_file()


def reference_greedy_lm(lm, prompt, max_new_tokens, eos_ids=(), max_context=1 << 30):
    """The target's greedy text after `prompt` (marked as the prompt where the model takes one: sim.copy_from,
    sim.self_guard tell the prompt from the output)."""
    ids, out = list(prompt), []
    begin = getattr(lm, "begin", lambda s: s)
    for _ in range(max_new_tokens):
        st = lm.start()
        for t in prompt:  # no incremental state: the whole context every time
            st = lm.step(st, t)
        st = begin(st)
        for t in out:
            st = lm.step(st, t)
        nxt = lm.predict(st)
        ids.append(nxt)
        out.append(nxt)
        if nxt in eos_ids or len(ids) >= max_context:
            break
    return out


@st.composite
def sim_setups(draw):
    tokens = draw(st.sampled_from(["surrogate", "iid"]))
    sim = {"tokens": tokens, "corpus": "code"}
    if tokens == "iid":
        sim["alpha"] = draw(st.sampled_from([0.0, 0.3, 0.8, 0.99]))
    else:
        sim["alpha_easy"] = draw(st.sampled_from([0.0, 0.5, 0.92, 1.0]))
        sim["alpha_hard"] = draw(st.sampled_from([0.0, 0.45, 1.0]))
        sim["hard_frac"] = draw(st.sampled_from([0.0, 0.25, 1.0]))
    sim["p_copy"] = draw(st.sampled_from([0.0, 0.4, 1.0]))
    sim["pos_grain"] = draw(st.sampled_from([1, 1, 16]))
    sim["choice_ctx"] = draw(st.sampled_from([0, 0, 3]))
    sim["local_frac"] = draw(st.sampled_from([0.0, 0.0, 0.3, 1.0]))
    sim["local_ctx"] = draw(st.sampled_from([1, 2]))
    sim["local_novel"] = draw(st.booleans())
    sim["loop_guard"] = draw(st.booleans())
    sim["self_guard"] = draw(st.booleans())
    sim["copy_from"] = draw(st.sampled_from(["context", "prompt"]))
    sim["induction"] = draw(st.sampled_from([0.0, 0.0, 0.3, 0.9]))
    sim["induction_decay"] = draw(st.sampled_from([1.0, 0.5]))
    sim["alpha_copy"] = draw(st.sampled_from([None, 1.0, 0.5]))
    sim["surprise_copy"] = draw(st.sampled_from([1.0, 0.4]))
    sim["forgive"] = draw(st.sampled_from([0.0, 0.0, 0.5, 1.0]))
    sim["forgive_run"] = draw(st.sampled_from([1, 3]))
    sim["recall"] = draw(st.sampled_from([0.0, 0.0, 0.5, 1.0]))
    sim["recall_min"] = draw(st.sampled_from([2, 6]))
    sim["recall_text"] = draw(st.sampled_from([None, MEMORY]))
    sim["corpus"] = draw(st.sampled_from(["code", "pycode"]))
    return sim


@pytest.mark.parametrize("name", sorted(REGISTRY))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_sim_token_identical_to_reference(name, data):
    sim = data.draw(sim_setups(), label="sim")
    seed = data.draw(st.integers(0, 3), label="seed")
    pair = make_pair(MODEL, HW, sim, seed=seed)
    params = data.draw(PARAMS[name], label="params")
    if data.draw(st.booleans(), label="corpus_prompt"):
        prompt = pair.default_prompts(1, data.draw(st.integers(0, 1000), label="pseed"))[0].ids
        prompt = prompt[: data.draw(st.integers(1, len(prompt)), label="cut")]
    else:
        prompt = data.draw(st.lists(st.integers(0, pair.target.vocab_size - 1), min_size=1, max_size=40), label="p")
    max_new = data.draw(st.integers(1, 80), label="max_new")
    eos = ()
    lm = pair.target.lm
    if data.draw(st.booleans(), label="use_eos"):
        free = reference_greedy_lm(lm, prompt, max_new)
        eos = (free[data.draw(st.integers(0, len(free) - 1), label="eos_at")],)
    expected = reference_greedy_lm(lm, prompt, max_new, eos)
    proposer = build_proposer(name, params, pair.target, pair.draft if REGISTRY[name].needs_draft_model else None)
    res = decode(pair.target, proposer, prompt, max_new, eos_ids=eos)
    assert res.output == expected
    assert sum(r.new_tokens for r in res.steps) == res.new_tokens
    assert res.elapsed_s > 0 or len(prompt) == 1 and max_new == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_rest_on_the_stand_in_is_token_identical_to_reference(data):
    """REST given no datastore on the simulator retrieves from the stand-in (simulators/stand_in.py), on a pair built
    for it: its target knows the stand-in's text where sim.recall is on and sim.recall_text is not set."""
    sim = {**data.draw(sim_setups(), label="sim"), "corpus": data.draw(st.sampled_from(CORPORA), label="corpus")}
    pair = make_pair(MODEL, HW, sim, seed=data.draw(st.integers(0, 3), label="seed"), rest_stand_in=True)
    stand_in = rest_stand_in(sim, MODEL)
    knows = bool(sim["recall"]) and not sim["recall_text"]
    assert (pair.target.lm.memory is stand_in.datastore) == knows
    params = {k: v for k, v in data.draw(PARAMS["rest"], label="params").items() if k != "corpus"}
    prompt = pair.default_prompts(1, data.draw(st.integers(0, 1000), label="pseed"))[0].ids
    prompt = prompt[: data.draw(st.integers(1, len(prompt)), label="cut")]
    max_new = data.draw(st.integers(1, 80), label="max_new")
    expected = reference_greedy_lm(pair.target.lm, prompt, max_new)
    proposer = build_proposer("rest", {**params, "datastore": stand_in.path}, pair.target)
    res = decode(pair.target, proposer, prompt, max_new)
    assert res.output == expected
    assert res.proposer_stats["accepted:datastore"] == sum(r.accepted for r in res.steps)


def test_context_full_stops_cleanly():
    model = {**MODEL, "profile": {side: {**MODEL["profile"][side], "max_context": 40} for side in ("target", "draft")}}
    pair = make_pair(model, HW, {})
    prompt = pair.default_prompts(1, 0)[0].ids[:30]
    res = decode(pair.target, build_proposer("speculative", {"gamma": 6}, pair.target, pair.draft), prompt, 50)
    assert res.stop_reason == "context" and len(prompt) + res.new_tokens == 40
    assert res.output == reference_greedy_lm(pair.target.lm, prompt, 10)


@pytest.mark.parametrize("pos_grain,choice_ctx,p_copy,local_frac,local_ctx,local_novel",
                         [(1, 0, 0.0, 0.0, 1, False), (16, 0, 0.0, 0.0, 1, False), (1, 3, 0.5, 0.0, 1, False),
                          (64, 2, 1.0, 0.0, 1, False), (1, 0, 0.0, 0.3, 1, False), (1, 6, 0.6, 0.4, 2, False),
                          (16, 3, 0.3, 1.0, 3, False), (1, 0, 0.0, 1.0, 2, True), (16, 3, 0.3, 0.6, 1, True)])
def test_fast_predict_equals_reference_with_local_choices(pos_grain, choice_ctx, p_copy, local_frac, local_ctx,
                                                          local_novel):
    """The target's hot path with position-coarse / local choices (sim.pos_grain, sim.choice_ctx, sim.local_frac,
    sim.local_novel) is its reference."""
    from simulators.surrogate import NGramLM, plain_config

    lm = NGramLM(plain_config(pos_grain=pos_grain, choice_ctx=choice_ctx, p_copy=p_copy, p_top=0.5,
                 local_frac=local_frac, local_ctx=local_ctx, local_novel=local_novel))
    ids = lm.prompts(3, 0)
    for prompt in ids:
        st_ = lm.start()
        for t in prompt:
            assert lm.predict(st_) == lm.reference_predict(st_)
            st_ = lm.step(st_, t)
        for _ in range(40):  # its own greedy text too
            nxt = lm.predict(st_)
            assert nxt == lm.reference_predict(st_)
            st_ = lm.step(st_, nxt)


def test_local_contexts_are_decided_by_their_last_tokens_alone():
    """With local_frac > 0 a share of contexts is continued the same way whatever came before their last local_ctx
    tokens (a real LM's confident continuations: what keeps a Jacobi guess right after a wrong earlier token); with
    local_frac 0 a different earlier token usually changes the continuation somewhere."""
    from simulators.surrogate import LMState, NGramLM, plain_config

    tails = [tuple(p[-8:]) for p in NGramLM(plain_config()).prompts(200, 2)]
    for frac in (0.0, 0.5, 1.0):
        lm = NGramLM(plain_config(local_frac=frac, local_ctx=2, p_top=0.5))
        garbled = [(t[0] + 1,) * 6 + t[-2:] for t in tails]  # the same last 2 tokens after 6 wrong ones
        agree = sum(lm.predict(LMState(64, t)) == lm.predict(LMState(65, g))
                    for t, g in zip(tails, garbled, strict=True))
        agree /= len(tails)
        if frac == 1.0:
            assert agree == 1.0
        elif frac == 0.5:
            assert 0.5 <= agree < 1.0
        else:
            assert agree < 0.5


def test_novel_local_contexts_continue_phrases_without_looping():
    """sim.local_novel: every context decided by the local rule (local_frac 1) continues its last 2 tokens the same
    way after garbled earlier tokens, as long as those 2 tokens are new in the context; but the greedy text does not
    loop, unlike the plain local rule's, whose deterministic 2-token map soon cycles (it repeats what followed the
    last 2 tokens earlier at almost every position)."""
    from simulators.surrogate import LMState, NGramLM, longest_match, plain_config

    def occurred(window, k):  # the context's last k tokens occurred earlier in it
        return longest_match(window, k)[0] == k

    tails = [tuple(p[-8:]) for p in NGramLM(plain_config()).prompts(200, 2)]
    lm = NGramLM(plain_config(local_frac=1.0, local_ctx=2, p_top=0.5, local_novel=True))
    garbled = [(t[0] + 1,) * 6 + t[-2:] for t in tails]
    pairs = [(t, g) for t, g in zip(tails, garbled, strict=True) if t[-1] != t[-2]]
    assert all(not occurred(g[::-1], 2) for _, g in pairs)
    assert all(lm.predict(LMState(64, t, t[::-1])) == lm.predict(LMState(65, g, g[::-1])) for t, g in pairs
               if not occurred(t[::-1], 2))

    def repeat_rate(lm_, prompt, n=300):
        st_, out = lm_.start(), list(prompt)
        for t in prompt:
            st_ = lm_.step(st_, t)
        rep = 0
        for _ in range(n):
            nxt = lm_.predict(st_)
            w = tuple(reversed(out))
            rep += NGramLM.copied(w) == nxt
            out.append(nxt)
            st_ = lm_.step(st_, nxt)
        return rep / n

    prompts = NGramLM(plain_config()).prompts(4, 5)
    plain = NGramLM(plain_config(local_frac=1.0, local_ctx=2, p_top=0.5))
    loops = [repeat_rate(plain, p) for p in prompts]
    novel = [repeat_rate(lm, p) for p in prompts]
    assert min(loops) > 0.9
    assert max(novel) < 0.5


def _memory(n: int = 30000):
    from ouroboros.strategies.datastore import Datastore
    from simulators.surrogate import NGramLM, plain_config

    return Datastore.build([NGramLM(plain_config()).corpus.ids[:n]])


@pytest.mark.parametrize("kw", [{"forgive": 0.5}, {"forgive": 0.5, "p_copy": 0.3, "pos_grain": 16},
                                {"forgive": 1.0, "forgive_run": 1, "induction": 0.2, "surprise_copy": 0.5},
                                {"forgive": 0.3, "local_frac": 0.3, "local_ctx": 2, "local_novel": True},
                                {"recall": 1.0, "recall_min": 3}, {"recall": 0.5, "forgive": 0.3, "p_copy": 0.3},
                                {"recall": 0.7, "recall_min": 4, "induction": 0.2, "surprise_copy": 0.5}])
def test_run_counting_fast_step_equals_reference(kw):
    """sim.forgive / sim.recall (which share the run of own tokens): the hot step and predict equal their references
    on prompts (from the memory's own text, with recall), on the target's own text and after wrong tokens (every
    fifth token of the continuation); with recall, the memory is consulted."""
    from simulators.surrogate import NGramLM, plain_config

    lm = NGramLM(plain_config(p_top=0.5, **kw), memory=_memory() if "recall" in kw else None)
    fired = 0
    for prompt in lm.prompts(3, 0):
        st_ = lm.start()
        for i in range(len(prompt) + 60):
            own = lm.predict(st_)
            assert own == lm.reference_predict(st_)
            fired += lm.recalled(st_) is not None
            tok = prompt[i] if i < len(prompt) else own if i % 5 else own % 4000 + 1
            nxt_state = lm.step(st_, tok)
            assert nxt_state == lm.reference_step(st_, tok)
            st_ = nxt_state
    assert (fired > 0) == ("recall" in kw)


def test_recall_goes_on_with_known_text_after_a_wrong_token():
    """sim.recall 1: reading text of its memory that it would not have written itself, the target predicts the
    memory's next token (it goes on with text it knows, as a real LM reading a REST draft past a wrong token does);
    without a memory, or at recall 0, it mostly does not. Its own text (no wrong token read) is unchanged."""
    import random

    from ouroboros.strategies.datastore import Datastore
    from simulators.surrogate import NGramLM, plain_config

    rng = random.Random(0)
    doc = [rng.randrange(1, 4000) for _ in range(600)]   # text the n-gram table does not know

    mem = Datastore.build([doc])
    on = NGramLM(plain_config(p_top=0.5, recall=1.0, recall_min=4), memory=mem)
    off = NGramLM(plain_config(p_top=0.5, recall=0.0, recall_min=4), memory=mem)
    inert = NGramLM(plain_config(p_top=0.5, recall=1.0, recall_min=4))
    assert on.recalling and not off.recalling and not inert.recalling
    hit_on = hit_off = n = 0
    s_on, s_off = on.start(), off.start()
    for i, t in enumerate(doc[:-1]):
        s_on, s_off = on.step(s_on, t), off.step(s_off, t)
        if i >= 8 and s_on.run == 0:   # right after a token it would not have written
            hit_on += on.predict(s_on) == doc[i + 1]
            hit_off += off.predict(s_off) == doc[i + 1]
            n += 1
    assert n > 500 and hit_on / n > 0.95 and hit_off / n < 0.05
    prompt = NGramLM(plain_config()).prompts(1, 7)[0]
    texts = []
    for lm in (on, off):   # after a prompt the memory does not know, its own text is what it writes without recall
        st_, out = lm.start(), []
        for t in prompt:
            st_ = lm.step(st_, t)
        for _ in range(40):
            out.append(lm.predict(st_))
            st_ = lm.step(st_, out[-1])
            assert lm is off or (st_.run > 0 and lm.recalled(st_) is None)
        texts.append(out)
    assert texts[0] == texts[1]


def test_forgiven_token_is_read_as_the_targets_own():
    """sim.forgive 1: after forgive_run own tokens, a wrong token leaves the target's predictions as they would have
    been after its own token (its text goes on unchanged: what keeps a real LM's Jacobi guesses right after a wrong
    cell), while the copy window keeps the token written. After tokens it would not have written (a random prompt)
    nothing is forgiven, and with forgive 0 a wrong token changes the context."""
    import random

    from simulators.surrogate import NGramLM, plain_config

    lm = NGramLM(plain_config(p_top=0.5, forgive=1.0, forgive_run=3))
    windowed = NGramLM(plain_config(p_top=0.5, p_copy=0.3, forgive=1.0, forgive_run=3))
    off = NGramLM(plain_config(p_top=0.5))
    same = changed = prompt_runs = 0
    for prompt in lm.prompts(20, 3):
        st_, st0, stw = lm.start(), off.start(), windowed.start()
        for t in prompt:
            st_, st0, stw = lm.step(st_, t), off.step(st0, t), windowed.step(stw, t)
        for _ in range(3):  # three own tokens
            st_, st0 = lm.step(st_, lm.predict(st_)), off.step(st0, off.predict(st0))
            stw = windowed.step(stw, windowed.predict(stw))
        own = lm.predict(st_)
        wrong = own % 4000 + 1
        same += lm.predict(lm.step(st_, own)) == lm.predict(lm.step(st_, wrong))
        c, d = off.step(st0, own), off.step(st0, wrong)
        changed += off.predict(c) != off.predict(d)
        own_w = windowed.predict(stw)
        wrong_w = own_w % 4000 + 1
        a, b = windowed.step(stw, own_w), windowed.step(stw, wrong_w)
        # read as its own, written as it was
        assert b.tail == a.tail and b.window[0] == wrong_w and a.window[0] == own_w
    assert same == 20
    assert changed >= 5
    rng = random.Random(0)
    for _ in range(20):
        st_ = lm.start()
        for t in [rng.randrange(1, 4000) for _ in range(30)]:
            st_ = lm.step(st_, t)
        prompt_runs += st_.run >= 3
    assert prompt_runs <= 2


def test_coarse_position_choices_repeat_a_phrase_a_few_tokens_later():
    """With pos_grain > 1 the target continues the same 8-token tail the same way at a nearby position (what makes
    a real LM's Jacobi / pool guesses stay right); with pos_grain 1 its varied choices are redrawn."""
    from simulators.surrogate import LMState, NGramLM, plain_config

    tails = [tuple(p[-8:]) for p in NGramLM(plain_config()).prompts(200, 1)]
    for grain, same in ((64, True), (1, False)):
        lm = NGramLM(plain_config(pos_grain=grain, p_top=0.5))
        agree = sum(lm.predict(LMState(128, t)) == lm.predict(LMState(129, t)) for t in tails) / len(tails)
        assert (agree == 1.0) if same else agree < 0.95
