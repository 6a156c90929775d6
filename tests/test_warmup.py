"""The harness' warm-up decode (one short untimed decode of the first prompt, `warmup=true`) must not reach the
measured prompts: a strategy that keeps state across prompts (suffix's global tree, Token Recycling's matrix,
Ouroboros' pool, the hf draft-length schedule) would otherwise start its first prompt knowing the first tokens of
that prompt's own answer. On the simulator (deterministic tokens) every step of a warmed-up run equals a cold one."""

import pytest

from ouroboros.running.harness import StrategyRun, StrategyRunner, run_prompts
from simulators import make_pair
from simulators.architectures import load_conf

HISTORY = [("suffix", {}), ("recycling", {}), ("ouroboros", {}), ("speculative", {"schedule": "hf"})]


def steps(name: str, params: dict, warmup: bool) -> list[tuple[list[int], list[int]]]:
    pair = make_pair(dict(load_conf("model", "llama70b_7b")), dict(load_conf("hardware", "a800x2")),
                     {"loop_guard": True, "self_guard": True})   # text that does not loop (a real LM's)
    prompts = [p.ids for p in pair.default_prompts(3, seed=1)]
    runner = StrategyRunner(StrategyRun(name, params), pair.target, pair.draft, pair.eos_ids)
    res = run_prompts(runner, prompts, 48, warmup=warmup)
    return [(p.output, [s.new_tokens for s in p.steps]) for p in res.prompts]


@pytest.mark.parametrize(("name", "params"), HISTORY, ids=[n for n, _ in HISTORY])
def test_the_warm_up_leaves_no_state_in_the_measured_proposer(name, params):
    cold, warm = steps(name, params, warmup=False), steps(name, params, warmup=True)
    assert [o for o, _ in warm] == [o for o, _ in cold]        # lossless either way
    assert warm == cold                                        # and the same steps: the warm-up taught it nothing
    assert sum(len(s) for _, s in cold) < sum(len(o) for o, _ in cold)   # a strategy that drafted something
