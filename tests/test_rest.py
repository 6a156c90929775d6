"""REST: golden tables for the suffix array, longest match, continuations and the continuation tree;
brute-force property checks; the builder command and its errors; retrieval drafts are verified losslessly."""

import numpy as np
import pytest
from conftest import get_model
from hypothesis import given, settings
from hypothesis import strategies as st
from reference import reference_greedy

from ouroboros.backends.hf import HFBackend
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.rest_datastore import Datastore, continuation_tree, main, suffix_array
from ouroboros.strategies import NO_DATASTORE, build_proposer


def test_golden_suffix_array():
    assert suffix_array(np.array([2, 1, 2, 1])).tolist() == [3, 1, 2, 0]   # "1" < "1 2 1" < "2 1" < "2 1 2 1"
    assert suffix_array(np.array([1, -1, 1])).tolist() == [1, 2, 0]        # separator sorts first


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-1, 4), max_size=40))
def test_suffix_array_matches_sorting(x):
    assert suffix_array(np.array(x, dtype=np.int64)).tolist() == sorted(range(len(x)), key=lambda i: x[i:])


GOLDEN = [
    # (documents, context, max_suffix, depth) -> (match length, continuations in suffix-array order)
    ([[1, 2, 3, 1, 2, 4]], [7, 1, 2], 4, 4, 2, [[3, 1, 2, 4], [4]]),
    ([[1, 2, 3, 1, 2, 4]], [3, 1, 2], 4, 2, 3, [[4]]),          # longest (3 tokens) wins over "1 2" (2)
    ([[1, 2, 3], [9, 1, 2, 5]], [1, 2], 2, 3, 2, [[5], [3]]),    # a document end stops a continuation
    ([[1, 2, 3]], [8, 9], 4, 3, 0, []),                          # nothing matches
    ([[5, 6, 5, 6, 5]], [5], 1, 2, 1, [[6, 5], [6, 5]]),          # an occurrence at the corpus end is dropped
]


@pytest.mark.parametrize("docs, ctx, max_suffix, depth, m, conts", GOLDEN)
def test_golden_retrieval(docs, ctx, max_suffix, depth, m, conts):
    ds = Datastore.build(docs)
    assert ds.longest_match(ctx, max_suffix)[0] == m
    assert sorted(ds.continuations(ctx, max_suffix, 1, depth, 100)) == sorted(conts)


def test_golden_continuation_tree():
    # counts: 3 -> 2, 4 -> 1, 3.1 -> 1, 3.2 -> 1; keep 3 nodes: ties by depth, then first seen
    assert continuation_tree([[3, 1], [3, 2], [4]], 3) == ([3, 1, 4], [-1, 0, -1])
    # the trunk follows the most frequent child: 7 8 (x2) before 7 9 (x1)
    assert continuation_tree([[7, 9], [7, 8], [7, 8]], 10) == ([7, 8, 9], [-1, 0, 0])
    assert continuation_tree([], 5) == ([], [])


def brute_longest(corpus_docs, ctx, max_suffix):
    text = []
    for d in corpus_docs:
        text += [None] + d
    best = 0
    for m in range(1, min(max_suffix, len(ctx)) + 1):
        q = ctx[-m:]
        if any(text[i:i + m] == q for i in range(len(text) - m + 1)):
            best = m
        else:
            break
    return best


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=12), min_size=1, max_size=3),
       st.lists(st.integers(0, 3), min_size=1, max_size=8), st.integers(1, 6))
def test_longest_match_and_counts_match_brute_force(docs, ctx, max_suffix):
    ds = Datastore.build(docs)
    m, lo, hi = ds.longest_match(ctx, max_suffix)
    assert m == brute_longest(docs, ctx, max_suffix)
    if m:
        q = ctx[-m:]
        assert hi - lo == sum(d[i:i + m] == q for d in docs for i in range(len(d) - m + 1))


def test_builder_command_and_errors(tmp_path, capsys):
    src = tmp_path / "corpus.txt"
    src.write_text("1 2 3 1 2 4\n5 6\n")
    out = tmp_path / "ds.npz"
    assert main(["--out", str(out), "--tokens", str(src)]) == 0
    ds = Datastore.load(str(out))
    assert ds.tokens.tolist() == [1, 2, 3, 1, 2, 4, -1, 5, 6]
    assert main(["--out", str(out), "--tokens", str(tmp_path / "missing.txt")]) == 2
    bad = tmp_path / "bad.txt"
    bad.write_text("1 2 x\n")
    assert main(["--out", str(out), "--tokens", str(bad)]) == 2
    assert main(["--out", str(out), "--text", str(src)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(e.startswith("error: ") for e in err)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(OuroborosError, match="corrupt"):
        Datastore.load(str(junk))


def test_config_and_vocabulary_errors(tmp_path):
    target = HFBackend(get_model("llama"))
    with pytest.raises(OuroborosError) as e:   # no datastore: only the simulator has one (tests/test_sim_stand_in.py)
        build_proposer("rest", {}, target)
    assert str(e.value) == NO_DATASTORE and "strategy.params.datastore=PATH" in NO_DATASTORE
    with pytest.raises(OuroborosError, match="not both"):
        build_proposer("rest", {"datastore": str(tmp_path / "ds.npz"), "corpus": [1, 2]}, target)
    with pytest.raises(OuroborosError, match="vocabulary"):
        build_proposer("rest", {"corpus": [1, 2, 999]}, target)


def test_retrieved_tree_is_verified_and_counted():
    m = get_model("llama")
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    text = prompt + reference_greedy(m, prompt, 30)
    target = HFBackend(m)
    # a corpus holding the true continuation plus distractors: most steps accept several datastore tokens
    prop = build_proposer("rest", {"corpus": text + [7, 7] + [t ^ 1 for t in text], "num_nodes": 12}, target)
    res = decode(target, prop, prompt, 30)
    assert res.output == text[len(prompt):]
    s = res.proposer_stats
    assert s["accepted:datastore"] == sum(r.accepted for r in res.steps) > 15
    assert len(res.steps) < 12
