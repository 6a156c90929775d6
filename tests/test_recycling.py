"""strategy=recycling (ouroboros/strategies/recycling.py): golden tables on the template and the matrix, the update
from every scored row, the edge cases (an empty matrix, EOS inside a draft, history across prompts on and off, a
forward without logits), one-line errors, and the loop asking for logits only when a proposer reads them."""

import pytest
import torch
from conftest import get_model
from reference import reference_greedy

from ouroboros.backends.hf import HFBackend
from ouroboros.errors import OuroborosError
from ouroboros.loop.contracts import DecodeState, Scores
from ouroboros.loop.decode import decode, greedy_verifier
from ouroboros.loop.verify import Verdict
from ouroboros.strategies import build_proposer, make_config
from ouroboros.strategies.recycling import PAPER_TREE, fill_template, topk_rows, widths_template


def test_golden_fill():
    tokens, parents = fill_template({5: [6, 7], 6: [8]}, 5, [(0,), (1,), (0, 0)], 8)
    assert (tokens, parents) == ([6, 7, 8], [-1, -1, 0])


def test_missing_rows_drop_their_subtree_and_depth_cuts():
    m = {5: [6], 7: [9]}
    rows = [0, 0]
    assert fill_template(m, 5, [(0,), (1,), (0, 0), (1, 0)], 8, rows) == ([6], [-1])  # no [1]; 6 has no row
    assert rows == [3, 1]   # [0] found; [1] past the root's row; [0, 0] under 6, which has none; [1, 0] not looked up
    fill_template({5: [6, 7], 6: [8]}, 9, [(0,), (1,), (0, 0)], 8, rows)
    assert rows == [5, 1]   # root 9 has no row: both children looked up and missed, [0, 0] never reached
    assert fill_template({}, 5, list(PAPER_TREE), 8) == ([], [])                 # empty matrix: empty draft
    assert fill_template({5: [5]}, 5, [(0,), (0, 0), (0, 0, 0)], 2) == ([5, 5], [-1, 0])


def test_templates():
    assert widths_template([2, 1]) == [(0,), (1,), (0, 0), (1, 0)]
    assert len(PAPER_TREE) == 80 and max(len(p) for p in PAPER_TREE) == 6
    assert [sum(len(p) == d for p in PAPER_TREE) for d in range(1, 7)] == [8, 21, 25, 15, 8, 3]
    assert len(make_config("recycling", {}).template()) == 80
    small = make_config("recycling", {"k": 2}).template()
    assert small and all(max(p) < 2 for p in small) and all(p[:-1] in set(small) for p in small if len(p) > 1)
    assert make_config("recycling", {"tree": [[1, 0], [0], [1]]}).template() == [(0,), (1,), (1, 0)]


def test_topk_rows_drop_minus_inf():
    logits = torch.tensor([[0.0, float("-inf"), 2.0, 1.0], [5.0, 4.0, 3.0, 2.0]])
    assert topk_rows(logits, 3) == [[2, 3, 0], [0, 1, 2]]
    assert topk_rows(logits, 9) == [[2, 3, 0], [0, 1, 2, 3]]


def test_every_scored_row_updates_the_matrix():
    target = HFBackend(get_model("llama"))
    prop = build_proposer("recycling", {"k": 3, "widths": [2]}, target)
    prompt = [4, 9, 4, 9]
    target.prefill(prompt)
    prop.begin(prompt)
    prop.matrix[9] = [4, 11]                      # the root's row: the draft is [4, 11] as siblings
    state = DecodeState(tokens=target.tokens, prompt_len=4, remaining=8, room=100)
    draft = prop.propose(state)
    assert draft.tokens == [4, 11] and draft.parents == [-1, -1]
    scores = target.score(draft, want_logits=True)
    want = scores.logits.topk(3, dim=-1).indices.tolist()
    prop.observe(greedy_verifier(draft, scores, state), scores, state)
    assert prop.matrix[9] == want[0] and prop.matrix[4] == want[1] and prop.matrix[11] == want[2]


def test_without_logits_the_prediction_moves_to_the_front():
    prop = build_proposer("recycling", {"k": 3, "widths": [1]}, HFBackend(get_model("llama")))
    prop.matrix = {7: [1, 2, 3]}
    state = DecodeState(tokens=[7], prompt_len=1, remaining=4, room=10)
    assert prop.propose(state).tokens == [1]     # root 7, template [[0]]
    prop.observe(Verdict([], [2], [2, 5], 0), Scores(preds=[2, 5]), state)   # a forward without logits
    assert prop.matrix[7] == [2, 1, 3] and prop.matrix[1] == [5]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_lossless_and_learns_across_prompts(family):
    model = get_model(family)
    target = HFBackend(model)
    prompts = [[3, 5, 7, 3, 5, 7, 3], [9, 8, 3], [3, 5, 7, 3, 5]]   # the second ends with the first's root
    hot = build_proposer("recycling", {}, target)
    cold = build_proposer("recycling", {"keep_history": False}, target)
    hot_res, cold_res = [], []
    for p in prompts:
        want = reference_greedy(model, p, 20)
        hot_res.append(decode(target, hot, p, 20))
        cold_res.append(decode(target, cold, p, 20))
        assert hot_res[-1].output == cold_res[-1].output == want
    assert cold_res[1].steps[0].n_nodes == 0            # cleared per prompt: the first step has nothing
    assert hot_res[1].steps[0].n_nodes > 0               # hot start: rows from the earlier prompts
    assert hot.stats()["matrix_rows"] >= cold.stats()["matrix_rows"]


def test_eos_inside_a_draft_stops_there():
    model = get_model("llama")
    prompt = [49, 53, 5, 33, 62, 51]
    first = reference_greedy(model, prompt, 12)
    target = HFBackend(model)
    prop = build_proposer("recycling", {"k": 2, "widths": [1] * 12}, target)   # a chain of the top candidates
    decode(target, prop, prompt, 12)            # the matrix now holds the greedy continuation after each token
    hits = []
    for i in range(2, 9):
        eos = (first[i],)
        if first[i] in first[:i]:
            continue
        res = decode(target, prop, prompt, 12, eos_ids=eos)
        assert res.output == reference_greedy(model, prompt, 12, eos) and res.output[-1] == eos[0]
        last = res.steps[-1]
        hits.append(last.accepted >= 1 and last.new_tokens == last.accepted)  # EOS accepted from the draft
    assert any(hits)


def test_bad_params_are_one_line_errors():
    for params, msg in [({"k": 0}, "k must be >= 1"),
                        ({"tree": [[0]], "widths": [1]}, "not both"),
                        ({"widths": []}, "widths must be"),
                        ({"widths": [9]}, "widths must be"),
                        ({"tree": [[0, 0]]}, "no parent path"),
                        ({"tree": [[8]]}, "indices in 0..k-1"),
                        ({"tree": [[0], [0]]}, "repeats"),
                        ({"tree": [[]]}, "non-empty")]:
        with pytest.raises(OuroborosError, match=msg):
            make_config("recycling", params)


class _Recorder(HFBackend):
    def score(self, draft, want_logits=False):
        self.asked = getattr(self, "asked", []) + [want_logits]
        return super().score(draft, want_logits)


@pytest.mark.parametrize("name, asks", [("recycling", True), ("suffix", False), ("pld", False)])
def test_the_loop_asks_for_logits_only_for_a_proposer_that_reads_them(name, asks):
    target = _Recorder(get_model("llama"))
    decode(target, build_proposer(name, {}, target), [1, 2, 1, 2], 4)
    assert set(target.asked) == {asks}


def test_simulated_prompts_with_history_are_lossless_and_the_matrix_holds_runner_ups():
    """On the simulator the surrogate's logits rank its runner-ups, so rows hold more than the prediction."""
    from test_suffix import greedy_lm

    from simulators import make_pair
    from simulators.architectures import load_conf

    pair = make_pair(dict(load_conf("model", "llama70b_7b")), dict(load_conf("hardware", "a800x2")), {})
    prop = build_proposer("recycling", {}, pair.target)
    for p in pair.default_prompts(6, 3):
        res = decode(pair.target, prop, p.ids, 48, pair.eos_ids, prompt_id=p.id)
        assert res.output == greedy_lm(pair.target.lm, p.ids, 48, pair.eos_ids)
    assert prop.stats()["accepted:matrix"] > 0
    assert max(len(row) for row in prop.matrix.values()) > 1


def test_simulated_top_k_holds_the_shorter_contexts_continuations():
    """A real LM's top-k holds the plausible next tokens of its shorter contexts too: the surrogate's ranking lists
    the longest matching context's continuations first, then each shorter context's new ones, without repeats."""
    from simulators.simconfig import SimConfig
    from simulators.surrogate import NGramLM

    lm = NGramLM(SimConfig())
    tails = [k for k in lm.table if len(k) == lm.order][:200]
    longer = 0
    for tail in tails:
        ranked = lm.ranked(tail)
        contexts = list(dict.fromkeys(c for n in range(lm.order, 0, -1) for c in lm.table.get(tail[-n:], ())))
        assert ranked[:len(lm.candidates(tail))] == list(lm.candidates(tail))
        assert ranked[:len(contexts)] == contexts and len(ranked) == len(set(ranked))
        longer += len(contexts) > len(lm.candidates(tail))
    assert tails and longer > len(tails) // 2


def test_simulated_top_k_is_always_full():
    """A real forward's top-k is k tokens of a whole vocabulary, so a real Token Recycling row always holds k
    candidates; the surrogate's ranking goes on after the contexts' continuations with the corpus' most frequent
    tokens (most frequent first), so a simulated row is full too and the drafted tree is as wide as a real one."""
    from simulators.simconfig import SimConfig
    from simulators.surrogate import RANK_FILL, NGramLM

    lm = NGramLM(SimConfig())
    assert len(lm.frequent) == RANK_FILL >= 8 and all(0 < t < lm.plain_vocab for t in lm.frequent)
    counts = __import__("collections").Counter(t for t in lm.corpus.ids if 0 < t < lm.plain_vocab)
    assert counts[lm.frequent[0]] == max(counts.values())
    for tail in [k for k in lm.table if len(k) == lm.order][:50] + [(), (lm.plain_vocab - 1,)]:
        ranked = lm.ranked(tail)
        own = list(dict.fromkeys(c for n in range(min(lm.order, len(tail)), 0, -1)
                                 for c in lm.table.get(tail[-n:], ()))) or list(lm.candidates(tail))
        assert len(ranked) >= RANK_FILL and ranked == own + [c for c in lm.frequent if c not in own]
