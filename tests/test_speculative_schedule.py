"""`speculative` with `schedule=hf` (transformers' assisted-generation heuristic): token-identical to the reference
greedy decoder on the hf backend, and its draft length follows transformers' rule step by step, across prompts."""

from dataclasses import replace

import pytest
from conftest import get_draft, get_model
from reference import reference_greedy

from ouroboros.backends.hf import HFBackend
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.strategies import build_proposer
from ouroboros.strategies.speculative import hf_next_length
from simulators.lab.calibration.paper_fit import TASKS, task_pair

SMALL = replace(TASKS[3], max_new=40)  # CNN/DM settings, short outputs


def test_hf_next_length_golden():
    assert [hf_next_length(5, 5), hf_next_length(5, 4), hf_next_length(1, 0), hf_next_length(2, 2)] == [7, 4, 1, 4]


@pytest.mark.parametrize("noise", [0.0, 0.1, 3.0])
@pytest.mark.parametrize("gamma", [1, 5])
def test_hf_schedule_is_lossless(noise, gamma):
    target_model, draft_model = get_model("llama"), get_draft("llama", noise=noise)
    target, draft = HFBackend(target_model), HFBackend(draft_model)
    sps = build_proposer("speculative", {"gamma": gamma, "schedule": "hf"}, target, draft)
    for prompt, max_new in (([3, 7, 7, 1, 9], 20), ([5] * 12, 17), ([11, 2], 9)):
        res = decode(target, sps, prompt, max_new)
        assert res.output == reference_greedy(target_model, prompt, max_new)


def test_hf_schedule_follows_the_rule_across_prompts():
    pair = task_pair(SMALL, 0.8, 0)
    sps = build_proposer("speculative", {"gamma": 5, "schedule": "hf"}, pair.target, pair.draft)
    van = task_pair(SMALL, 0.8, 0)
    seen: list[tuple[int, int, int]] = []
    orig = sps.observe

    def spy(verdict, scores, state):
        before = sps._n
        orig(verdict, scores, state)
        seen.append((before, len(verdict.path), sps._n))

    sps.observe = spy  # type: ignore[method-assign]
    for p in pair.default_prompts(2, 0):
        first = len(seen)
        out = decode(pair.target, sps, p.ids, 40, pair.eos_ids).output
        assert out == decode(van.target, build_proposer("vanilla", {}, van.target), p.ids, 40, van.eos_ids).output
        if first:  # the length is kept across prompts
            assert seen[first][0] == seen[first - 1][2]
    lengths = {b for b, _, _ in seen}
    assert len(lengths) > 2  # it did move
    for before, m, after in seen:
        assert after == (before + 2 if m == before else max(1, before - 1))


def test_bad_schedule_is_one_line():
    with pytest.raises(OuroborosError, match="speculative.schedule must be one of constant, hf, got 'hf2'"):
        build_proposer("speculative", {"schedule": "hf2"}, *[HFBackend(get_model("llama"))] * 2)
