"""HF peer runners (same records as run_strategy), interleaved with ours as the sweep runs them, on tiny fp64 models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import get_draft, get_model

from ouroboros import argparser as flags
from ouroboros.backends.hf import HFBackend
from ouroboros.errors import OuroborosError
from ouroboros.prompts.datasets import synthetic_prompts
from ouroboros.running.divergence import divergences
from ouroboros.running.harness import Job, StrategyRun, StrategyRunner, run_interleaved, run_strategy
from ouroboros.running.peers import PeerRunner, check_peer, run_peer

EOS = (1,)
FIX = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def setup():
    target = get_model("llama", seed=3)
    draft = get_draft("llama", seed=3, noise=0.05)
    prompts = [p.ids for p in synthetic_prompts(3, 24, 64, seed=5)]
    vanilla = run_strategy(StrategyRun("vanilla"), HFBackend(target), None, prompts, 24, EOS)
    return target, draft, prompts, vanilla


@pytest.mark.parametrize("name, params", [
    ("hf_greedy", {}),
    ("hf_assisted", {}),
    ("hf_assisted", {"num_assistant_tokens": 3, "assistant_confidence_threshold": 0.0}),
    ("hf_pld", {}),
    ("hf_pld", {"prompt_lookup_num_tokens": 4, "max_matching_ngram_size": 3}),
])
def test_peers_match_our_vanilla_in_fp64(setup, name, params):
    target, draft, prompts, vanilla = setup
    res = run_peer(name, params, target, draft, prompts, 24, EOS, prompt_ids=["a", "b", "c"])
    assert [p.prompt_id for p in res.prompts] == ["a", "b", "c"]
    for ours, theirs in zip(vanilla.prompts, res.prompts, strict=True):
        assert theirs.output == ours.output
        assert theirs.stop_reason == ours.stop_reason
        assert sum(s.new_tokens for s in theirs.steps) == len(theirs.output)   # steps account for every token
        assert all(s.new_tokens >= 1 and s.accepted == s.new_tokens - 1 for s in theirs.steps)
        assert theirs.elapsed_s > 0 and 0 < theirs.prefill_s <= theirs.elapsed_s
    t = res.totals()
    if name == "hf_greedy":
        assert t["target_forwards"] == t["new_tokens"] and t["block_efficiency"] == 1.0
        assert t["draft_forwards"] == 0
    if name == "hf_assisted":
        assert t["draft_forwards"] > 0


def test_assisted_with_an_identical_draft_accepts_whole_drafts(setup):
    target, _, prompts, vanilla = setup
    same = get_draft("llama", seed=3, noise=0.0)
    res = run_peer("hf_assisted", {"num_assistant_tokens": 4, "assistant_confidence_threshold": 0.0}, target, same,
                   prompts, 24, EOS)
    assert [p.output for p in res.prompts] == [p.output for p in vanilla.prompts]
    full = [s for p in res.prompts for s in p.steps[1:-1]]   # not the prefill step nor the budget-cut last step
    assert full and all(s.accepted == 4 for s in full)


def test_assistant_settings_are_restored(setup):
    target, draft, prompts, _ = setup
    before = draft.generation_config.to_dict()
    run_peer("hf_assisted", {"num_assistant_tokens": 2}, target, draft, prompts[:1], 4, EOS, warmup=False)
    assert draft.generation_config.to_dict() == before


@pytest.mark.parametrize("name, params, msg", [
    ("hf_beam", {}, "unknown peer 'hf_beam'"),
    ("hf_pld", {"gamma": 3}, "'hf_pld' has no option 'gamma'; options: max_matching_ngram_size"),
    ("hf_greedy", {"x": 1}, "'hf_greedy' has no option 'x'"),
    ("hf_assisted", {"num_assistant_tokens": 2.5}, "num_assistant_tokens must be an int"),
    ("hf_assisted", {"num_assistant_tokens_schedule": "fast"}, "must be constant, heuristic"),
])
def test_bad_peer_specs(name, params, msg):
    with pytest.raises(OuroborosError, match=msg):
        check_peer(name, params)


def test_peer_needs_draft_and_eos(setup):
    target, _, prompts, _ = setup
    with pytest.raises(OuroborosError, match="needs a draft model"):
        run_peer("hf_assisted", {}, target, None, prompts, 4, EOS)
    with pytest.raises(OuroborosError, match="needs the model's EOS ids"):
        run_peer("hf_greedy", {}, target, None, prompts, 4, ())


def test_parse_runs_golden():
    runs = flags.parse_runs("vanilla,ouroboros:gamma=12,K=3,pld, hf_pld:prompt_lookup_num_tokens=5")
    assert [(r.name, r.params, r.label) for r in runs] == [
        ("vanilla", {}, "vanilla"),
        ("ouroboros", {"gamma": 12, "K": 3}, "ouroboros:gamma=12,K=3"),
        ("pld", {}, "pld"),
        ("hf_pld", {"prompt_lookup_num_tokens": 5}, "hf_pld:prompt_lookup_num_tokens=5"),
    ]
    assert flags.parse_runs("pld:prefer=last,max_ngram=2")[0].params == {"prefer": "last", "max_ngram": 2}
    with pytest.raises(OuroborosError, match="starts with a parameter"):
        flags.parse_runs("gamma=3,speculative")
    with pytest.raises(OuroborosError, match="expected name:key=value"):
        flags.parse_runs("speculative:5")


def test_parse_kind():
    assert flags.parse_kind(["qwen-coder"], "model") == {"kind": "qwen-coder"}
    assert flags.parse_kind(["kind=hf", "target=/m", "draft=null"], "model") == {"kind": "hf", "target": "/m",
                                                                                "draft": None}
    with pytest.raises(OuroborosError, match="needs a kind"):
        flags.parse_kind(["target=/m"], "model")


def test_divergence_reports_position_and_margin(setup):
    target, _, prompts, vanilla = setup
    other = run_strategy(StrategyRun("vanilla"), HFBackend(target), None, prompts, 24, EOS)
    other.prompts[1].output = other.prompts[1].output[:5] + [(other.prompts[1].output[5] + 1) % 64]
    from ouroboros.prompts.datasets import Prompt

    ps = [Prompt(str(i), p) for i, p in enumerate(prompts)]
    divs = divergences(vanilla, other, {p.id: p.ids for p in ps}, HFBackend(target).top2_margin)
    assert [(d.prompt_id, d.position) for d in divs] == [("1", 5)]
    with torch.no_grad():
        logits = target(input_ids=torch.tensor([prompts[1] + vanilla.prompts[1].output[:5]])).logits[0, -1]
    top = torch.topk(logits, 2).values
    assert divs[0].margin == pytest.approx(float(top[0] - top[1]))


def runners(specs, target, draft, sampling=None):
    t, d = HFBackend(target), HFBackend(draft)
    return [PeerRunner(s.name, s.params, target, draft, EOS, s.label, sampling) if s.name.startswith("hf_")
            else StrategyRunner(StrategyRun(s.name, s.params, s.label), t, d, EOS, sampling) for s in specs]


def run_all(specs, target, draft, prompts, budget, interleave, warmup=True, sampling=None):
    """Every run over the prompts: interleaved (one run_interleaved) or one run after the other."""
    ids = [str(i) for i in range(len(prompts))]
    jobs = [Job(r, [budget] * len(prompts)) for r in runners(specs, target, draft, sampling)]
    if interleave:
        return run_interleaved(jobs, prompts, ids, warmup)
    return [run_interleaved([j], prompts, ids, warmup)[0] for j in jobs]


def test_interleaved_and_sequential_runs_give_the_same_records(setup):
    target, draft, prompts, vanilla = setup
    specs = flags.parse_runs("vanilla,speculative:gamma=3,pld,hf_greedy,hf_assisted")
    a = run_all(specs, target, draft, prompts, 24, interleave=True)
    b = run_all(specs, target, draft, prompts, 24, interleave=False, warmup=False)
    assert [r.strategy for r in a] == [s.label for s in specs]
    for ra, rb in zip(a, b, strict=True):
        assert [p.prompt_id for p in ra.prompts] == ["0", "1", "2"]
        assert [p.output for p in ra.prompts] == [p.output for p in rb.prompts] == [p.output for p in vanilla.prompts]
        assert ra.totals()["target_forwards"] == rb.totals()["target_forwards"]


def test_sampled_runs_are_reproducible_and_match_the_harness(setup):
    from ouroboros.loop.sampling import SamplingConfig

    target, draft, prompts, _ = setup
    cfg = SamplingConfig(temperature=1.0, top_p=0.8, seed=7)
    specs = flags.parse_runs("vanilla,speculative:gamma=3,hf_greedy,hf_assisted")
    a = run_all(specs, target, draft, prompts, 16, interleave=True, sampling=cfg)
    b = run_all(specs, target, draft, prompts, 16, interleave=False, warmup=False, sampling=cfg)
    for ra, rb in zip(a, b, strict=True):  # each prompt's stream depends on (seed, prompt id) only
        assert [p.output for p in ra.prompts] == [p.output for p in rb.prompts]
    ours = run_strategy(StrategyRun("vanilla"), HFBackend(target), None, prompts, 16, EOS,
                        prompt_ids=["0", "1", "2"], sampling=cfg)
    assert [p.output for p in a[0].prompts] == [p.output for p in ours.prompts]
    greedy = run_all(specs[:1], target, draft, prompts, 16, interleave=False, warmup=False)
    assert [p.output for p in a[0].prompts] != [p.output for p in greedy[0].prompts]  # it did sample
    other = run_all(specs[2:3], target, draft, prompts, 16, interleave=False, warmup=False,
                    sampling=SamplingConfig(temperature=1.0, top_p=0.8, seed=8))
    assert [p.output for p in a[2].prompts] != [p.output for p in other[0].prompts]  # peers' seed is used


def test_bench_forward_times_every_kernel(tmp_path, capsys, monkeypatch):
    from test_models import save_tiny

    from ouroboros.backends import kernels
    from ouroboros.bench import forward

    # the routed column on the blocked fp32 product: the bench's own logic, without waiting for the bf16 kernel's
    # compile (tests/test_kernels.py builds and checks the kernel itself)
    monkeypatch.setattr(kernels, "kernel", lambda: None)

    t = save_tiny(tmp_path / "t")
    model = ["--model", "kind=hf", f"target={t}"]
    assert forward.main([*model, "--ks", "1,3", "--ctx", "4", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    from ouroboros.backends.models import onednn_bf16_available

    assert "linear layers routed to the kernel: 0," not in out
    cols = ["torch", "routed"] + (["packed"] if onednn_bf16_available() else [])
    head = next(ln.split() for ln in out.splitlines() if ln.split()[:1] == ["k"])
    assert head[1::3] == cols and ("packed by oneDNN: 0 " in out) != ("packed" in cols)
    rows = [ln.split() for ln in out.splitlines() if ln.split() and ln.split()[0] in ("1", "3")]
    assert [r[0] for r in rows] == ["1", "3"] and rows[0][2::2] == ["1.00"] * len(cols)
    assert forward.main([*model, "--ks", "0"]) == 2
    assert "--ks need k >= 1" in capsys.readouterr().err
    assert forward.main([*model, "--which", "draft"]) == 2
    assert "has no draft" in capsys.readouterr().err


def test_real_compare_sweep_with_peers_and_analysis(tmp_path):
    """`sweep=real_compare` on the tiny hf pair (fp64): our strategies and the three peers are points of one sweep,
    written as the same records (peers identical to our vanilla), drawn by `python -m analysis`; a peer on the
    simulator is one error line."""
    import json as _json

    from cli_helper import run_module

    out = tmp_path / "r.jsonl"
    common = ["model=tiny", "model.hidden_size=64", "model.vocab_size=128", "model.eos_id=1", "backend.dtype=float64",
              "dataset.num_prompts=2", "max_new_tokens=6", f"out={out}", "logger=quiet"]
    res = run_module("ouroboros.sweep", *common, "sweep=real_compare", "logger.console=true", tmp=tmp_path)
    assert res.code == 0, res.err
    recs = [r for r in map(_json.loads, out.read_text().splitlines()) if "point_id" in r]
    assert [r["strategy"] for r in recs] == ["vanilla", "speculative", "pld", "ouroboros", "suffix", "recycling",
                                             "hf_greedy", "hf_assisted", "hf_pld"]
    assert all(r["identical_to_baseline"] == "2/2" for r in recs[1:])
    assert recs[7]["params"]["num_assistant_tokens"] == 3 and "hf_assisted" in recs[7]["label"]
    ratios = [ln for ln in res.out.splitlines() if ln.startswith("ours/peer: ")]
    assert [ln.split(": ")[1] for ln in ratios] == [
        "vanilla / hf_greedy",
        "speculative gamma=3 / hf_assisted num_assistant_tokens=3 assistant_confidence_threshold=0.0", "pld / hf_pld"]
    a, b = recs[0]["totals"]["tokens_per_s"], recs[6]["totals"]["tokens_per_s"]
    assert ratios[0].endswith(f"= {a / b:.3f}x")
    res = run_module("analysis", str(out), "--out", str(tmp_path / "an"))
    assert res.code == 0, res.err
    assert "hf_assisted" in (tmp_path / "an" / "table.md").read_text()
    res = run_module("ouroboros.run", "model=llama70b_7b", "strategy=hf_pld", f"out={out}", tmp=tmp_path)
    assert res.code == 2 and res.err.startswith("error: strategy 'hf_pld' is a peer")
