"""hf backend: tree scoring equals each path run alone; the KV cache always equals a fresh recomputation; the
sequence bookkeeping it shares with the sim backend (SequenceBackend) behaves alike on both."""

import copy

import pytest
import torch
from conftest import get_model
from hypothesis import given, settings
from hypothesis import strategies as st

from ouroboros.backends.hf import HFBackend
from ouroboros.loop.draft import Draft
from ouroboros.loop.verify import verify_greedy


@torch.no_grad()
def fresh_next_logits(model, tokens):
    return model(torch.tensor([tokens])).logits[0, -1]


@torch.no_grad()
def check_kv(backend: HFBackend):
    """Cached state == recomputation: feed the pending tokens through a copy of the cache and compare the
    next-token logits with a cache-free forward over the whole committed sequence."""
    cache = backend.cache
    assert all(layer.keys.shape[-2] == backend.cache_len for layer in cache.layers if layer.keys is not None)
    assert 1 <= len(backend.tokens) - backend.cache_len
    saved = copy.deepcopy(cache)
    pending = backend.tokens[backend.cache_len:]
    pos = torch.arange(backend.cache_len, len(backend.tokens)).unsqueeze(0)
    out = backend.model(input_ids=torch.tensor([pending]), position_ids=pos, use_cache=True,
                        **{backend._cache_kw: saved})
    torch.testing.assert_close(out.logits[0, -1], fresh_next_logits(backend.model, backend.tokens),
                               rtol=1e-9, atol=1e-9)


@st.composite
def random_tree(draw, vocab):
    n = draw(st.integers(0, 10))
    d = Draft()
    for i in range(n):
        d.add_node(draw(st.integers(0, vocab - 1)), draw(st.integers(-1, i - 1)), "test")
    return d


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_tree_scoring_equals_path_alone(family, data):
    model = get_model(family)
    prompt = data.draw(st.lists(st.integers(0, 63), min_size=1, max_size=12))
    d = data.draw(random_tree(64))
    b = HFBackend(model)
    b.prefill(prompt)
    scores = b.score(d)
    assert scores.preds[0] == int(fresh_next_logits(model, prompt).argmax())
    for i in range(len(d)):
        path_tokens = [d.tokens[j] for j in d.path_to(i)]
        assert scores.preds[i + 1] == int(fresh_next_logits(model, prompt + path_tokens).argmax())


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_kv_invariant_after_tree_commits(family, data):
    """Random trees where the target's true continuation hangs at a random branch slot (often not the first):
    after every commit the cache equals a fresh recomputation."""
    model = get_model(family)
    prompt = data.draw(st.lists(st.integers(0, 63), min_size=1, max_size=8))
    b = HFBackend(model)
    b.prefill(prompt)
    check_kv(b)
    for _ in range(data.draw(st.integers(1, 4))):
        # true continuation (3 tokens) from the reference
        seq, truth = list(b.tokens), []
        for _ in range(3):
            truth.append(int(fresh_next_logits(model, seq + truth).argmax()))
        d = Draft()
        n_decoys = data.draw(st.integers(0, 3))
        slot = data.draw(st.integers(0, n_decoys))
        for k in range(n_decoys + 1):
            if k == slot:
                d.add_path(truth[: data.draw(st.integers(1, 3))], source="truth", merge=False)
            else:
                decoy = data.draw(st.lists(st.integers(0, 63), min_size=1, max_size=3))
                d.add_path(decoy, source="decoy", merge=False)
        v = verify_greedy(d, b.score(d).preds)
        assert v.tokens[: len(v.path)] == truth[: len(v.path)] and len(v.path) >= 1
        b.commit(v.path, v.tokens)
        check_kv(b)
    # rollback keeps the invariant too
    b.rollback(min(2, len(b.tokens) - 1))
    check_kv(b)


def _sim_backend():
    from simulators import make_pair
    from simulators.architectures import load_conf

    pair = make_pair(dict(load_conf("model", "llama70b_7b")), dict(load_conf("hardware", "h100")),
                     {"devices": 2, "placement": "tensor"})
    return pair.target


@pytest.mark.parametrize("kind", ["hf", "sim"])
def test_shared_bookkeeping_on_both_backends(kind):
    """hf and sim share one SequenceBackend: the same lengths after prefill / commit / rollback / append, the same
    order errors (score twice, commit without score, rollback past the prompt), and fresh() starts empty."""
    b = HFBackend(get_model("llama")) if kind == "hf" else _sim_backend()
    with pytest.raises(RuntimeError, match="no pending token"):
        b.score(Draft())
    b.prefill([5, 6, 7, 8])
    assert (b.tokens, b.cache_len, b.counters.prefill_tokens) == ([5, 6, 7, 8], 3, 3)
    s = b.score(Draft.chain([9, 10]))
    with pytest.raises(RuntimeError, match="twice"):
        b.score(Draft())
    assert (b.counters.forwards, b.counters.tokens) == (1, 3)
    b.commit([0], [9, s.preds[1]])   # node 0 accepted, then the bonus token (pending)
    assert (b.tokens[4:], b.cache_len) == ([9, s.preds[1]], 5)
    with pytest.raises(RuntimeError, match="without a preceding score"):
        b.commit([], [1])
    b.append([3, 4])
    assert b.tokens[-2:] == [3, 4] and b.cache_len == 5
    b.rollback(3)   # into the cached part: the cache shrinks with it
    assert (b.tokens, b.cache_len) == ([5, 6, 7, 8, 9], 4)
    with pytest.raises(ValueError, match="cannot roll back 5"):
        b.rollback(5)
    if kind == "hf":
        check_kv(b)
    after = b.score(Draft()).preds[0]   # the state after rollback predicts as a fresh prefill of the same tokens
    new = b.fresh()
    assert new.tokens == [] and new.cache_len == 0 and new.counters.forwards == 0
    new.prefill([5, 6, 7, 8, 9])
    assert new.score(Draft()).preds[0] == after
