"""Trace replay and proxy: a real (tiny hf) run recorded and replayed on the sim backend makes the same token
decisions with the same forwards (k, ctx), so the modelled time equals the cost model summed over the real run's
forwards; the proxy backend charges exactly that too."""

import pytest
from conftest import get_draft, get_model
from reference import reference_greedy

from ouroboros.backends.hf import HFBackend
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.prompts.datasets import Prompt
from ouroboros.strategies import build_proposer
from simulators import CostModel, ProxyBackend, SimClock, make_pair
from simulators.architectures import load_conf
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


def test_realcheck_recording_replays_with_no_unrecorded_context(tmp_path, monkeypatch):
    """realcheck's recording topology (every run its own Recorders over ONE shared target and draft backend,
    prompts interleaved, stateful proposers carrying their pool from prompt to prompt after a warm-up) replays
    as `check decisions` replays it: same outputs, no context the recording never saw, none answered twice."""
    import types

    from simulators.lab.checks import clock as realcheck
    from simulators.lab.decisions import stats as decisions
    from simulators.replay import load_trace

    target, draft = HFBackend(get_model("llama")), HFBackend(get_draft("llama", noise=0.3))
    prompts = [Prompt("a", [3, 14, 15, 9, 2, 6, 3, 14, 15]), Prompt("b", [7, 7, 1, 2, 7, 7, 1, 2]),
               Prompt("c", [5, 9, 5, 9, 11, 5, 9, 5])]
    monkeypatch.setattr(realcheck, "load_real",
                        lambda args: (types.SimpleNamespace(eos_ids=()), prompts, target, draft))
    labels = ["ouroboros:gamma=3,W=3,N=3,G=3,K=2", "lookahead:W=3,N=3,G=3", "speculative:gamma=3", "pld"]
    specs = [realcheck.RunSpec(lb.split(":")[0], dict(kv.split("=") for kv in lb.split(":")[1].split(","))
                               if ":" in lb else {}, lb) for lb in labels]
    for s in specs:
        s.params = {k: int(v) for k, v in s.params.items()}
    args = types.SimpleNamespace(max_new_tokens=24, dtype="float64", threads=0, dataset=["text"], limit=None, ids=None)
    realcheck.record(args, specs, str(tmp_path))
    for lb in labels:
        doc = load_trace(str(tmp_path / realcheck.trace_name(lb)))
        assert all(m["conflicts"] == 0 for m in doc["models"].values()), lb
    runs = decisions.load_real(str(tmp_path))   # raises if a replayed output differs from the recorded one
    assert sorted(runs) == sorted(labels)
    for lb, run in runs.items():
        assert run.unrecorded == {}, lb
        for p, res in zip(prompts, run.results, strict=True):
            assert res.output == reference_greedy(get_model("llama"), p.ids, 24), lb


def test_a_context_answered_two_ways_replays_as_answered(tmp_path):
    """A near-tie (the real model answering one context differently in two forwards) is kept per forward: the
    replay's forward n gets the answer of the recording's forward n, so the replay still makes every decision."""
    from ouroboros.loop.contracts import Scores
    from ouroboros.loop.draft import Draft
    from simulators.replay import load_trace, trace_lms

    class Flaky(HFBackend):
        """The tiny model, except that its 2nd forward answers its root context with token 1."""

        def score(self, draft, want_logits=False):
            out = super().score(draft, want_logits)
            if self.counters.forwards == 2:
                return Scores([1, *out.preds[1:]], out.logits)
            return out

    rec = Recorder(Flaky(get_model("llama")))
    rec.prefill([3, 14, 15, 9])
    answers = []
    for _ in range(3):
        answers.append(rec.score(Draft.chain([2, 6])).preds[0])
        rec.commit([], [])    # the pending prompt token enters the cache; take it back out, pending again
        rec.rollback(1)
        rec.append([9])
    assert answers[0] == answers[2] != answers[1] == 1 and rec.conflicts == 2
    path = str(tmp_path / "t.json")
    save_trace(path, {"target": rec}, [Prompt("a", [3, 14, 15, 9])], ())
    doc = load_trace(path)
    assert doc["models"]["target"]["conflicts"] == 2
    lm = trace_lms(doc)["target"]
    assert len(lm.history) == 1 and lm.history[next(iter(lm.history))] == [(0, answers[0]), (2, 1), (3, answers[0])]
    model = load_conf("model", "yi34b_6b")
    pair = make_pair(model, load_conf("hardware", "h200"), {"tokens": "replay", "trace": path})
    pair.target.prefill([3, 14, 15, 9])
    got = []
    for _ in range(3):
        got.append(pair.target.score(Draft.chain([2, 6])).preds[0])
        pair.target.commit([], [])
        pair.target.rollback(1)
        pair.target.append([9])
    assert got == answers and pair.target.lm.misses == 0  # type: ignore[attr-defined]
