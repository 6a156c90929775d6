"""`python -m simulators check clock` on a tiny real pair: every recorded run replays to the same decisions (same
outputs, no unrecorded context) and the table compares measured with modelled seconds; bad inputs get one line."""

from pathlib import Path

from test_models import save_tiny

from simulators.__main__ import main as sim_main

FIX = Path(__file__).parent / "fixtures"


def main(argv: list[str]) -> int:
    """`python -m simulators check clock ARGV`."""
    return sim_main(["check", "clock", *argv])


def test_record_then_replay_makes_the_real_decisions(tmp_path, capsys):
    t, d = save_tiny(tmp_path / "t"), save_tiny(tmp_path / "d", seed=1)
    out = tmp_path / "rc"
    runs = "vanilla,speculative:gamma=3,pld,lookahead:W=3,N=3,G=3,ouroboros:gamma=3,W=3,N=3,G=3,cascade:gamma=3"
    argv = ["--strategies", runs,
            "--model", "kind=hf", f"target={t}", f"draft={d}", "eos_ids=[1]",
            "--dataset", "kind=jsonl", f"path={FIX / 'prompts.jsonl'}", "chat=false",
            "--max-new-tokens", "8", "--dtype", "float64", "--hardware", "h200", "--dir", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    rows = [ln for ln in text.splitlines() if "outputs," in ln]
    assert len(rows) == 6
    for ln in rows:
        assert "4/4 outputs, 0 unrecorded contexts" in ln, ln
    assert len(list(out.glob("trace-*.json"))) == 6
    # each recorded result says how its prompts were rendered (a profile fitted on them states it)
    import json
    fmts = {json.dumps(json.loads(ln)["prompt_format"]) for ln in (out / "real.jsonl").read_text().splitlines()}
    assert fmts == {json.dumps({"chat": False, "template": "{prompt}"})}
    # replay-only under another clock: same decisions, other seconds
    assert main(["--replay-only", "--dir", str(out), "--hardware", "a100"]) == 0
    again = capsys.readouterr().out
    assert "hardware=a100" in again and again.count("4/4 outputs, 0 unrecorded contexts") == 6
    real_s = [ln.split()[2] for ln in rows]
    assert real_s == [ln.split()[2] for ln in again.splitlines() if "outputs," in ln]  # measured side unchanged
    assert [ln.split()[3] for ln in rows] != [ln.split()[3] for ln in again.splitlines() if "outputs," in ln]


def test_batched_record_then_replay(tmp_path, capsys):
    t, d = save_tiny(tmp_path / "t"), save_tiny(tmp_path / "d", seed=1)
    out = tmp_path / "rc"
    argv = ["--strategies", "vanilla,speculative:gamma=3,pld", "--batches", "1,3",
            "--model", "kind=hf", f"target={t}", f"draft={d}", "eos_ids=[1]",
            "--dataset", "kind=jsonl", f"path={FIX / 'prompts.jsonl'}", "chat=false",
            "--max-new-tokens", "8", "--dtype", "float64", "--hardware", "h200", "--dir", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    under = text[text.index("under load"):]
    rows = [ln for ln in under.splitlines() if "outputs," in ln]
    assert len(rows) == 6   # 3 runs x B = 1, 3
    for ln in rows:   # fp64: the batched real runs made the single runs' decisions, and the replay made them too
        assert "4/4 outputs, 0 unrecorded contexts" in ln, ln
    assert sorted(int(ln.split()[1]) for ln in rows) == [1, 1, 1, 3, 3, 3]
    import json

    lines = [json.loads(ln) for ln in (out / "batch.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and all(ln["divergences"] == [] for ln in lines)   # fp64: batched = unbatched


def test_bad_inputs_one_line(tmp_path, capsys):
    assert main(["--hardware", "nosuch", "--dir", str(tmp_path)]) == 2
    assert "unknown hardware profile 'nosuch'" in capsys.readouterr().err
    assert main(["--replay-only", "--hardware", "h200", "--dir", str(tmp_path / "empty")]) == 2
    assert "real.jsonl not found: record first" in capsys.readouterr().err
    assert main(["--strategies", "nosuch", "--hardware", "h200", "--dir", str(tmp_path)]) == 2
    assert "nosuch" in capsys.readouterr().err
    assert main(["--batches", "0,2", "--hardware", "h200", "--dir", str(tmp_path)]) == 2
    assert "--batches must be >= 1" in capsys.readouterr().err
    assert main(["--batched-only", "--hardware", "h200", "--dir", str(tmp_path)]) == 2
    assert "--batched-only needs --batches" in capsys.readouterr().err
    assert main(["--batched-only", "--batches", "2", "--hardware", "h200", "--dir", str(tmp_path)]) == 2
    assert "no trace of vanilla" in capsys.readouterr().err


def test_a_stopped_recording_keeps_its_finished_prompts(tmp_path, capsys, monkeypatch):
    from ouroboros.errors import OuroborosError
    from ouroboros.running import harness

    real_call = harness.StrategyRunner.__call__

    def failing(self, ids, budget, pid):
        if pid == "p2":
            raise OuroborosError("stopped on p2")
        return real_call(self, ids, budget, pid)

    monkeypatch.setattr(harness.StrategyRunner, "__call__", failing)
    t, d = save_tiny(tmp_path / "t"), save_tiny(tmp_path / "d", seed=1)
    out = tmp_path / "rc"
    argv = ["--strategies", "vanilla,speculative:gamma=3", "--model", "kind=hf", f"target={t}", f"draft={d}",
            "--dataset", "kind=jsonl", f"path={FIX / 'prompts.jsonl'}", "chat=false",
            "--max-new-tokens", "8", "--dtype", "float64", "--hardware", "h200", "--dir", str(out)]
    assert main(argv) == 2
    assert "error: stopped on p2" in capsys.readouterr().err
    assert not list(out.glob("*.part"))
    assert main(["--replay-only", "--dir", str(out), "--hardware", "h200"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if "outputs," in ln]
    assert len(rows) == 2 and all("1/1 outputs, 0 unrecorded contexts" in ln for ln in rows)


def test_recordings_render_prompts_as_the_dataset_yaml_does():
    """`check clock --dataset humaneval` renders HumanEval as `dataset=humaneval` does (the YAML's template); a
    typed key wins; older recordings that do not say are read as bare prompts."""
    from types import SimpleNamespace

    import yaml

    from simulators.lab.checks.clock import dataset_cfg
    from simulators.lab.decisions.stats import BARE_PROMPTS, RealRun

    conf = yaml.safe_load((Path(__file__).parents[1] / "conf/dataset/humaneval.yaml").read_text())
    args = SimpleNamespace(dataset=["humaneval"], limit=3, ids=None, max_new_tokens=16)
    cfg = dataset_cfg(args)
    assert cfg["template"] == conf["template"] != "{prompt}" and cfg["limit"] == 3 and cfg["max_new_tokens"] == 16
    args.dataset = ["humaneval", "template='{prompt}'"]
    assert dataset_cfg(args)["template"] == "{prompt}"
    assert RealRun("x", "pld", {}, 8).prompt_format == BARE_PROMPTS


def test_records_check_the_clock_alone_on_recorded_forwards(tmp_path, capsys, monkeypatch):
    """`check clock --records`: every recorded step's target forward (k fed, ctx = prompt + committed tokens) and its
    draft forwards priced by the hardware's cost models against their measured times, per point; simulated records,
    a missing file and --records with --replay-only are one line each, before anything is read."""
    import json

    import simulators.lab.checks.clock as clock
    from simulators.architectures import load_conf
    from simulators.cost_model import CostModel

    tcm = CostModel(fixed_s=0.2, token_s=4e-3, weight_s=0.04, flop_s_per_token=4e-3, tile=8, kv_s_per_ctx=1e-5,
                    attn_s_per_q_ctx=2e-6, one_row_s=0.05)
    dcm = CostModel(fixed_s=0.02, token_s=1e-3, weight_s=0.01, flop_s_per_token=1e-3, tile=8)
    model = load_conf("model", "qwen_coder")["profile"]
    hw = {**load_conf("hardware", "a100"), "name": "probe",
          "costs": {model["target"]["name"]: dataclasses_dict(tcm), model["draft"]["name"]: dataclasses_dict(dcm)}}
    real_conf = clock.load_conf
    monkeypatch.setattr(clock, "load_conf", lambda g, n: hw if (g, n) == ("hardware", "probe") else real_conf(g, n))
    lines = [{"point_id": "p1", "label": "pld", "backend": "hf", "prompts": []},
             {"point_id": "p2", "label": "cascade", "backend": "hf", "prompts": []}]
    steps1, steps2, done = [], [], 30
    for k in (1, 3, 7, 2):      # pld: measured 10% slower than the model
        steps1.append({"target_tokens": k, "verify_s": 1.1 * tcm.forward_s(k, done), "new_tokens": 2})
        done += 2
    done = 30
    for k in (5, 9):            # cascade: target as modelled, its 2 draft forwards of 3 tokens twice the model
        steps2.append({"target_tokens": k, "verify_s": tcm.forward_s(k, done), "new_tokens": 3, "draft_forwards": 2,
                       "draft_tokens": 6, "draft_s": 2 * 2 * dcm.forward_s(3, done)})
        done += 3
    for point, steps in (("p1", steps1), ("p2", steps2)):
        lines.append({"kind": "prompt_result", "of_point": point,
                      "prompt": {"prompt_id": "a", "prompt_len": 30, "steps": steps}})
    rec = tmp_path / "r.jsonl"
    rec.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert sim_main(["check", "clock", "--records", str(rec), "--hardware", "probe"]) == 0
    out = {ln.split()[0]: ln.split() for ln in capsys.readouterr().out.splitlines() if ln.split()}
    assert out["pld"][1:3] == ["4", "3.2"] and out["pld"][5] == "-9.1%" and out["pld"][6:] == ["-", "-", "-"]
    assert out["cascade"][5] == "+0.0%" and out["cascade"][8] == "-50.0%"
    sim = tmp_path / "sim.jsonl"
    sim.write_text(json.dumps({"point_id": "x", "backend": "sim", "prompts": []}) + "\n")
    for argv, msg in (([str(sim)], "holds simulated points"), ([str(tmp_path / "none.jsonl")], "no such file"),
                      ([str(rec), "--replay-only"], "takes neither --batches nor --replay-only")):
        assert sim_main(["check", "clock", "--records", *argv, "--hardware", "probe"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], err


def dataclasses_dict(cm) -> dict:
    import dataclasses

    return {k: v for k, v in dataclasses.asdict(cm).items() if k != "name"}
