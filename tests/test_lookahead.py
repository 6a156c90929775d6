"""Lookahead: golden window update and probe layout; probes never accepted; losslessness with pre-filled pools."""

import random

from conftest import get_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import reference_greedy

from ouroboros.backends.hf import HFBackend
from ouroboros.loop.decode import decode
from ouroboros.loop.draft import CANDIDATE, PROBE, Draft
from ouroboros.strategies import build_proposer
from ouroboros.strategies.lookahead import JacobiWindow, OutputIndexer, hang_phrases
from ouroboros.strategies.phrase_pool import Phrase, PhrasePool


def test_golden_window_update():
    w = JacobiWindow(W=2, N=3)
    w.levels = [[5, 6], [7, 8]]
    pool = PhrasePool(per_key=4)
    # top-level nodes 2 and 3 predict 9 and 4 (preds[i + 1] is the prediction after node i)
    assert w.update([0, 0, 0, 9, 4], [[0, 1], [2, 3]], pool, "lookahead") == 2
    assert pool.lookup(5, 4) == [Phrase((7, 9), "lookahead")] and pool.lookup(6, 4) == [Phrase((8, 4), "lookahead")]
    assert w.levels == [[7, 8], [9, 4]]


def test_window_fills_one_level_per_step_first():
    w = JacobiWindow(W=2, N=4)
    w.levels = [[5, 6]]
    pool = PhrasePool()
    assert w.update([0, 1, 2], [[0, 1]], pool, "lookahead") == 0
    assert w.levels == [[5, 6], [1, 2]] and len(pool) == 0   # predictions after nodes 0 and 1 -> not [0, 1]


def test_golden_output_indexer_adds_each_complete_ngram_once():
    pool = PhrasePool(per_key=4)
    ix = OutputIndexer(length=2)
    ix.begin(prompt_len=2)                                     # prompt [8, 9]
    assert ix.update([8, 9, 1], pool) == 0                     # 9 -> (1, ?) not complete yet
    assert ix.update([8, 9, 1, 2, 3], pool) == 2               # 9 -> (1, 2), 1 -> (2, 3)
    assert [(k, t) for k, t, _ in pool.items()] == [(9, (1, 2)), (1, (2, 3))]
    assert ix.update([8, 9, 1, 2, 3], pool) == 0 and ix.next_key == 3


def test_golden_probe_layout():
    w = JacobiWindow(W=3, N=3)
    w.levels = [[1, 2, 3], [4, 5, 6]]
    d = Draft()
    nodes = w.add_probes(d)
    assert nodes == [[0, 1, 2], [3, 4, 5]]
    assert d.parents == [-1, 0, 1, 0, 1, 2]          # level-0 chain; (1, i) under (0, i)
    assert d.depths == [0, 1, 2, 1, 2, 3] and set(d.kinds) == {PROBE}
    assert w.depth == 3


def test_golden_trie_of_phrases():
    d = Draft()
    nodes = hang_phrases(d, [Phrase((1, 2, 3), "verify"), Phrase((1, 4), "history"), Phrase((5,), "verify")], -1, 2)
    assert nodes == [[0, 1], [0, 2], [3]]           # shared first token, cut at depth 2
    assert d.tokens == [1, 2, 4, 5] and d.parents == [-1, 0, 0, -1] and d.trunk_len == 2
    assert d.sources == ["pool:verify"] * 2 + ["pool:history", "pool:verify"] and set(d.kinds) == {CANDIDATE}


def test_probes_are_scored_but_never_accepted_and_pool_fills():
    m = get_model("llama")
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    target = HFBackend(m)
    prop = build_proposer("lookahead", {"W": 4, "N": 3, "G": 4}, target)
    res = decode(target, prop, prompt, 30)
    assert res.output == reference_greedy(m, prompt, 30)
    assert all(r.n_nodes - r.n_candidates == 8 for r in res.steps[1:-3])  # (N - 1) * W probes while room allows
    s = res.proposer_stats
    assert s["harvested:lookahead"] > 0 and s["pool_phrases"] > 0
    assert s.get("accepted:pool:lookahead", 0) == sum((r.accepted_sources or {}).get("pool:lookahead", 0)
                                                      for r in res.steps)


def test_known_continuation_in_pool_is_accepted_in_phrases():
    m = get_model("qwen2")
    prompt, max_new = [7, 7, 2, 9], 24
    text = prompt + reference_greedy(m, prompt, max_new)
    target = HFBackend(m)
    prop = build_proposer("lookahead", {"W": 2, "N": 4, "G": 3}, target)
    prop.owns_pool = False  # keep the pre-filled pool through begin()
    for i in range(len(text) - 1):
        prop.pool.add(text[i], text[i + 1: i + 4], "verify")
    res = decode(target, prop, prompt, max_new)
    assert res.output == text[len(prompt):]
    assert len(res.steps) <= max_new // 3 + 2      # ~3 tokens accepted + 1 bonus per forward


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_lossless_with_arbitrary_pool(data):
    family = data.draw(st.sampled_from(["llama", "qwen2"]))
    m = get_model(family)
    params = {"W": data.draw(st.integers(1, 4)), "N": data.draw(st.integers(2, 5)), "G": data.draw(st.integers(1, 6))}
    target = HFBackend(m)
    prop = build_proposer("lookahead", params, target)
    prop.owns_pool = False
    for _ in range(data.draw(st.integers(0, 40))):
        prop.pool.add(data.draw(st.integers(0, 63)), data.draw(st.lists(st.integers(0, 63), min_size=1, max_size=5)),
                      "verify")
    rng = random.Random(data.draw(st.integers(0, 99)))
    prompt = [rng.randrange(64) for _ in range(rng.randint(1, 10))] * rng.randint(1, 3)
    max_new = rng.randint(1, 20)
    assert decode(target, prop, prompt, max_new).output == reference_greedy(m, prompt, max_new)
