"""Phrase pool: golden tables, a hypothesis state machine against a plain-dict model, and save/load errors."""

import json

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ouroboros.errors import OuroborosError
from ouroboros.strategies.phrase_pool import SOURCES, TOKEN_BYTES, Phrase, PhrasePool


def test_golden_per_key_refresh_and_eviction():
    p = PhrasePool(per_key=2)
    assert p.add(5, [1, 2], "lookahead") is True
    p.add(5, [3], "verify")
    assert p.add(5, [1, 2], "verify") is False  # refresh: [3] is now the oldest of key 5
    p.add(5, [4], "prompt")
    assert p.lookup(5, 10) == [Phrase((4,), "prompt"), Phrase((1, 2), "verify")]  # newest first — not [3] at all
    assert p.evicted == 1 and len(p) == 2 and p.n_bytes == TOKEN_BYTES * (2 + 3)


def test_golden_global_lru_by_phrases_and_bytes():
    p = PhrasePool(per_key=5, max_phrases=3)
    for key in (1, 2, 3):
        p.add(key, [9], "verify")
    p.touch(1, [9])                      # key 1 is now the most recent
    p.add(4, [9], "verify")              # evicts key 2 (least recently refreshed), not key 1
    assert [k for k, _, _ in p.items()] == [3, 1, 4]
    b = PhrasePool(per_key=5, max_bytes=TOKEN_BYTES * 7)   # room for 7 stored tokens
    b.add(1, [1, 1], "verify")           # 3 tokens
    b.add(2, [2, 2], "verify")           # 6
    b.add(3, [3], "verify")              # 8 > 7 -> evict key 1
    assert [k for k, _, _ in b.items()] == [2, 3] and b.n_bytes == TOKEN_BYTES * 5


def test_history_source_after_new_epoch():
    p = PhrasePool(per_key=3)
    p.add(7, [1], "lookahead")
    p.new_epoch()
    p.add(7, [2], "verify")
    assert p.lookup(7, 5) == [Phrase((2,), "verify"), Phrase((1,), "history")]
    p.add(7, [1], "corrected")          # re-found now: current again
    assert p.lookup(7, 1) == [Phrase((1,), "corrected")]
    assert p.size_by_source() == {"verify": 1, "corrected": 1}


class PoolMachine(RuleBasedStateMachine):
    """PhrasePool vs a plain dict {(key, tokens): [source, epoch, stamp]} with the documented policy."""

    def __init__(self):
        super().__init__()
        self.per_key, self.max_phrases, self.max_bytes = 2, 6, TOKEN_BYTES * 14
        self.pool = PhrasePool(self.per_key, self.max_phrases, self.max_bytes)
        self.model: dict = {}
        self.clock = 0
        self.epoch = 0

    def _tick(self):
        self.clock += 1
        return self.clock

    def _evict_oldest(self, entries):
        del self.model[min(entries, key=lambda k: self.model[k][2])]

    @rule(key=st.integers(0, 3), toks=st.lists(st.integers(0, 3), min_size=1, max_size=3),
          src=st.sampled_from(SOURCES))
    def add(self, key, toks, src):
        new = self.pool.add(key, toks, src)
        gk = (key, tuple(toks))
        assert new == (gk not in self.model)
        self.model[gk] = [src, self.epoch, self._tick()]
        same_key = [k for k in self.model if k[0] == key]
        if len(same_key) > self.per_key:
            self._evict_oldest(same_key)
        while len(self.model) > self.max_phrases or sum(TOKEN_BYTES * (1 + len(t)) for _, t in self.model) > \
                self.max_bytes:
            self._evict_oldest(list(self.model))

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def touch_known(self, data):
        gk = data.draw(st.sampled_from(sorted(self.model)))
        self.pool.touch(*gk)
        self.model[gk][2] = self._tick()

    @rule(key=st.integers(0, 3), toks=st.lists(st.integers(0, 3), min_size=1, max_size=3))
    def remove(self, key, toks):
        gk = (key, tuple(toks))
        assert self.pool.remove(key, toks) == (gk in self.model)
        self.model.pop(gk, None)

    @rule()
    def new_epoch(self):
        self.pool.new_epoch()
        self.epoch += 1

    @rule(key=st.integers(0, 3), k=st.integers(0, 4))
    def lookup(self, key, k):
        mine = sorted((kk for kk in self.model if kk[0] == key), key=lambda kk: -self.model[kk][2])[:k]
        expect = [Phrase(t, self.model[(key, t)][0] if self.model[(key, t)][1] == self.epoch else "history")
                  for _, t in mine]
        assert self.pool.lookup(key, k) == expect

    @invariant()
    def same_contents(self):
        order = sorted(self.model, key=lambda kk: self.model[kk][2])
        assert [(k, t) for k, t, _ in self.pool.items()] == order
        assert self.pool.n_bytes == sum(TOKEN_BYTES * (1 + len(t)) for _, t in self.model)
        assert len(self.pool) <= self.max_phrases and self.pool.n_bytes <= self.max_bytes


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_save_load_roundtrip_keeps_order_and_marks_history(tmp_path):
    p = PhrasePool(per_key=3)
    p.add(1, [2, 3], "lookahead")
    p.add(4, [5], "verify")
    p.add(1, [6], "corrected")
    path = str(tmp_path / "pool.json")
    p.save(path, {"vocab_size": 10})
    q = PhrasePool(per_key=3)
    assert q.load(path, {"vocab_size": 10}) is None
    assert [(k, t) for k, t, _ in q.items()] == [(k, t) for k, t, _ in p.items()]
    assert {s for _, _, s in q.items()} == {"history"}
    assert q.lookup(1, 5) == [Phrase((6,), "history"), Phrase((2, 3), "history")]


@pytest.mark.parametrize("content, reason", [
    ("{not json", "corrupt"),
    (json.dumps({"format": "other", "version": 1}), "not a phrase pool"),
    (json.dumps({"format": "ouroboros-phrase-pool", "version": 99, "phrases": []}), "version 99"),
    (json.dumps({"format": "ouroboros-phrase-pool", "version": 1, "meta": {"vocab_size": 5}, "phrases": []}),
     "incompatible"),
    (json.dumps({"format": "ouroboros-phrase-pool", "version": 1, "meta": {"vocab_size": 10},
                 "phrases": [[1, [99], "verify"]]}), "bad entry #0"),
])
def test_bad_files_raise_one_line_or_leave_empty(tmp_path, content, reason):
    path = tmp_path / "pool.json"
    path.write_text(content)
    p = PhrasePool()
    with pytest.raises(OuroborosError, match=reason) as e:
        p.load(str(path), {"vocab_size": 10})
    assert "\n" not in str(e.value)
    assert reason in p.load(str(path), {"vocab_size": 10}, on_error="empty") and len(p) == 0
    with pytest.raises(OuroborosError, match="does not exist"):
        p.load(str(tmp_path / "missing.json"))
