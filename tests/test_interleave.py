"""Interleaving points prompt by prompt (the harness option `interleave`, on by default for real backends): every
point decodes prompt i before any starts prompt i + 1, outputs equal a point-by-point run's, a stop in the middle
resumes at prompt granularity (peers included)."""

import json

from cli_helper import run_module

from ouroboros.running.sinks import read_records

SIM = ["model=llama70b_7b", "dataset.num_prompts=3", "max_new_tokens=8", "logger=quiet", "sweep=single",
       "strategy=speculative"]
HF = ["model=tiny", "model.hidden_size=32", "model.layers=1", "model.draft_layers=1", "model.eos_id=1",
      "dataset.num_prompts=3", "dataset.prompt_len=12", "max_new_tokens=6", "logger=quiet", "sweep=single"]


def prompt_lines(path) -> list[tuple[str, str]]:
    """(point label, prompt id) of each prompt_result line, in file order."""
    labels = {r["point_id"]: r["strategy"] for r in read_records(path)}
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return [(labels[x["of_point"]], x["prompt"]["prompt_id"]) for x in lines if x.get("kind") == "prompt_result"]


def outputs(path) -> dict[str, list[list[int]]]:
    return {r["strategy"]: [p["output"] for p in r["prompts"]] for r in read_records(path)}


def test_interleaved_sweep_decodes_prompt_by_prompt_with_the_same_outputs(tmp_path):
    inter, seq = tmp_path / "i.jsonl", tmp_path / "s.jsonl"
    assert run_module("ouroboros.sweep", *SIM, "interleave=true", f"out={inter}", tmp=tmp_path).code == 0
    assert run_module("ouroboros.sweep", *SIM, f"out={seq}", tmp=tmp_path).code == 0   # sim: off by default
    order = prompt_lines(inter)
    ids = [pid for _, pid in order]
    assert ids == sorted(ids) and len(order) == 6       # prompt 0 by both points, then prompt 1 by both, ...
    assert [s for s, _ in order] == ["vanilla", "speculative", "speculative", "vanilla", "vanilla", "speculative"]
    assert [s for s, _ in prompt_lines(seq)] == ["vanilla"] * 3 + ["speculative"] * 3
    assert outputs(inter) == outputs(seq)
    recs = read_records(inter)
    assert recs[1]["identical_to_baseline"] == "3/3" and recs[1]["baseline_id"] == recs[0]["point_id"]


def test_real_backend_interleaves_by_default_and_a_stop_resumes_at_prompt_granularity(tmp_path, monkeypatch):
    """On the hf backend (a tiny pair) the default interleaves ours and a peer; a Ctrl-C after 4 decoded prompts
    keeps those 4 (2 rounds); the rerun decodes only the other 2 and the records equal a clean run's outputs."""
    import ouroboros.running.harness as harness
    import ouroboros.running.peers as peers

    args = [*HF, "strategy=hf_greedy"]
    calls: list[str] = []
    real_ours, real_peer = harness.StrategyRunner.__call__, peers.PeerRunner.__call__

    def counting(real, stop_at=None):
        def call(self, prompt, budget, pid):
            calls.append(f"{self.label}:{pid}")
            if stop_at is not None and len(calls) == stop_at:
                raise KeyboardInterrupt
            return real(self, prompt, budget, pid)
        return call

    monkeypatch.setattr(harness.StrategyRunner, "__call__", counting(real_ours, stop_at=5))
    monkeypatch.setattr(peers.PeerRunner, "__call__", counting(real_peer, stop_at=5))
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.sweep", *args, f"out={out}", tmp=tmp_path)
    assert res.code == 130 and read_records(out) == []
    assert calls[:4] == ["vanilla:synthetic-0", "hf_greedy:synthetic-0", "hf_greedy:synthetic-1",
                         "vanilla:synthetic-1"]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert sum(x.get("kind") == "prompt_result" for x in lines) == 4
    calls.clear()
    monkeypatch.setattr(harness.StrategyRunner, "__call__", counting(real_ours))
    monkeypatch.setattr(peers.PeerRunner, "__call__", counting(real_peer))
    res = run_module("ouroboros.sweep", *args, "logger.console=true", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err
    assert sorted(calls) == ["hf_greedy:synthetic-2", "vanilla:synthetic-2"]
    assert "prompt 3/3 synthetic-2: " in res.out
    clean = tmp_path / "clean.jsonl"
    assert run_module("ouroboros.sweep", *args, "interleave=false", f"out={clean}", tmp=tmp_path).code == 0
    assert outputs(out) == outputs(clean)
    assert [len(r["prompts"]) for r in read_records(out)] == [3, 3]
