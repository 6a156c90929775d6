"""sim.topic: the surrogate target's answer goes on as a corpus passage its prompt picks, where its back-off table
would decide. Real answers to different prompts share few phrases (the real pair's MT-Bench answers: 0.7% of their
4-grams occur in an earlier answer); one n-gram table alone writes the same ones in every answer, which suffix's
global tree of earlier answers then drafts."""

from collections import Counter

from simulators.lab.decisions.stats import cross_share
from simulators.surrogate import NGramLM, plain_config


def answers(lm: NGramLM, prompts: list[list[int]], n: int = 128) -> list[list[int]]:
    out = []
    for p in prompts:
        st = lm.start()
        for x in p:
            st = lm.step(st, x)
        st, o = lm.begin(st, p), []
        for _ in range(n):
            o.append(lm.predict(st))
            st = lm.step(st, o[-1])
        out.append(o)
    return out


def test_answers_to_different_prompts_share_fewer_4_grams_with_a_topic():
    plain = NGramLM(plain_config(corpus="prose", pieces="bpe", loop_guard=True))
    topical = NGramLM(plain_config(corpus="prose", pieces="bpe", loop_guard=True, topic=0.9))
    prompts = plain.prompts(8, 0)
    without, with_ = cross_share(answers(plain, prompts)), cross_share(answers(topical, prompts))
    assert without > 0.05          # else the comparison could not fail
    assert with_ < without / 3


def test_the_prompt_picks_the_passage_and_only_a_begun_answer_has_one():
    lm = NGramLM(plain_config(corpus="prose", topic=0.5, topic_len=256))
    a, b = lm.prompts(2, 1)
    st = lm.start()
    for x in a:
        st = lm.step(st, x)
    assert st.topic == -1                                   # the prompt itself is not written from a passage
    one, again, other = lm.begin(st, a), lm.begin(st, list(a)), lm.begin(st, b)
    assert one.topic == again.topic != other.topic
    assert 0 <= one.topic <= len(lm.corpus.ids) - 256
    assert lm.step(one, 7).topic == one.topic               # every later state keeps it
    assert NGramLM(plain_config(corpus="prose")).begin(st, a).topic == -1   # topic 0: no passage


def test_with_topic_1_the_answer_continues_the_tail_as_its_passage_most_often_does():
    """Independent of topic_table: count the passage's continuations of the tail's last `order` tokens."""
    lm = NGramLM(plain_config(corpus="prose", topic=1.0, topic_len=512))
    [prompt] = lm.prompts(1, 3)
    st = lm.start()
    for x in prompt:
        st = lm.step(st, x)
    st = lm.begin(st, prompt)
    passage = lm.corpus.ids[st.topic: st.topic + 512]
    checked = 0
    for _ in range(64):
        ctx = st.tail[-lm.order:]
        follows = Counter(passage[i + len(ctx)] for i in range(len(passage) - len(ctx))
                          if tuple(passage[i: i + len(ctx)]) == ctx and 0 < passage[i + len(ctx)] < lm.plain_vocab)
        nxt = lm.predict(st)
        if follows:
            best = max(follows.values())
            assert follows[nxt] == best
            checked += 1
        st = lm.step(st, nxt)
    assert checked >= 32     # the answer mostly recites its passage (the rest: shorter contexts back off)


def test_a_topic_leaves_the_prompt_positions_alone():
    """Before `begin` (the prompt's positions, what a prefill scores) the target predicts as without a topic."""
    plain, topical = NGramLM(plain_config(corpus="prose")), NGramLM(plain_config(corpus="prose", topic=1.0))
    [prompt] = plain.prompts(1, 5)
    a, b = plain.start(), topical.start()
    for x in prompt:
        assert plain.predict(a) == topical.predict(b)
        a, b = plain.step(a, x), topical.step(b, x)
