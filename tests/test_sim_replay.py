"""Trace replay and proxy: a real (tiny hf) run recorded and replayed on the sim backend makes the same token
decisions with the same forwards (k, ctx), so the modelled time equals the cost model summed over the real run's
forwards; the proxy backend charges exactly that too."""

import pytest
from conftest import get_draft, get_model
from reference import reference_greedy

from ouroboros.backends.base import OuroborosError
from ouroboros.backends.hf import HFBackend
from ouroboros.datasets import Prompt
from ouroboros.decode import decode
from ouroboros.strategies import build_proposer
from simulators import CostModel, ProxyBackend, SimClock, make_pair
from simulators.profiles import load_conf
from simulators.replay import Recorder, save_trace

COST = CostModel(fixed_s=0.01, token_s=0.001, weight_s=0.02, flop_s_per_token=0.0005, tile=4, kv_s_per_ctx=1e-5)


class ShapeLog:
    """Wraps a backend and logs (k, ctx) of every forward."""

    def __init__(self, inner, log):
        self.inner, self.log = inner, log

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def tokens(self):
        return self.inner.tokens

    def score(self, draft, want_logits=False):
        self.log.append((len(self.inner.tokens) - self.inner.cache_len + len(draft), self.inner.cache_len))
        return self.inner.score(draft, want_logits)


@pytest.mark.parametrize("name, params", [("speculative", {"gamma": 3}), ("pld", {}), ("vanilla", {})])
def test_replay_reproduces_the_real_run(tmp_path, name, params):
    prompts = [Prompt("a", [3, 14, 15, 9, 2, 6, 3, 14]), Prompt("b", [7, 7, 1, 2, 7, 7, 1])]
    tgt, drf = Recorder(HFBackend(get_model("llama"))), Recorder(HFBackend(get_draft("llama", noise=0.1)))
    real_log: list = []
    real_out = []
    for p in prompts:
        prop = build_proposer(name, params, ShapeLog(tgt, real_log), drf)
        real_out.append(decode(ShapeLog(tgt, real_log), prop, p.ids, 20).output)
        assert real_out[-1] == reference_greedy(get_model("llama"), p.ids, 20)
    path = str(tmp_path / "trace.json")
    save_trace(path, {"target": tgt, "draft": drf}, prompts, ())
    model = load_conf("model", "yi34b_6b")
    pair = make_pair(model, load_conf("hardware", "h200"), {"tokens": "replay", "trace": path})
    pair.costs["target"] = COST
    pair.target.cost = COST  # type: ignore[attr-defined]
    sim_log: list = []
    t0 = pair.clock.now()
    sim_out = []
    for p in pair.default_prompts(2, 0):
        prop = build_proposer(name, params, ShapeLog(pair.target, sim_log), pair.draft)
        sim_out.append(decode(ShapeLog(pair.target, sim_log), prop, p.ids, 20).output)
    assert sim_out == real_out
    assert sim_log == real_log
    assert pair.target.lm.misses == 0  # type: ignore[attr-defined]
    if name != "speculative":  # only the target's forwards were charged
        expected = sum(COST.forward_s(k, c) for k, c in real_log) + sum(COST.forward_s(len(p.ids) - 1, 0)
                                                                        for p in prompts)
        assert pair.clock.now() - t0 == pytest.approx(expected)


def test_proxy_charges_the_cost_of_the_real_forwards():
    clock = SimClock()
    log: list = []
    target = ProxyBackend(HFBackend(get_model("llama")), COST, clock)
    res = decode(ShapeLog(target, log), build_proposer("pld", {}, target), [5, 6, 7, 5, 6, 7], 15)
    assert res.output == reference_greedy(get_model("llama"), [5, 6, 7, 5, 6, 7], 15)
    assert clock.now() == pytest.approx(COST.forward_s(5, 0) + sum(COST.forward_s(k, c) for k, c in log))


def test_replay_needs_a_trace(tmp_path):
    with pytest.raises(OuroborosError, match="needs sim.trace"):
        make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "h200"), {"tokens": "replay"})
    with pytest.raises(OuroborosError, match="not found"):
        make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "h200"),
                  {"tokens": "replay", "trace": str(tmp_path / "none.json")})
