"""`python -m simulators calibrate floor` and the band it sets under a run of few prompts (simulators/trust.py)."""

from __future__ import annotations

import json

import yaml

from simulators import trust
from simulators.__main__ import main


def point(pid: str, label: str, strategy: str) -> dict:
    return {"point_id": pid, "label": label, "strategy": strategy, "params": {}, "backend": "hf",
            "config": {"dataset": {"kind": "humaneval"}, "model": {"kind": "qwen-coder", "draft": True}}}


def prompt(pid: str, prompt_id: str, tokens: int, steps: int, seconds: float) -> dict:
    per = [tokens // steps + (1 if i < tokens % steps else 0) for i in range(steps)]
    return {"kind": "prompt_result", "of_point": pid,
            "prompt": {"prompt_id": prompt_id, "elapsed_s": seconds,
                       "steps": [{"new_tokens": n, "target_tokens": 1} for n in per]}}


def write(path, lines) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def test_floor_of_k_prompts_per_metric_pairs_speedups_within_a_file(tmp_path, capsys):
    """File a: vanilla 40 tokens in 4 s on p1 and p2; pld at eta 4 (p1, 1 s) and eta 2 (p2, 2 s). File b ran on a
    machine twice as slow: vanilla 8 s, pld at eta 2 in 4 s on p3 and p4. Pooled eta 160 / 70: one draw in four (p1)
    is 75% off, so the k=1 eta floor is 0.75. Speedups pair each prompt with its own file's vanilla: 4, 2, 2, 2
    (all: 160 tokens in 11 s against 24 s), so p1 strays most; token/s mixes both machines' times."""
    a = write(tmp_path / "a.jsonl", [point("v", "vanilla", "vanilla"), prompt("v", "p1", 40, 40, 4.0),
                                     prompt("v", "p2", 40, 40, 4.0),
                                     point("x", "pld", "pld"), prompt("x", "p1", 40, 10, 1.0),
                                     prompt("x", "p2", 40, 20, 2.0)])
    b = write(tmp_path / "b.jsonl", [point("w", "vanilla", "vanilla"), prompt("w", "p3", 40, 40, 8.0),
                                     prompt("w", "p4", 40, 40, 8.0),
                                     point("y", "pld", "pld"), prompt("y", "p3", 40, 20, 4.0),
                                     prompt("y", "p4", 40, 20, 4.0)])
    out = tmp_path / "floor.yaml"
    assert main(["calibrate", "floor", "--records", a, "--records", b, "--dataset", "humaneval", "--prompts", "1,2",
                 "--draws", "2000", "--out", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    pld = doc["tasks"]["humaneval"]["strategies"]["pld"]
    assert set(doc["tasks"]["humaneval"]["strategies"]) == {"pld"}          # vanilla is 1 by definition
    assert pld["prompts"] == 4
    assert abs(pld["block_efficiency"][1] - (4 / (160 / 70) - 1)) < 1e-3    # p1's eta 4 against 160 / 70
    whole = (160 / 11) / (160 / 24)                                          # pld 160 tokens in 11 s, vanilla in 24
    assert abs(pld["speedup"][1] - max(abs(s / whole - 1) for s in (4.0, 2.0))) < 1e-3
    assert pld["tokens_per_s"][1] > pld["speedup"][1] / 2                    # measured from the raw times
    assert 2 in pld["block_efficiency"] and "records" in doc["tasks"]["humaneval"]
    # a second task is added beside the first
    c = write(tmp_path / "c.jsonl", [dict(point("v", "vanilla", "vanilla"), config={
        "dataset": {"kind": "mtbench"}, "model": {"kind": "qwen-coder", "draft": True}}),
        prompt("v", "q1", 10, 10, 1.0), prompt("v", "q2", 10, 10, 1.0),
        dict(point("s", "suffix", "suffix"), config={"dataset": {"kind": "mtbench"},
                                                     "model": {"kind": "qwen-coder", "draft": True}}),
        prompt("s", "q1", 10, 5, 0.5), prompt("s", "q2", 10, 5, 0.5)])
    assert main(["calibrate", "floor", "--records", c, "--dataset", "mtbench", "--prompts", "1", "--out",
                 str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    assert set(doc["tasks"]) == {"humaneval", "mtbench"}
    assert doc["tasks"]["mtbench"]["strategies"]["suffix"]["block_efficiency"][1] == 0.0
    capsys.readouterr()


def test_floor_refuses_bad_input_in_one_line(tmp_path, capsys):
    good = write(tmp_path / "r.jsonl", [point("x", "pld", "pld"), prompt("x", "p1", 40, 10, 1.0)])
    out = tmp_path / "f.yaml"
    for argv, msg in ((["--records", good, "--dataset", "synthetic"], "not the dataset kind of one task"),
                      (["--records", str(tmp_path / "none.jsonl"), "--dataset", "humaneval"], "no such file"),
                      (["--records", good, "--dataset", "humaneval", "--draws", "5"], "at least 100 subsets"),
                      (["--records", good, "--dataset", "humaneval", "--prompts", "0"], "each size must be >= 1")):
        assert main(["calibrate", "floor", *argv, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], (argv, err)
    assert not out.exists()


FLOORS = {"tasks": {"humaneval": {"strategies": {"pld": {
    "block_efficiency": {1: 0.9, 2: 0.5, 8: 0.1}, "speedup": {2: 0.4, 8: 0.05}}}}}}


def test_a_band_is_at_least_the_floor_of_the_runs_prompts_and_never_narrows(monkeypatch):
    monkeypatch.setattr(trust, "prompt_floors", lambda: FLOORS)
    band = {"block_efficiency": 0.2, "tokens_per_s": None, "speedup": 0.3, "cells": {}}
    one = trust.widened(band, "humaneval", "pld", 1)
    assert one["block_efficiency"] == 0.9 and one["speedup"] == 0.4            # below k=2: the smallest k's floor
    assert one["tokens_per_s"] is None                                         # unmeasured stays unmeasured
    assert one["prompt_floor"]["k"] == {"block_efficiency": 1, "speedup": 2}
    assert one["prompt_floor"]["measured_band"] == {"block_efficiency": 0.2, "speedup": 0.3}
    five = trust.widened(band, "humaneval", "pld", 5)
    assert five["block_efficiency"] == 0.5 and five["speedup"] == 0.4          # the largest k <= 5: 2
    assert trust.widened(band, "humaneval", "pld", 20) is band                 # k=8: 0.1 < 0.2, 0.05 < 0.3
    assert trust.widened(band, "mtbench", "pld", 1) is band                    # no floor for the task
    assert trust.widened(band, "humaneval", "vanilla", 1) is band
    assert trust.widened(band, "humaneval", "pld", None) is band


def test_a_simulated_record_on_one_prompt_carries_the_committed_floor():
    """The committed floors reach a run's record: a recorded profile's pld on one HumanEval prompt shows at least
    the floor of one prompt; the same profile on 20 prompts shows the measured band."""
    from simulators.sim_profiles import load_profile

    prof = load_profile("qwen_coder_humaneval_chat")
    ds = {"kind": "humaneval", **prof["fit"]["inputs"]["prompt_format"]}   # rendered as its recordings were
    measured = trust.record_decisions(prof, "pld", ds, None)["band"]
    one = trust.record_decisions(prof, "pld", ds, None, prompts=1)["band"]
    k, floor = trust.floor_for("humaneval", "pld", 1)["block_efficiency"]
    assert k == 1 and floor > measured["block_efficiency"]
    assert one["block_efficiency"] == floor and one["prompt_floor"]["prompts"] == 1
    assert trust.record_decisions(prof, "pld", ds, None, prompts=20)["band"]["block_efficiency"] == \
        max(measured["block_efficiency"], trust.floor_for("humaneval", "pld", 20)["block_efficiency"][1])


def test_the_table_and_figures_say_a_band_was_widened(tmp_path):
    """A simulated run whose band was widened to its prompts' floor says so in the table's `±:` line and in its
    figures' titles; one that was not says nothing of it."""
    import dataclasses

    from test_sweep import sweep_records

    from analysis.plots import close, speedup_bars
    from ouroboros.running.table import format_table

    recs = sweep_records(tmp_path / "r.jsonl", "sweep=compare", 'sweep.grid=["strategy=pld,speculative"]')
    plain = speedup_bars(recs, "t")
    assert "widened" not in format_table(recs) and "at least" not in plain.axes[0].get_title()
    close(plain)
    spec = recs[-1]
    band = {**spec.decisions["band"], "speedup": 0.5,
            "prompt_floor": {"task": "humaneval", "prompts": 2, "k": {"speedup": 2}, "measured_band": {"speedup": 0.2}}}
    recs[-1] = dataclasses.replace(spec, decisions={**spec.decisions, "band": band})
    assert "widened to how far the real figures of this many prompts stray" in format_table(recs)
    assert "(humaneval, 2 prompts;" in format_table(recs)
    fig = speedup_bars(recs, "t")
    assert "at least the real spread of 2 prompt(s)" in fig.axes[0].get_title()
    close(fig)
