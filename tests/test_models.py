"""Model loading: kinds, options, tokenizer checks, errors. Tiny models saved to tmp dirs (no download)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from fixtures.tiny_tokenizer import make_tokenizer

from ouroboros import fetch
from ouroboros.backends.models import check_same_tokenizer, eos_ids_of, load_pair
from ouroboros.backends.tiny import tiny_model
from ouroboros.errors import OuroborosError


def save_tiny(folder: Path, words: list[str] | None = None, seed: int = 0) -> Path:
    tok = make_tokenizer(words)
    model = tiny_model("qwen2", seed=seed, vocab_size=len(tok), hidden_size=32, layers=1, heads=2, kv_heads=1)
    model.config.eos_token_id = tok.eos_token_id
    model.generation_config.eos_token_id = [tok.eos_token_id, 5]
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {"t": save_tiny(root / "t"), "d": save_tiny(root / "d", seed=1),
            "other": save_tiny(root / "other", words=["x", "y", "z"])}


def test_hf_kind_loads_target_draft_tokenizer_and_eos(dirs):
    pair = load_pair({"kind": "hf", "target": str(dirs["t"]), "draft": str(dirs["d"])}, dtype="bfloat16")
    assert pair.target.dtype == torch.bfloat16 and pair.draft is not None and pair.draft.dtype == torch.bfloat16
    assert not pair.target.training
    assert pair.tokenizer is not None and pair.tokenizer.eos_token_id == 1
    assert pair.eos_ids == (1, 5)                      # generation config first, deduplicated
    assert not torch.equal(pair.target.lm_head.weight, pair.draft.lm_head.weight)


def test_draft_is_optional_and_eos_can_be_given(dirs):
    pair = load_pair({"kind": "hf", "target": str(dirs["t"]), "eos_ids": [3]}, dtype="float32")
    assert pair.draft is None and pair.eos_ids == (3,) and pair.target.dtype == torch.float32


def test_tokenizer_mismatch_is_refused(dirs):
    with pytest.raises(OuroborosError, match="different tokenizers"):
        load_pair({"kind": "hf", "target": str(dirs["t"]), "draft": str(dirs["other"])})


def test_check_same_tokenizer_names_the_first_difference():
    a = make_tokenizer(["a", "b", "c"])
    with pytest.raises(OuroborosError, match=r"token 'b' is id 7 in the target, 8 in the draft"):
        check_same_tokenizer(a, make_tokenizer(["a", "c", "b"]), "t", "d")
    with pytest.raises(OuroborosError, match=r"token 'c' \(id 8\) is missing from the draft"):
        check_same_tokenizer(a, make_tokenizer(["a", "b"]), "t", "d")
    check_same_tokenizer(a, make_tokenizer(["a", "b", "c"]), "t", "d")   # same vocabulary: accepted


@pytest.mark.parametrize("cfg, msg", [
    ({"kind": "nope"}, "unknown model kind 'nope'"),
    ({"kind": "hf", "target": "x", "colour": 1}, "model kind 'hf' has no option 'colour'"),
    ({"kind": "hf"}, "model.target is required"),
    ({"kind": "hf", "target": "./no/such/dir"}, "is not a model directory or a .gguf file"),
    ({"kind": "hf", "target": "/no/such/file.gguf"}, "GGUF file not found"),
    ({"kind": "gguf", "target": "some/dir"}, "model kind 'gguf' needs .gguf files"),
])
def test_bad_model_specs_are_one_line_errors(cfg, msg):
    with pytest.raises(OuroborosError, match=msg) as e:
        load_pair(cfg)
    assert "\n" not in str(e.value)


def test_not_a_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(OuroborosError, match="is not a model directory"):
        load_pair({"kind": "hf", "target": str(tmp_path)})


def test_fetched_kinds_load_the_cached_copies(dirs, monkeypatch):
    seen = []

    def ensure(key, cache_dir=None, dtype="bfloat16", wheel_dir=None, **kw):
        seen.append((key, cache_dir, wheel_dir))
        return dirs["t"] if key == "qwen2.5-coder-1.5b-instruct" else dirs["d"]

    monkeypatch.setattr(fetch, "ensure_model", ensure)
    pair = load_pair({"kind": "qwen-coder", "cache_dir": "/c", "wheel_dir": "/w"}, dtype="float32")
    assert pair.draft is not None and pair.tokenizer is not None
    assert seen == [("qwen2.5-coder-1.5b-instruct", "/c", "/w"), ("qwen2.5-coder-0.5b-instruct", "/c", "/w")]
    seen.clear()
    assert load_pair({"kind": "qwen-coder", "draft": False}).draft is None
    assert [s[0] for s in seen] == ["qwen2.5-coder-1.5b-instruct"]
    assert load_pair({"kind": "smollm2"}).draft is None         # the pair has no draft
    with pytest.raises(OuroborosError, match="unknown draft 'nope'"):
        load_pair({"kind": "qwen-coder", "draft": "nope"})


def test_profile_section_is_not_a_loading_option(dirs):
    pair = load_pair({"kind": "hf", "target": str(dirs["t"]), "profile": {"t_T_ms": 1.0}})
    assert pair.target is not None


def test_eos_ids_of_handles_ints_lists_and_none():
    class Cfg:
        eos_token_id = 4

    class Gen:
        eos_token_id = [7, 4]

    class M:
        config = Cfg()
        generation_config = Gen()

    class Tok:
        eos_token_id = None

    assert eos_ids_of(M(), Tok()) == (7, 4)


@pytest.mark.slow
def test_real_smollm2_loads_and_answers():
    from ouroboros.backends.hf import HFBackend
    from ouroboros.loop.decode import decode
    from ouroboros.strategies import build_proposer

    pair = load_pair({"kind": "smollm2"}, dtype="bfloat16")
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    text = pair.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)  # type: ignore
    ids = pair.tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore
    target = HFBackend(pair.target)
    res = decode(target, build_proposer("vanilla", {}, target), ids, 16, pair.eos_ids)
    assert "Paris" in pair.tokenizer.decode(res.output)  # type: ignore


def test_bf16_upcast_routes_only_large_inputs_and_matches_an_fp32_product(dirs):
    from ouroboros.backends.models import _upcast_linear, upcast_bf16_linears

    pair = load_pair({"kind": "hf", "target": str(dirs["t"]), "bf16_upcast_rows": 4}, dtype="bfloat16")
    routed = [m for m in pair.target.modules() if isinstance(m, torch.nn.Linear) and "forward" in vars(m)]
    assert len(routed) == sum(isinstance(m, torch.nn.Linear) for m in pair.target.modules()) > 0
    lin = routed[0]
    torch.manual_seed(0)
    small, big = torch.randn(1, 3, lin.in_features).bfloat16(), torch.randn(2, 2, lin.in_features).bfloat16()
    native = torch.nn.functional.linear
    assert torch.equal(lin(small), native(small, lin.weight, lin.bias))             # 3 rows < 4: torch's bf16 kernel
    ref = native(big.double(), lin.weight.double(), None if lin.bias is None else lin.bias.double())
    out = lin(big)                                                                 # 4 rows: the fp32 product
    assert out.dtype == torch.bfloat16 and torch.equal(out, _upcast_linear(lin, 4, big))
    assert torch.allclose(out.double(), ref, rtol=1e-2, atol=1e-2)
    with torch.no_grad():  # the whole model: same greedy prefix either way, logits within bf16 rounding
        ids = torch.tensor([[2, 3, 4, 5, 6, 7]])
        off = load_pair({"kind": "hf", "target": str(dirs["t"]), "bf16_upcast_rows": 0}, dtype="bfloat16")
        a, b = pair.target(input_ids=ids).logits, off.target(input_ids=ids).logits
        assert torch.allclose(a.float(), b.float(), atol=0.1)
    assert upcast_bf16_linears(off.target, 0) == 0
    fp32 = load_pair({"kind": "hf", "target": str(dirs["t"]), "bf16_upcast_rows": 4}, dtype="float32")
    assert not any("forward" in vars(m) for m in fp32.target.modules())            # only bf16 weights are routed
    with pytest.raises(OuroborosError, match="bf16_upcast_rows must be >= 0"):
        load_pair({"kind": "hf", "target": str(dirs["t"]), "bf16_upcast_rows": -1})


def test_bf16_packed_linears_match_torchs_and_free_the_plain_weights(dirs):
    """`bf16_packed`: the bf16 linears on oneDNN with packed weights give torch's outputs (bf16 rounding), the plain
    weights are dropped except the output embedding's; a wrong value, or packing beside routing, is one line before
    any weights load."""
    from ouroboros.backends import models

    spec = {"kind": "hf", "target": str(dirs["t"]), "draft": str(dirs["d"]), "bf16_upcast_rows": 0}
    with pytest.raises(OuroborosError, match="bf16_packed must be true, false or null"):
        load_pair({**spec, "bf16_packed": "yes"}, dtype="bfloat16")
    with pytest.raises(OuroborosError, match="both claim the bf16 linears"):
        load_pair({**spec, "bf16_upcast_rows": 4, "bf16_packed": True}, dtype="bfloat16")
    if not models.onednn_bf16_available():
        with pytest.raises(OuroborosError, match="has no oneDNN bf16"):
            load_pair({**spec, "bf16_packed": True}, dtype="bfloat16")
        pytest.skip("no oneDNN bf16 on this CPU: packing is refused (checked above)")
    plain = load_pair({**spec, "bf16_packed": False}, dtype="bfloat16")
    packed = load_pair({**spec, "bf16_upcast_rows": None, "bf16_packed": True}, dtype="bfloat16")
    for a, b in ((plain.target, packed.target), (plain.draft, packed.draft)):
        lins = [m for m in b.modules() if isinstance(m, torch.nn.Linear)]
        assert lins and all("forward" in vars(m) for m in lins)        # every bf16 linear packed, none routed
        assert not any("forward" in vars(m) for m in a.modules())
        head = b.get_output_embeddings()
        assert head.weight.shape == a.get_output_embeddings().weight.shape   # the vocabulary stays readable
        assert all(m.weight.numel() == 0 for m in lins if m is not head)     # no second copy of the weights
        with torch.no_grad():
            ids = torch.tensor([[2, 3, 4, 5, 6, 7, 8]])
            x, y = a(input_ids=ids).logits.float(), b(input_ids=ids).logits.float()
        assert torch.allclose(x, y, atol=0.1) and (x - y).abs().max() < 0.1 * x.abs().max()
    fp32 = load_pair({**spec, "bf16_packed": True}, dtype="float32")
    assert not any("forward" in vars(m) for m in fp32.target.modules())   # only bf16 weights are packed
    assert models.pack_bf16_linears(plain.target, False) == 0


def test_every_real_model_yaml_has_only_loading_options_or_simulator_sections():
    """Each conf/model YAML of a loadable kind passes the loader's option check as written (the qwen_coder YAML's
    `sim_profiles` once made `model=qwen_coder` fail before loading anything)."""
    import yaml

    from ouroboros.backends.models import LOADERS, loading_options

    checked = []
    for path in sorted((Path(__file__).resolve().parents[1] / "conf" / "model").glob("*.yaml")):
        cfg = yaml.safe_load(path.read_text())
        if cfg.get("kind") in LOADERS:
            kind, options = loading_options(cfg)
            assert "sim_profiles" not in options and "profile" not in options
            checked.append(path.stem)
    assert {"qwen_coder", "smollm2", "tiny"} <= set(checked)
