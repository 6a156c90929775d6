"""Calibration end to end on the tiny random pair: times real hf forwards, fits, writes a profile that make_pair
then uses (the fitted cost replaces the spec-sheet one)."""

import yaml

from simulators import make_pair
from simulators.calibrate import main

TINY_PROFILE = {"target": {"name": "tiny-t", "layers": 4, "hidden": 256, "intermediate": 512, "heads": 4,
                           "kv_heads": 2, "vocab": 512, "max_context": 512},
                "draft": {"name": "tiny-d", "layers": 2, "hidden": 256, "intermediate": 512, "heads": 4,
                          "kv_heads": 2, "vocab": 512, "max_context": 512}}


def test_calibrate_tiny_writes_a_usable_profile(tmp_path, capsys):
    out = tmp_path / "cpu.yaml"
    rc = main(["--model", "tiny", "--names", "tiny-t,tiny-d", "--dtype", "float32", "--ks", "1,4,16",
               "--ctxs", "8,32", "--repeats", "1", "--threads", "1", "--out", str(out), "--batches", "1,3",
               "--batch-ks", "1,2", "--batch-ctxs", "16"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "B=3   k=2    ctx=16" in text   # batched points timed and fitted with the rest
    assert "tiny-t: fit error mean" in text and "tiny-d: fit error mean" in text
    assert "tiny-t: LM head" in text and "k=16   ctx=0     all logits" in text
    hw = yaml.safe_load(out.read_text())
    assert set(hw["costs"]) == {"tiny-t", "tiny-d"}
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



def test_timing_statistic():
    import pytest

    from ouroboros.backends.base import OuroborosError
    from simulators.calibrate import pick

    assert pick([0.3, 0.1, 0.2], "median") == 0.2 and pick([0.3, 0.1, 0.2], "min") == 0.1
    with pytest.raises(OuroborosError, match="unknown timing statistic 'mean'"):
        pick([0.1], "mean")
