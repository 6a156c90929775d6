"""Calibration end to end on the tiny random pair: times real hf forwards, fits, writes a profile that make_pair
then uses (the fitted cost replaces the spec-sheet one)."""

import yaml

from simulators import make_pair
from simulators.__main__ import main as sim_main

TINY_PROFILE = {"target": {"name": "tiny-t", "layers": 4, "hidden": 256, "intermediate": 512, "heads": 4,
                           "kv_heads": 2, "vocab": 512, "max_context": 512},
                "draft": {"name": "tiny-d", "layers": 2, "hidden": 256, "intermediate": 512, "heads": 4,
                          "kv_heads": 2, "vocab": 512, "max_context": 512}}


def main(argv: list[str]) -> int:
    """`python -m simulators calibrate clock ARGV`."""
    return sim_main(["calibrate", "clock", *argv])


def test_calibrate_tiny_writes_a_usable_profile(tmp_path, capsys):
    out = tmp_path / "cpu.yaml"
    rc = main(["--model", "tiny", "--names", "tiny-t,tiny-d", "--dtype", "float32", "--ks", "1,4,16",
               "--ctxs", "8,32", "--repeats", "1", "--threads", "1", "--out", str(out), "--batches", "1,3",
               "--batch-ks", "1,2", "--batch-ctxs", "16", "--set", "layers=2"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "B=3   k=2    ctx=16" in text   # batched points timed and fitted with the rest
    assert "tiny-t: fit error mean" in text and "tiny-d: fit error mean" in text
    assert "tiny-t: LM head" in text and "k=16   ctx=0     all logits" in text
    hw = yaml.safe_load(out.read_text())
    assert set(hw["costs"]) == {"tiny-t", "tiny-d"}
    assert "model.layers=2" in yaml.safe_dump(hw)      # the model options the timed forwards ran with
    assert all(c["head_s_per_row"] >= 0 for c in hw["costs"].values())
    pair = make_pair({"name": "tiny", "profile": TINY_PROFILE}, hw, {"dtype": "fp32", "ctx": 512})
    assert pair.costs["target"].name.endswith("/fitted")
    assert pair.costs["target"].forward_s(1, 8) > 0


def test_calibrate_bad_input(capsys):
    assert main(["--model", "nope"]) == 2
    assert "unknown model profile 'nope'" in capsys.readouterr().err
    assert main(["--model", "tiny", "--names", "a,b", "--ks", "0,1"]) == 2
    assert main(["--model", "tiny", "--names", "a,b", "--batches", "two"]) == 2
    assert "comma-separated integers" in capsys.readouterr().err
    assert main(["--model", "tiny", "--names", "a,b", "--set", "nope=1"]) == 2
    assert "--set 'nope=1': KEY=VALUE with KEY a loading option" in capsys.readouterr().err



def test_timing_statistic():
    import pytest

    from ouroboros.errors import OuroborosError
    from simulators.lab.calibration.cost import pick

    assert pick([0.3, 0.1, 0.2], "median") == 0.2 and pick([0.3, 0.1, 0.2], "min") == 0.1
    with pytest.raises(OuroborosError, match="unknown timing statistic 'mean'"):
        pick([0.1], "mean")


def test_profile_shapes_build_stock_models_of_exactly_their_parameter_count():
    """`ModelProfile.hf_config`: the random-init model `--weights random` times has the profile's parameters, for
    every pair with a profile (Llama shapes and Qwen2's biased, tied ones); built on the meta device (no memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    from simulators.architectures import PairProfile, conf_root, load_conf

    seen = set()
    for path in sorted((conf_root() / "model").glob("*.yaml")):
        cfg = load_conf("model", path.stem)
        if not cfg.get("profile"):
            continue
        pair = PairProfile.from_model_cfg(cfg)
        for prof in (pair.target, pair.draft):
            with torch.device("meta"):
                m = AutoModelForCausalLM.from_config(prof.hf_config())
            assert sum(p.numel() for p in m.parameters()) == prof.params, prof.name
            assert m.config.num_hidden_layers == prof.layers and m.config.num_key_value_heads == prof.kv_heads
            seen.add(type(m).__name__)
    assert {"LlamaForCausalLM", "Qwen2ForCausalLM"} <= seen


def _profile_only(monkeypatch, profile):
    import simulators.lab.calibration.cost as cal

    monkeypatch.setattr(cal, "load_conf", lambda group, name: {"name": name, "kind": "profile", "profile": profile})


def test_calibrate_random_weights_of_a_profile(tmp_path, capsys, monkeypatch):
    """A profile-only pair (no weights anywhere) is timed as random-init models of its shapes and fitted."""
    qwenish = {**TINY_PROFILE, "target": {**TINY_PROFILE["target"], "qkv_bias": True, "tie_embeddings": True}}
    _profile_only(monkeypatch, qwenish)
    out = tmp_path / "dev.yaml"
    rc = main(["--model", "shape-only", "--weights", "random", "--attention", "eager", "--dtype", "float32",
               "--ks", "1,4,16", "--ctxs", "8,32", "--repeats", "1", "--threads", "1", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "timing target (tiny-t), float32, random weights on cpu" in text
    assert "tiny-t: fit error mean" in text and "tiny-d: fit error mean" in text
    hw = yaml.safe_load(out.read_text())
    assert set(hw["costs"]) == {"tiny-t", "tiny-d"} and hw["attention"] == "eager"
    assert "random weights, eager attention" in hw["source"]
    pair = make_pair({"name": "tiny", "profile": TINY_PROFILE}, hw, {"dtype": "fp32", "ctx": 512})
    assert pair.costs["draft"].name.endswith("/fitted") and pair.costs["draft"].forward_s(4, 8) > 0


def test_calibrate_random_weights_refuses_what_does_not_fit(tmp_path, capsys, monkeypatch):
    """Weights larger than the device's free memory: one line naming the sizes, before anything is built."""
    import simulators.lab.calibration.cost as cal

    _profile_only(monkeypatch, TINY_PROFILE)
    monkeypatch.setattr(cal, "free_bytes", lambda device: 1_000_000)
    built = []
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_config", lambda *a, **k: built.append(a))
    out = tmp_path / "dev.yaml"
    assert main(["--model", "shape-only", "--weights", "random", "--dtype", "float32", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "random tiny-t + tiny-d weights need 0.0163 GB in float32; cpu has 0.001 GB free" in err[0]
    assert not built and not out.exists()


def test_calibrate_clock_from_records_fits_the_target_to_the_loops_forwards(tmp_path, capsys):
    """`--records`: every step of a real sweep's records is one target forward (k fed, ctx = prompt + committed
    tokens, its verify time); the fit recovers the model those times came from, keeps the draft's model and the
    target's LM-head row, and refuses simulated records, a missing profile and too few groups in one line each."""
    import json

    from simulators.cost_model import CostModel

    true = CostModel(fixed_s=0.2, token_s=4e-3, weight_s=0.04, flop_s_per_token=4e-3, tile=8, kv_s_per_ctx=1e-5,
                     attn_s_per_q_ctx=2e-6, one_row_s=0.05)
    lines = []
    for point, ks in (("p1", [1] * 40), ("p2", [2, 4, 6, 8, 12, 16, 24, 32, 48, 64] * 8)):
        steps, done = [], 40
        for k in ks:
            steps.append({"target_tokens": k, "verify_s": true.forward_s(k, (done // 128) * 128 + 64),
                          "new_tokens": 1})
            done += 1
        lines.append({"kind": "prompt_result", "of_point": point,
                      "prompt": {"prompt_id": "a", "prompt_len": 40, "steps": steps}})
    rec = tmp_path / "r.jsonl"
    rec.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "hw.yaml"
    draft = {"fixed_s": 0.07, "weight_s": 0.03, "head_s_per_row": 0.001}
    out.write_text(yaml.safe_dump({"name": "cpu_local", "source": "timed", "costs": {
        "tiny-t": {"fixed_s": 0.1, "head_s_per_row": 0.002}, "tiny-d": draft}}))
    assert main(["--model", "tiny", "--names", "tiny-t", "--records", str(rec), "--out", str(out)]) == 0
    assert "120 timed steps in 1 records file(s)" in capsys.readouterr().out
    hw = yaml.safe_load(out.read_text())
    fitted = CostModel.from_dict(hw["costs"]["tiny-t"])
    assert fitted.head_s_per_row == 0.002 and hw["costs"]["tiny-d"] == draft
    for k in (1, 2, 8, 64):
        assert abs(fitted.forward_s(k, 64) / true.forward_s(k, 64) - 1) < 0.03, k
    assert "refitted by calibrate clock --records" in hw["source"]
    sim = tmp_path / "sim.jsonl"
    sim.write_text(json.dumps({"point_id": "x", "backend": "sim", "prompts": []}) + "\n")
    assert main(["--model", "tiny", "--names", "tiny-t", "--records", str(sim), "--out", str(out)]) == 2
    assert "holds simulated points" in capsys.readouterr().err
    assert main(["--model", "tiny", "--names", "tiny-t", "--records", str(rec), "--out", str(tmp_path / "no")]) == 2
    assert "run `python -m simulators calibrate clock` first" in capsys.readouterr().err
    rec.write_text(json.dumps(lines[0]) + "\n")
    assert main(["--model", "tiny", "--names", "tiny-t", "--records", str(rec), "--out", str(out)]) == 2
    assert "the fit needs >= 6" in capsys.readouterr().err


def test_calibrate_clock_from_records_refits_the_draft_where_it_has_enough_forwards(tmp_path, capsys):
    """`--records` with draft forwards in the steps (k = draft tokens spread over the step's forwards, seconds per
    forward = draft_s / forwards): with enough (k, ctx) groups the draft's model is refitted to them (its LM-head row
    kept); with too few it keeps its isolated fit and one line says so."""
    import json

    from simulators.cost_model import CostModel

    tgt = CostModel(fixed_s=0.2, token_s=4e-3, weight_s=0.04, flop_s_per_token=4e-3, tile=8, kv_s_per_ctx=1e-5,
                    attn_s_per_q_ctx=2e-6, one_row_s=0.05)
    dft = CostModel(fixed_s=0.08, token_s=1e-3, weight_s=0.01, flop_s_per_token=1.5e-3, tile=8, kv_s_per_ctx=4e-6,
                    attn_s_per_q_ctx=5e-7, one_row_s=0.01)

    def records(draft_ks):
        steps, done = [], 40
        for i, dk in enumerate(draft_ks * 20):
            k = [1, 2, 4, 8, 16, 32, 64][i % 7]
            ctx = (done // 128) * 128 + 64
            fw = 3 if dk <= 4 else 1
            steps.append({"target_tokens": k, "verify_s": tgt.forward_s(k, ctx), "new_tokens": 1,
                          "draft_forwards": fw, "draft_tokens": dk * fw, "draft_s": fw * dft.forward_s(dk, ctx)})
            done += 1
        rec = tmp_path / "r.jsonl"
        rec.write_text(json.dumps({"kind": "prompt_result", "of_point": "p",
                                   "prompt": {"prompt_id": "a", "prompt_len": 40, "steps": steps}}) + "\n")
        return str(rec)

    out = tmp_path / "hw.yaml"
    iso = {"fixed_s": 0.1, "weight_s": 0.03, "head_s_per_row": 0.001}
    out.write_text(yaml.safe_dump({"name": "cpu_local", "source": "timed", "costs": {
        "tiny-t": {"fixed_s": 0.1, "head_s_per_row": 0.002}, "tiny-d": iso}}))
    rec = records([1, 2, 3, 4, 6, 9, 12, 24, 48, 96, 128, 160, 1, 1, 2, 4])
    assert main(["--model", "tiny", "--names", "tiny-t,tiny-d", "--records", rec, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "tiny-d: 320 timed steps" in text and "rough" in text
    hw = yaml.safe_load(out.read_text())
    fitted = CostModel.from_dict(hw["costs"]["tiny-d"])
    assert fitted.head_s_per_row == 0.001
    for k in (1, 4, 24, 128):
        assert abs(fitted.forward_s(k, 192) / dft.forward_s(k, 192) - 1) < 0.05, k
    assert "tiny-d refitted by calibrate clock --records to the loop's draft forwards" in hw["source"]
    out.write_text(yaml.safe_dump({"name": "cpu_local", "source": "timed", "costs": {
        "tiny-t": {"fixed_s": 0.1, "head_s_per_row": 0.002}, "tiny-d": iso}}))
    assert main(["--model", "tiny", "--names", "tiny-t,tiny-d", "--records", records([1]), "--out", str(out)]) == 0
    assert "tiny-d: 20 steps with draft forwards -> 1 (k, ctx) points" in capsys.readouterr().out
    assert yaml.safe_load(out.read_text())["costs"]["tiny-d"] == iso


def test_calibrate_clock_from_records_scales_each_round_to_one_machine_state(tmp_path, capsys):
    """A machine that slows down between prompts: round b (every point's decode of prompt b) ran 1.4x slower than
    round a, and only round b holds the wide forwards. As measured, the fit mixes the states (wide forwards look 40%
    dearer against one-token ones than they are); scaled by each round's one-token forwards, the shape is the
    machine's."""
    import json

    from simulators.cost_model import CostModel

    true = CostModel(fixed_s=0.2, token_s=4e-3, weight_s=0.04, flop_s_per_token=4e-3, tile=8, kv_s_per_ctx=1e-5,
                     attn_s_per_q_ctx=2e-6, one_row_s=0.05)
    lines = []
    for pid, slow, ks in (("a", 1.0, [2, 4, 6, 8] * 10), ("b", 1.4, [12, 16, 24, 32, 48, 64] * 8)):
        for point, kk in (("vanilla", [1] * 40), ("wide", ks)):
            steps, done = [], 40
            for k in kk:
                steps.append({"target_tokens": k, "new_tokens": 1,
                              "verify_s": slow * true.forward_s(k, (done // 128) * 128 + 64)})
                done += 1
            lines.append({"kind": "prompt_result", "of_point": point,
                          "prompt": {"prompt_id": pid, "prompt_len": 40, "steps": steps}})
    rec = tmp_path / "r.jsonl"
    rec.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "hw.yaml"

    def fitted(*extra):
        out.write_text(yaml.safe_dump({"name": "cpu_local", "source": "timed", "costs": {
            "tiny-t": {"fixed_s": 0.1, "head_s_per_row": 0.002}}}))
        assert main(["--model", "tiny", "--names", "tiny-t", "--records", str(rec), "--out", str(out), *extra]) == 0
        return CostModel.from_dict(yaml.safe_load(out.read_text())["costs"]["tiny-t"])

    def shape(cm):
        return cm.forward_s(48, 64) / cm.forward_s(1, 64)

    scaled = fitted()
    assert "machine state: 2 rounds (file, prompt) of one-token forwards at" in capsys.readouterr().out
    assert abs(shape(scaled) / shape(true) - 1) < 0.03
    assert yaml.safe_load(out.read_text())["name"] == "cpu_local"        # the profile's own name kept
    measured = fitted("--as-measured", "--hardware-name", "cpu_rec_b")
    assert "machine state" not in capsys.readouterr().out
    assert shape(measured) / shape(true) - 1 > 0.15
    assert yaml.safe_load(out.read_text())["name"] == "cpu_rec_b"
