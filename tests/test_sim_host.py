"""The proposers' host time on the simulated clock (simulators/host.py, simulators/lab/calibration/proposers.py): a
profile with proposer costs charges exactly a + b x draft nodes per step, in the step's draft and other time; a
profile without them changes no second; the fit recovers a and b from recorded steps; bad inputs are one line."""

import copy
import json

import pytest
import yaml

from ouroboros.errors import OuroborosError
from ouroboros.running.harness import StrategyRun, StrategyRunner
from simulators import Hardware, make_pair
from simulators.__main__ import main as sim_main
from simulators.architectures import conf_root, load_conf
from simulators.host import HostTimed, ProposerCost
from simulators.lab.calibration.proposers import Step, fit_line, fit_steps, replace_block

QWEN = "Qwen2.5-Coder-1.5B-Instruct"
PLD = {"draft_s": 1e-3, "draft_s_per_node": 1e-4, "other_s": 2e-3, "other_s_per_node": 3e-5}
RECYCLING = {"draft_s": 5e-5, "draft_s_per_node": 1e-6, "other_s": 8e-4, "other_s_per_node": 9e-5}


def hardware(costs: dict | None = None, name: str = "h200") -> dict:
    hw = copy.deepcopy(load_conf("hardware", name))
    if costs is not None:
        hw["proposer_costs"] = costs
    return hw


def decode_all(hw: dict, strategy: str, n_prompts: int = 2, budget: int = 24):
    pair = make_pair(load_conf("model", "qwen_coder"), hw, {})
    runner = StrategyRunner(StrategyRun(strategy), pair.target, pair.draft, pair.eos_ids)
    return runner, [runner(p.ids, budget, p.id) for p in pair.default_prompts(n_prompts)]


@pytest.mark.parametrize("strategy,cost", [("pld", PLD), ("recycling", RECYCLING)])
def test_a_profile_with_costs_charges_a_plus_b_n_per_step(strategy, cost):
    _, before = decode_all(hardware(), strategy)
    runner, after = decode_all(hardware({QWEN: {strategy: cost, "fit": {"cpu": "Test CPU"}}}), strategy)
    assert isinstance(runner.proposer, HostTimed)
    c = ProposerCost(**cost)
    for b, a in zip(before, after, strict=True):
        assert a.output == b.output and a.proposer_stats == b.proposer_stats   # decisions untouched
        assert any(s.n_nodes for s in a.steps)
        charged = sum(c.step_s(s.n_nodes) for s in a.steps)
        assert a.elapsed_s - b.elapsed_s == pytest.approx(charged, rel=1e-9, abs=1e-12)
        assert a.prefill_s == pytest.approx(b.prefill_s, rel=1e-12)
        for sa, sb in zip(a.steps, b.steps, strict=True):
            assert sa.draft_s - sb.draft_s == pytest.approx(c.propose_s(sa.n_nodes), rel=1e-9, abs=1e-12)
            assert sa.other_s - sb.other_s == pytest.approx(c.observe_s(sa.n_nodes), rel=1e-9, abs=1e-12)
            assert sa.verify_s == pytest.approx(sb.verify_s, rel=1e-12)


def test_no_costs_leave_every_second_as_it_was():
    """No proposer_costs, costs of another strategy, or of another pair: the proposer is not wrapped and the modelled
    seconds are those of a proposer built without the hook."""
    from ouroboros.loop.decode import decode
    from ouroboros.strategies import build_proposer

    pair = make_pair(load_conf("model", "qwen_coder"), hardware(), {})
    plain = build_proposer("pld", {}, pair.target)
    want = [decode(pair.target, plain, p.ids, 24, pair.eos_ids, prompt_id=p.id) for p in pair.default_prompts(2)]
    for costs in (None, {QWEN: {"recycling": RECYCLING}}, {"Llama-2-70b-hf": {"pld": PLD}}):
        runner, got = decode_all(hardware(costs), "pld")
        assert not isinstance(runner.proposer, HostTimed)
        assert [r.elapsed_s for r in got] == [r.elapsed_s for r in want]
        assert [[s.draft_s for s in r.steps] for r in got] == [[s.draft_s for s in r.steps] for r in want]


def test_the_run_says_what_is_charged_in_one_note(tmp_path):
    from cli_helper import run_module

    base = ["backend=sim", "model=qwen_coder", "hardware=h200", "dataset=synthetic", "dataset.num_prompts=1",
            "max_new_tokens=8", "logger=quiet", f"out={tmp_path / 'r.jsonl'}"]
    res = run_module("ouroboros.run", *base, "strategy=pld", tmp=tmp_path)
    assert res.code == 0, res.err
    notes = [ln for ln in res.err.splitlines() if "proposer host time" in ln]
    assert notes == ["note: proposer host time: not charged (not measured for hardware h200; python -m simulators "
                     "calibrate proposers)"]
    costs = json.dumps({QWEN: {"pld": PLD, "fit": {"cpu": "Test CPU"}}}).replace('"', "")
    res = run_module("ouroboros.run", *base, "strategy=speculative", f"+hardware.proposer_costs={costs}", tmp=tmp_path)
    assert res.code == 0, res.err
    notes = [ln for ln in res.err.splitlines() if "proposer host time" in ln]
    assert notes == ["note: proposer host time: not charged for vanilla (not measured), speculative (runs a draft "
                     "model: not separable from its forwards)"]
    res = run_module("ouroboros.run", *base, "strategy=pld", f"+hardware.proposer_costs={costs}", tmp=tmp_path)
    notes = [ln for ln in res.err.splitlines() if "proposer host time" in ln]
    assert notes == ["note: proposer host time: charged per step for pld (measured on Test CPU, hardware h200); not "
                     "charged for vanilla (not measured)"]
    recs = [json.loads(ln) for ln in (tmp_path / "r.jsonl").read_text().splitlines() if '"point_id"' in ln]
    assert recs[-1]["hardware"]["proposer_costs"][QWEN]["pld"] == PLD   # the record holds what was charged


def test_note_names_the_pair_measured():
    pair = make_pair(load_conf("model", "qwen_coder"), hardware({"Llama-2-70b-hf": {"pld": PLD}}), {})
    assert pair.target.host_note(["pld"], []) == (
        "proposer host time: not charged (hardware h200 measured it for Llama-2-70b-hf, not "
        f"{QWEN}; python -m simulators calibrate proposers)")
    pair = make_pair(load_conf("model", "qwen_coder"), hardware({QWEN: {"pld": PLD}}), {})
    assert "not charged for pld (serve.concurrency" in pair.target.host_note(["pld"], ["pld"])


def steps_of(cost: ProposerCost, ns: list[int], noise: float = 0.0, prompt_len: int = 10) -> list[Step]:
    out = []
    for i, n in enumerate(ns):
        e = noise * (1 if i % 2 else -1)   # symmetric: the least-squares line stays put
        out.append(Step(f"p{i // prompt_len}", n, cost.propose_s(n) * (1 + e), cost.observe_s(n) * (1 - e)))
    return out


def test_fit_recovers_a_and_b():
    want = ProposerCost(1.5e-4, 2e-6, 9e-5, 1.5e-5)
    ns = [n for n in range(0, 40) for _ in range(2)]
    got = fit_steps(steps_of(want, ns), drop_above=20).cost
    for k in ("draft_s", "draft_s_per_node", "other_s", "other_s_per_node"):
        assert getattr(got, k) == pytest.approx(getattr(want, k), rel=1e-9)
    assert got.steps == len(ns) and got.prompt_err == pytest.approx(0, abs=1e-9)
    # a pause (a step 1000x the median) is dropped and counted; the line is the same
    paused = steps_of(want, ns) + [Step("p0", 3, 0.5, 0.0)]
    fitted = fit_steps(paused, drop_above=20)
    assert fitted.dropped == 1 and fitted.dropped_share > 0.9
    assert fitted.cost.draft_s == pytest.approx(want.draft_s, rel=1e-9)
    # noise: within a few percent
    noisy = fit_steps(steps_of(want, ns, noise=0.3), drop_above=20).cost
    assert noisy.other_s_per_node == pytest.approx(want.other_s_per_node, rel=0.05)
    assert noisy.prompt_err > 0


def test_fit_line_edges():
    assert fit_line([0, 0, 0], [1.0, 2.0, 3.0]) == (2.0, 0.0)          # one draft size (vanilla): b = 0
    assert fit_line([0, 1, 2], [3.0, 2.0, 1.0]) == (2.0, 0.0)          # falling: no negative b
    a, b = fit_line([1, 2, 3], [1.0, 3.0, 5.0])                        # a would be < 0: through the origin
    assert a == 0.0 and b == pytest.approx(22 / 14)


def records_file(path, bad_cpu: bool = False):
    """A records file as a sweep writes it: prompt lines, then each point's record; an unfinished point; a torn line."""
    want = ProposerCost(**PLD)
    lines = []

    def point(pid, strategy, ns, backend="hf", cpu="Test CPU 9000"):
        for i in range(0, len(ns), 20):
            steps = [{"n_nodes": n, "draft_s": want.propose_s(n), "other_s": want.observe_s(n), "draft_forwards": 0}
                     for n in ns[i:i + 20]]
            lines.append({"kind": "prompt_result", "of_point": pid, "prompt": {"prompt_id": f"p{i}", "steps": steps}})
        lines.append({"schema": 1, "point_id": pid, "strategy": strategy, "backend": backend,
                      "hardware": {"cpu": cpu, "torch_threads": 2}, "versions": {"git": "abc1234"},
                      "config": {"model": {"profile": {"target": {"name": QWEN}}}}})

    ns = [n % 12 for n in range(120)]
    point("a", "pld", ns)
    point("b", "hf_pld", ns)                     # transformers' generate: skipped
    point("c", "speculative", ns)                # a draft model: skipped
    point("d", "pld", ns, backend="sim")         # simulated: skipped
    point("e", "pld", ns, cpu="Other CPU" if bad_cpu else "Test CPU 9000")
    lines.append({"kind": "prompt_result", "of_point": "running", "prompt": {"prompt_id": "x", "steps": []}})
    path.write_text("\n".join(json.dumps(x) for x in lines) + '\n{"kind": "prompt_res', encoding="utf-8")
    return want


def test_calibrate_proposers_writes_a_profile_the_simulator_charges(tmp_path, capsys):
    rec, out = tmp_path / "r.jsonl", tmp_path / "hw.yaml"
    want = records_file(rec)
    assert sim_main(["calibrate", "proposers", "--records", str(rec), "--hardware", "h200", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "2 finished real point(s)" in text and "1 prompt line(s) of unfinished points not used" in text
    assert "skipped 1 point(s) of hf_pld" in text and "skipped 1 point(s) of speculative" in text
    assert f"{QWEN} pld: 240 steps" in text and "per-prompt error mean 0.0%" in text
    written = out.read_text(encoding="utf-8")
    assert written.startswith((conf_root() / "hardware" / "h200.yaml").read_text().splitlines()[0])   # comments kept
    hw = yaml.safe_load(written)
    got = hw["proposer_costs"][QWEN]
    assert got["fit"]["cpu"] == "Test CPU 9000" and got["fit"]["threads"] == [2]
    assert got["fit"]["command"].startswith("python -m simulators calibrate proposers --records")
    assert {"commit", "records", "recorded_with"} <= set(got["fit"])
    for k in ("draft_s", "draft_s_per_node", "other_s", "other_s_per_node"):
        assert got["pld"][k] == pytest.approx(getattr(want, k), rel=1e-5)
    Hardware.from_dict(hw)
    runner, _ = decode_all(hw, "pld", n_prompts=1, budget=8)
    assert isinstance(runner.proposer, HostTimed)
    # a refit replaces the pair's entry, once
    assert sim_main(["calibrate", "proposers", "--records", str(rec), "--hardware", "h200", "--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8").count("proposer_costs:") == 1


def test_replace_block_keeps_the_rest():
    text = "# head\nname: x\nproposer_costs:   # old\n  a:\n    b: 1\n# tail comment\nsource: s\n"
    assert replace_block(text, "proposer_costs", "proposer_costs:\n  new: 1\n") == (
        "# head\nname: x\nsource: s\nproposer_costs:\n  new: 1\n")


def test_calibrate_bad_input_is_one_line(tmp_path, capsys):
    rec = tmp_path / "r.jsonl"
    records_file(rec)

    def err(*argv) -> str:
        assert sim_main(["calibrate", "proposers", *argv]) == 2
        cap = capsys.readouterr()
        assert cap.out == ""   # nothing done
        lines = cap.err.strip().splitlines()
        assert len(lines) == 1
        return lines[0]

    assert "--records" in err("--records", str(tmp_path / "nope.jsonl"), "--hardware", "h200")
    assert "unknown hardware profile 'nope'" in err("--records", str(rec), "--hardware", "nope")
    assert "cannot be written" in err("--records", str(rec), "--hardware", "h200", "--out",
                                      str(tmp_path / "no" / "x.yaml"))
    assert "--drop-above must be > 1" in err("--records", str(rec), "--hardware", "h200", "--drop-above", "1")
    assert "--min-steps must be >= 2" in err("--records", str(rec), "--hardware", "h200", "--min-steps", "1")
    assert "error: the following arguments are required: --records" in err("--hardware", "h200")
    # no matching steps: nothing written
    out = tmp_path / "hw.yaml"
    assert sim_main(["calibrate", "proposers", "--records", str(rec), "--hardware", "h200", "--out", str(out),
                     "--min-steps", "1000"]) == 2
    assert "no strategy without a draft model has >= 1000 recorded steps" in capsys.readouterr().err
    assert not out.exists()
    records_file(rec, bad_cpu=True)
    assert sim_main(["calibrate", "proposers", "--records", str(rec), "--hardware", "h200", "--out", str(out)]) == 2
    assert "measured on several CPUs" in capsys.readouterr().err and not out.exists()


@pytest.mark.parametrize("costs,words", [
    ({QWEN: {"pld": {**PLD, "other_s": -1e-4}}}, "proposer_costs.Qwen2.5-Coder-1.5B-Instruct.pld.other_s must be a "
                                                 "number >= 0, got -0.0001"),
    ({QWEN: {"pld": {**PLD, "oops": 1}}}, "pld has no field 'oops'"),
    ({QWEN: {"pld": {"draft_s": 1e-3}}}, "pld needs draft_s_per_node, other_s, other_s_per_node"),
    ({QWEN: {"pld": {**PLD, "steps": 2.5}}}, "pld.steps must be an int >= 0"),
    ({QWEN: {"pld": {**PLD, "draft_s": float("nan")}}}, "draft_s must be a number >= 0"),
    ({QWEN: ["pld"]}, "must map strategy names to their costs"),
    (["x"], "proposer_costs must map model names to strategies"),
])
def test_bad_costs_in_a_profile_are_one_line(costs, words):
    with pytest.raises(OuroborosError, match="^hardware 'h200': ") as e:
        Hardware.from_dict(hardware(costs))
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("costs,words", [
    ({QWEN: {"speculative": PLD}}, "speculative runs a draft model"),
    ({QWEN: {"nope": PLD}}, "names unknown strategy 'nope'"),
])
def test_costs_a_strategy_cannot_have_are_refused_before_any_work(costs, words):
    from simulators.pair import pair_setup

    with pytest.raises(OuroborosError, match=words):
        pair_setup(load_conf("model", "qwen_coder"), hardware(costs), {})
