"""Batched decoding (ouroboros/serving/batch.py): every row of a batch is token-identical to its own batch-1 greedy
reference (fp64 tiny models, rows of different lengths, EOS in one row while the others go on), for every
strategy, on the hf backend (one real batched forward per model per step) and on the simulator; the batched clock
charges one forward per batch; load-aware drafting stays lossless and stops drafting where it cannot pay."""

import pytest
import torch
from conftest import get_draft, get_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import reference_greedy
from strategy_params import PARAMS

from ouroboros.backends.hf import HFBackend, HFEngine, score_batch
from ouroboros.errors import OuroborosError
from ouroboros.loop.decode import decode
from ouroboros.loop.draft import Draft
from ouroboros.serving.batch import Load, Request, engine_for, serve, slot_factory
from ouroboros.strategies import REGISTRY, build_proposer
from simulators.cost_model import CostModel
from simulators.serving import SimEngine


def _tree() -> Draft:
    d = Draft()
    d.add_path([5, 6, 7], -1, merge=False)
    d.add_path([5, 9], -1, merge=True)
    d.add_path([11], -1, merge=False)
    return d


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_score_batch_equals_per_row_score(family):
    model = get_model(family)
    prompts = [[1, 2, 3, 4, 5, 6, 7], [9], [3, 3, 8, 1]]
    drafts = [_tree(), Draft.chain([4, 4]), Draft()]
    singles, rows = [], []
    for p in prompts:
        a, b = HFBackend(model), HFBackend(model)
        a.prefill(p)
        b.prefill(p)
        singles.append(a)
        rows.append(b)
    want = [a.score(d, want_logits=True) for a, d in zip(singles, drafts, strict=True)]
    got = score_batch(rows, drafts, [True] * 3)
    for w, g in zip(want, got, strict=True):
        assert g.preds == w.preds
        torch.testing.assert_close(g.logits, w.logits, rtol=1e-9, atol=1e-9)
    # commit per row, then a second batched step from the compacted caches
    for a, b, w, d in zip(singles, rows, want, drafts, strict=True):
        path = [0] if len(d) else []
        new = ([d.tokens[0]] if path else []) + [w.preds[len(path)]]
        a.commit(path, new)
        b.commit(path, new)
    chains = [Draft.chain([1]), Draft.chain([2, 3]), _tree()]
    want = [a.score(d) for a, d in zip(singles, chains, strict=True)]
    got = score_batch(rows, chains, [False] * 3)
    assert [g.preds for g in got] == [w.preds for w in want]


def _pld_prompt(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    unit = torch.randint(0, 64, (3,), generator=g).tolist()
    return (unit * 8)[:n]


@pytest.mark.parametrize("name", sorted(REGISTRY))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hf_batch_rows_match_reference(name, data):
    family = data.draw(st.sampled_from(["llama", "qwen2"]), label="family")
    noise = data.draw(st.sampled_from([0.0, 0.1, 3.0]), label="noise")
    params = data.draw(PARAMS[name], label="params")
    conc = data.draw(st.integers(1, 4), label="concurrency")
    n_req = data.draw(st.integers(1, 5), label="requests")
    target_model, draft_model = get_model(family), get_draft(family, noise=noise)
    reqs, expected = [], []
    lens = data.draw(st.lists(st.integers(1, 20), min_size=n_req, max_size=n_req), label="lens")
    budgets = data.draw(st.lists(st.integers(1, 16), min_size=n_req, max_size=n_req), label="budgets")
    eos_row = data.draw(st.integers(0, n_req - 1), label="eos_row")
    free = reference_greedy(target_model, _pld_prompt(lens[eos_row], eos_row), budgets[eos_row])
    eos = (free[len(free) // 2],)   # an EOS one row emits mid-way: it stops while the others go on
    for i, (n, b) in enumerate(zip(lens, budgets, strict=True)):
        p = _pld_prompt(n, i)
        reqs.append(Request(p, b, f"r{i}"))
        expected.append(reference_greedy(target_model, p, b, eos))
    target = HFBackend(target_model)
    draft = HFBackend(draft_model)
    out = serve(reqs, Load(concurrency=conc), HFEngine(), slot_factory(target, draft, name, params), eos).requests
    assert [s.result.output for s in out] == expected
    assert all(s.end_s >= s.first_token_s >= s.arrival_s for s in out)
    assert max(s.mean_batch for s in out) <= conc


def _sim_pair():
    from simulators import make_pair

    return make_pair(_llama_profile(), _h100(), {"devices": 2, "placement": "tensor"})


def _llama_profile():
    from simulators.architectures import load_conf

    return dict(load_conf("model", "llama70b_7b"))


def _h100():
    from simulators.architectures import load_conf

    return dict(load_conf("hardware", "h100"))


@pytest.mark.parametrize("name", ["vanilla", "speculative", "pld", "ouroboros", "lookahead", "suffix", "recycling"])
def test_sim_batch_rows_match_single_and_batching_saves_time(name):
    pair = _sim_pair()
    prompts = pair.default_prompts(6, 0)
    singles = []
    t = type(pair.target)(pair.target.lm, pair.target.cost, type(pair.target.clock)(), pair.target.max_context)
    d = type(pair.draft)(pair.draft.lm, pair.draft.cost, t.clock, pair.draft.max_context)
    prop = build_proposer(name, {}, t, d if REGISTRY[name].needs_draft_model else None)
    for p in prompts:  # one proposer over the prompts, as a slot keeps it (Ouroboros' pool has a history)
        singles.append(decode(t, prop, p.ids, 48, pair.eos_ids, prompt_id=p.id))
    reqs = [Request(p.ids, 48, p.id) for p in prompts]
    one = serve(reqs, Load(concurrency=1), SimEngine("separate"), slot_factory(pair.target, pair.draft, name, {}),
                pair.eos_ids).requests
    six = serve(reqs, Load(concurrency=6), SimEngine(), slot_factory(pair.target, pair.draft, name, {}),
                pair.eos_ids).requests
    assert [s.result.output for s in one] == [r.output for r in singles]
    assert [s.result.output for s in six] == [r.output for r in singles]
    # concurrency 1: the serving clock is the sum of the single runs' modelled times (prefill included)
    assert max(s.end_s for s in one) == pytest.approx(sum(r.elapsed_s for r in singles), rel=1e-9)
    # six at once: the weights are read once per batched forward, so the makespan is far shorter
    assert max(s.end_s for s in six) < 0.5 * max(s.end_s for s in one)
    # prompts riding in the next batched forward (chunked prefill) save their own weight reads: same decisions
    chunked = serve(reqs, Load(concurrency=1), SimEngine("batched"), slot_factory(pair.target, pair.draft, name, {}),
                    pair.eos_ids).requests
    assert [s.result.output for s in chunked] == [r.output for r in singles]
    assert max(s.end_s for s in chunked) < max(s.end_s for s in one)


def test_open_loop_arrivals_and_idle_clock():
    pair = _sim_pair()
    prompts = pair.default_prompts(5, 1)
    reqs = [Request(p.ids, 16, p.id) for p in prompts]
    out = serve(reqs, Load(concurrency=8, rate=0.01, seed=3), SimEngine(),
                slot_factory(pair.target, pair.draft, "speculative", {}), pair.eos_ids).requests
    arr = [s.arrival_s for s in out]
    assert arr == sorted(arr) and arr[0] > 0
    # at 0.01 requests/s each request is alone: it starts on arrival and its latency is the single-request time
    assert all(s.start_s == pytest.approx(s.arrival_s) for s in out)
    assert all(s.mean_batch == 1.0 for s in out)


def test_open_loop_on_the_wall_clock_waits_for_each_arrival():
    """Real models, Poisson arrivals: nothing starts before it arrives (the engine sleeps while idle), arrivals
    count from the serve's start, and the tokens are the closed loop's."""
    import time

    target = HFBackend(get_model("llama"))
    reqs = [Request([3, 4, 5, 6][: 2 + i % 3], 4, f"r{i}") for i in range(4)]
    closed = serve(reqs, Load(concurrency=2), HFEngine(), slot_factory(target, None, "pld", {}))
    t0 = time.perf_counter()
    out = serve(reqs, Load(concurrency=2, rate=40.0, seed=1), HFEngine(), slot_factory(target, None, "pld", {}))
    assert [s.result.output for s in out.requests] == [s.result.output for s in closed.requests]
    arr = [s.arrival_s - t0 for s in out.requests]
    assert arr == sorted(arr) and 0 < arr[0] < 1
    assert all(s.start_s >= s.arrival_s for s in out.requests)


def test_load_aware_is_lossless_and_stops_drafting_when_compute_bound():
    pair = _sim_pair()
    prompts = pair.default_prompts(4, 2)
    reqs = [Request(p.ids, 32, p.id) for p in prompts]
    base = serve(reqs, Load(concurrency=4), SimEngine(), slot_factory(pair.target, pair.draft, "speculative", {}),
                 pair.eos_ids)
    aware = serve(reqs, Load(concurrency=4), SimEngine(),
                  slot_factory(pair.target, pair.draft, "speculative", {}, load_aware=True), pair.eos_ids)
    assert [s.result.output for s in aware.requests] == [s.result.output for s in base.requests]
    summ = aware.summary(Load(concurrency=4))
    assert summ["requests"] == 4 and summ["mean_batch"] <= 4 and summ["latency_s_p99"] >= summ["latency_s_p50"]
    steps = sum(s.result.proposer_stats["load_aware.steps"] for s in aware.requests)
    assert steps == sum(len(s.result.steps) for s in aware.requests)
    from ouroboros.serving.batch import LoadAware

    # a compute-bound target (no weight-read floor): drafting never pays, at any batch size
    flat = CostModel(flop_s_per_token=1.0)
    la = LoadAware(None, lambda: 8, flat, CostModel(flop_s_per_token=0.1))
    assert la.best_depth(8, 100) == 0
    # a memory-bound target with a cheap draft and high acceptance: drafting pays at batch 1, not at batch 512
    mem = CostModel(weight_s=1.0, flop_s_per_token=0.01)
    la = LoadAware(None, lambda: 1, mem, CostModel(weight_s=0.02, flop_s_per_token=0.0002), prior=0.9)
    assert la.best_depth(1, 100) >= 4
    assert la.best_depth(512, 100) < la.best_depth(1, 100)


def test_load_aware_probes_when_its_cap_falls_to_zero():
    """A cap that fell to 0 (a few early rejections) is probed at depth 1 every explore_every-th step, so good
    acceptance brings drafting back; a step that drafts nothing would measure nothing."""
    from ouroboros.loop.contracts import DecodeState
    from ouroboros.serving.batch import LoadAware

    class Inner:
        class counters:   # noqa: N801 (the attribute proposers expose)
            forwards = tokens = 0

        def propose(self, state):
            from ouroboros.loop.draft import Draft

            return Draft()

    mem = CostModel(weight_s=1.0, flop_s_per_token=0.01)
    la = LoadAware(Inner(), lambda: 1, mem, CostModel(weight_s=0.5, flop_s_per_token=0.005), prior=0.05)
    assert la.best_depth(1, 100) == 0       # the estimate says drafting does not pay
    state = DecodeState(tokens=[1, 2, 3], prompt_len=3, remaining=32, room=100)
    for _ in range(8):
        la.propose(state)
    assert la.chosen == [0, 0, 0, 1, 0, 0, 0, 1]


def test_bad_loads_are_one_line_errors():
    with pytest.raises(OuroborosError, match="concurrency must be >= 1"):
        Load(concurrency=0)
    with pytest.raises(OuroborosError, match="rate must be > 0"):
        Load(rate=0.0)
    target = HFBackend(get_model("llama"))
    with pytest.raises(OuroborosError, match="load_aware"):
        slot_factory(target, None, "pld", {}, load_aware=True)
    with pytest.raises(OuroborosError, match="serve.prefill must be batched or separate"):
        SimEngine("chunky")


def test_engines_and_fresh_backends_come_from_the_backend_kind():
    """engine_for asks the backend registry for the backend's kind; fresh() is an empty backend on the same model
    with its own clock; a backend that cannot be copied (a plain wrapper) is a one-line error."""
    from ouroboros.backends.base import BackendWrapper

    target = HFBackend(get_model("llama"))
    assert type(engine_for(target, "separate")) is HFEngine and not engine_for(target).clock.simulated
    pair = _sim_pair()
    eng = engine_for(pair.target, "separate")
    assert type(eng) is SimEngine and eng.prefill_mode == "separate" and eng.clock.simulated
    for be in (target, pair.target):
        be.prefill([1, 2, 3])
        new = be.fresh()
        assert type(new) is type(be) and new.tokens == [] and new.max_context == be.max_context
        assert new.clock is not be.clock or not be.clock.simulated
    with pytest.raises(OuroborosError, match="not on BackendWrapper"):
        engine_for(BackendWrapper(target))


def test_batch_cost_model():
    cm = CostModel(fixed_s=1e-3, token_s=1e-6, weight_s=5e-3, flop_s_per_token=1e-4, tile=8, kv_s_per_ctx=1e-7,
                   attn_s_per_q_ctx=1e-9, head_s_per_row=1e-5)
    assert cm.batch_forward_s([(5, 100, None)]) == cm.forward_s(5, 100)
    assert cm.batch_forward_s([(5, 100, 2)]) == cm.forward_s(5, 100, logits=2)
    two = cm.batch_forward_s([(1, 100, None), (1, 300, None)])
    # weights once, KV per sequence: far below two separate forwards, above one
    assert cm.forward_s(1, 300) < two < cm.forward_s(1, 100) + cm.forward_s(1, 300)
    assert two == pytest.approx(cm.fixed_s + 2 * cm.token_s + cm.weight_s + 400 * cm.kv_s_per_ctx
                                + cm.attn_s_per_q_ctx * (101 + 301))
    # past the ridge (sum k x flop > weight read) each token costs compute
    big = cm.batch_forward_s([(8, 0, None)] * 16)
    assert big == pytest.approx(cm.fixed_s + 128 * cm.token_s + 128 * cm.flop_s_per_token
                                + cm.attn_s_per_q_ctx * 16 * 64)
    with pytest.raises(OuroborosError):
        cm.batch_forward_s([])
    for b, k, c in ((1, 3, 50), (7, 5, 200), (64, 1, 900)):
        assert cm.uniform_batch_s(b, k, c) == pytest.approx(cm.batch_forward_s([(k, c, None)] * b), rel=1e-12)


def test_fit_recovers_a_batched_cost_model():
    from simulators.cost_model import FitPoint, fit

    true = CostModel(fixed_s=2e-3, token_s=1e-5, weight_s=3e-2, flop_s_per_token=2e-3, tile=1, kv_s_per_ctx=2e-6,
                     attn_s_per_q_ctx=1e-8)
    pts = [FitPoint(k, c, true.batch_forward_s([(k, c, None)] * b), batch=b)
           for k in (1, 2, 4, 8) for c in (64, 512) for b in (1, 2, 4, 8)]
    cm, rep = fit(pts, tiles=(1,))
    assert rep.max_abs_rel_err < 0.02


# ----------------------------------------------------------------------------------------------- through the CLI
def test_load_sweep_records_serving_metrics_and_plots(tmp_path):
    from cli_helper import run_module

    from analysis.plots import all_figures
    from ouroboros.running.sinks import load_records, read_records

    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.sweep", "model=llama70b_7b", "hardware=h100", "sim.devices=2", "sim.placement=tensor",
                     'sweep.grid=["serve.concurrency=1,16","strategy=speculative","serve.load_aware=false,true"]',
                     "serve.requests=20", "dataset.num_prompts=4", "dataset.task=none", "max_new_tokens=16",
                     "logger=quiet", f"out={out}",
                     tmp=tmp_path)
    assert res.code == 0, res.err
    recs = read_records(out)
    assert [(r["strategy"], r["serving"]["concurrency"], r["config"]["serve"]["load_aware"]) for r in recs] == [
        ("vanilla", 1, False), ("speculative", 1, False), ("speculative", 1, True),
        ("vanilla", 16, False), ("speculative", 16, False), ("speculative", 16, True)]
    assert [r["label"] for r in recs[:3]] == ["vanilla [C=1]", "speculative [C=1 fixed]",
                                              "speculative [C=1 load-aware]"]
    for r in recs:
        sv = r["serving"]
        assert sv["requests"] == 20 and len(r["prompts"]) == 20 and r["identical_to_baseline"] == "20/20"
        assert sv["throughput_tok_s"] == pytest.approx(sv["tokens"] / sv["makespan_s"])
        assert sv["latency_s_p99"] >= sv["latency_s_p50"] > 0 and 1 <= sv["mean_batch"] <= sv["concurrency"]
        base = next(b for b in recs if b["point_id"] == r["baseline_id"]) if r["baseline_id"] else r
        assert r["speedup"] == pytest.approx(base["serving"]["makespan_s"] / sv["makespan_s"])
    assert recs[3]["serving"]["mean_batch"] > 8            # 20 requests at concurrency 16 overlap
    assert recs[3]["serving"]["makespan_s"] < recs[0]["serving"]["makespan_s"] / 4
    assert "@r1" in recs[0]["prompts"][4]["prompt_id"]     # 20 requests cycle through 4 prompts
    figs = all_figures(load_records(out))
    assert {"speedup_vs_concurrency", "latency_vs_throughput"} <= set(figs)
    from ouroboros.running.sinks import point_metrics

    m = point_metrics(load_records(out)[4])   # what the wandb mirror logs
    assert m["serving/throughput_tok_s"] == recs[4]["serving"]["throughput_tok_s"] and "serving/ttft_s_p99" in m
    assert "vanilla [C=1]" in res.out and "p99" in res.out


@pytest.mark.parametrize("args, msg", [
    (["serve.concurrency=-1"], "serve.concurrency must be >= 0"),
    (["serve.requests=5"], "need serve.concurrency >= 1"),
    (["serve.concurrency=2", "serve.rate=0"], "serve.rate must be > 0"),
    (["serve.concurrency=2", "serve.max_draft=0"], "serve.max_draft must be >= 1"),
    (["model=tiny", "backend=hf", "serve.concurrency=2", "sampling.temperature=0.7"], "greedy decoding only"),
    (["model=tiny", "backend=hf", "serve.concurrency=2", "serve.load_aware=true"], "load_aware sizes drafts"),
    (["serve.concurrency=2", "serve.shared_pool=true", "strategy=speculative"], "needs strategy=ouroboros"),
    (["serve.shared_pool=true", "strategy=ouroboros"], "need serve.concurrency >= 1"),
    (["serve.concurrency=2", "serve.prefill=chunky"], "serve.prefill must be batched or separate"),
    (["hardware=h100", "sim.devices=2", "sim.placement=tensor", "serve.concurrency=64", "serve.requests=100"],
     "KV caches of 64 requests at once"),
    (["model=tiny", "backend=hf", "serve.concurrency=2", "serve.prefill=batched"], "simulated only"),
])
def test_bad_serve_settings_are_one_line_errors(tmp_path, args, msg):
    from cli_helper import run_module

    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", "model=llama70b_7b", *args, f"out={out}", "logger=quiet", tmp=tmp_path)
    assert res.code == 2 and msg in res.err and len(res.err.strip().splitlines()) == 1
    assert not out.exists()


def test_hf_served_run_through_the_cli(tmp_path):
    from cli_helper import run_module

    from ouroboros.running.sinks import read_records

    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", "model=tiny", "backend=hf", "strategy=pld", "serve.concurrency=3",
                     "dataset.num_prompts=5", "max_new_tokens=12", f"out={out}", "logger=quiet", tmp=tmp_path)
    assert res.code == 0, res.err
    recs = read_records(out)
    assert [r["strategy"] for r in recs] == ["vanilla", "pld"]
    assert all(r["serving"]["concurrency"] == 3 and r["identical_to_baseline"] == "5/5" for r in recs[1:])


def test_shared_pool_is_one_pool_and_stays_lossless():
    from ouroboros.serving.batch import Scheduler

    target_model, draft_model = get_model("llama"), get_draft("llama", noise=0.1)
    target, draft = HFBackend(target_model), HFBackend(draft_model)
    params = {"gamma": 3, "W": 3, "N": 3, "G": 3, "K": 2}
    make = slot_factory(target, draft, "ouroboros", params, shared_pool=True)
    sched = Scheduler(HFEngine())
    a, b = make(sched), make(sched)
    assert a.proposer.pool is b.proposer.pool
    # use_pool reaches the drafter too: its Jacobi window harvests "lookahead" phrases into the shared pool
    t1, d1, t2, d2 = HFBackend(target_model), HFBackend(draft_model), HFBackend(target_model), HFBackend(draft_model)
    owner, user = build_proposer("ouroboros", params, t1, d1), build_proposer("ouroboros", params, t2, d2)
    user.use_pool(owner.pool)
    decode(t2, user, _pld_prompt(12, 0), 14)
    assert owner.pool.size_by_source().get("lookahead", 0) > 0
    reqs = [Request(_pld_prompt(4 + 3 * i, i % 2), 14, f"r{i}") for i in range(5)]
    out = serve(reqs, Load(concurrency=3), HFEngine(), slot_factory(target, draft, "ouroboros", params,
                                                                     shared_pool=True)).requests
    assert [s.result.output for s in out] == [reference_greedy(target_model, r.prompt, 14) for r in reqs]
    with pytest.raises(OuroborosError, match="history=true"):
        slot_factory(target, draft, "ouroboros", {**params, "history": False}, shared_pool=True)
    with pytest.raises(OuroborosError, match="strategy=ouroboros"):
        slot_factory(target, draft, "lookahead", {}, shared_pool=True)
