"""Cost model, profiles and bad input: golden values by hand, placement rules, the memory check, one-line errors."""

import pytest

from ouroboros.errors import OuroborosError
from simulators import CostModel, Hardware, check_fits, from_spec, make_pair, scaled_to
from simulators.architectures import ModelProfile, PairProfile, load_conf


def one_line(e) -> str:
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg


def test_forward_golden():
    c = CostModel(fixed_s=1, token_s=0.1, weight_s=2, flop_s_per_token=0.5, tile=4, kv_s_per_ctx=0.01,
                  attn_s_per_q_ctx=0.001)
    assert c.forward_s(1, 0) == pytest.approx(3.101)          # 1 + 0.1 + max(2, 0.5 * 4) + 0.001 * 1 * 1
    assert c.forward_s(5, 100) == pytest.approx(7.025)        # 1 + 0.5 + max(2, 0.5 * 8) + 100 * 0.01 + 0.001 * 5 * 105
    assert c.forward_s(4, 0) == c.forward_s(4, 0) and c.forward_s(4, 0) < c.forward_s(5, 0)  # tile step at 5
    assert c.scaled(2).forward_s(5, 100) == pytest.approx(14.05)


def test_profiles_match_published_counts():
    for pair in ("llama70b_7b", "yi34b_6b", "codellama34b_7b", "deepseek33b_6.7b"):
        prof = PairProfile.from_model_cfg(load_conf("model", pair))  # raises if widths disagree with params_b
        assert prof.target.params > 4 * prof.draft.params


def test_spec_yi34b_a800_by_hand():
    m = PairProfile.from_model_cfg(load_conf("model", "yi34b_6b")).target
    hw = Hardware.from_dict(load_conf("hardware", "a800x2"))
    c = from_spec(m, hw, "fp16")
    read = 60 * m.layer_params + 64000 * 7168 + 7168
    assert c.weight_s == pytest.approx(read * 2 / (2039e9 * 0.8))
    assert 0.035 < c.weight_s < 0.05                        # ~68 GB at ~1.6 TB/s
    assert c.flop_s_per_token == pytest.approx(2 * read / (312e12 * 0.6))
    assert c.fixed_s == pytest.approx(0.0115 + 60 * 1.62e-4 + 2e-5)
    # one 16-token tile costs the same as one token; past the roofline knee cost grows with k
    assert c.forward_s(16, 0) - c.forward_s(1, 0) == pytest.approx(15 * c.token_s + 255 * c.attn_s_per_q_ctx)
    assert c.forward_s(256, 0) > 1.5 * c.forward_s(1, 0)
    # eager attention (the paper's code): scores [56 heads, k, ctx + k] materialised (12 fp16 accesses per
    # element per layer) on top of the FLOPs; KV: read + torch.cat copy (3 x 245 kB / token) + repeat_kv to 56 heads
    bw = 2039e9 * 0.8
    assert c.attn_s_per_q_ctx == pytest.approx(4 * 60 * 7168 / (312e12 * 0.6) + 12 * 2 * 56 * 60 / bw)
    assert c.kv_s_per_ctx == pytest.approx((3 * 2 * 60 * 1024 * 2 + 4 * 60 * 7168 * 2) / bw)
    fused = from_spec(m, Hardware.from_dict({**load_conf("hardware", "a800x2"), "attention": "fused"}), "fp16")
    assert fused.kv_s_per_ctx == pytest.approx(2 * 60 * 1024 * 2 / bw)
    # a 120-token lookahead forward at 1000 cached tokens pays ~6 ms more attention traffic than fused kernels
    assert 0.004 < c.forward_s(120, 1000) - fused.forward_s(120, 1000) < 0.01


def test_placements():
    m = PairProfile.from_model_cfg(load_conf("model", "yi34b_6b")).target
    hw = Hardware.from_dict(load_conf("hardware", "a800x2"))
    pipe, tp = from_spec(m, hw), from_spec(m, hw.with_placement("tensor"))
    single = from_spec(m, Hardware.from_dict({**load_conf("hardware", "a800x2"), "devices": 1, "placement": "single"}))
    assert pipe.weight_s == pytest.approx(single.weight_s)          # pipeline: devices run one after another
    assert tp.weight_s == pytest.approx(single.weight_s / 2)        # tensor parallel: each reads half
    assert tp.fixed_s > single.fixed_s and pipe.fixed_s > single.fixed_s


def test_memory_check():
    prof = PairProfile.from_model_cfg(load_conf("model", "llama70b_7b"))
    with pytest.raises(OuroborosError) as e:
        check_fits(prof.target, prof.draft, Hardware.from_dict(load_conf("hardware", "h200")), "fp16", 4096)
    assert "needs" in one_line(e) and "h200" in one_line(e)
    assert check_fits(prof.target, prof.draft, Hardware.from_dict(load_conf("hardware", "a800x2")), "fp16", 2048)
    with pytest.raises(OuroborosError):
        make_pair(load_conf("model", "llama70b_7b"), load_conf("hardware", "h100"), {})
    make_pair(load_conf("model", "llama70b_7b"), load_conf("hardware", "h100"), {"devices": 2, "placement": "tensor"})


def test_measured_times():
    m = PairProfile.from_model_cfg(load_conf("model", "yi34b_6b")).target
    base = from_spec(m, Hardware.from_dict(load_conf("hardware", "a800x2")))
    c = scaled_to(0.064, base, ctx_ref=256)
    assert c.forward_s(1, 256) == pytest.approx(0.064)
    ratio = base.forward_s(200, 256) / base.forward_s(1, 256)
    assert c.forward_s(200, 256) / c.forward_s(1, 256) == pytest.approx(ratio)
    assert scaled_to(0.02, None).forward_s(50, 1000) == pytest.approx(0.02)
    pair = make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "a800x2"),
                     {"t_target_s": 0.064, "t_draft_s": 0.02, "ctx_ref": 256})
    assert pair.costs["target"].forward_s(1, 256) == pytest.approx(0.064)
    assert pair.costs["draft"].forward_s(1, 256) == pytest.approx(0.02)


@pytest.mark.parametrize("call, words", [
    (lambda: CostModel(fixed_s=1).forward_s(0, 5), "k >= 1"),
    (lambda: CostModel(fixed_s=1).forward_s(3, -1), "ctx >= 0"),
    (lambda: CostModel(fixed_s=-0.5), "must be >= 0"),
    (lambda: scaled_to(-0.01, None), "> 0 seconds"),
    (lambda: load_conf("hardware", "tpu9000"), "unknown hardware profile 'tpu9000'"),
    (lambda: load_conf("model", "gpt5_nano"), "unknown model profile"),
    (lambda: Hardware.from_dict({**load_conf("hardware", "a100"), "placement": "diagonal"}), "placement must be"),
    (lambda: Hardware.from_dict({**load_conf("hardware", "a100"), "warp_drive": 1}), "no field 'warp_drive'"),
    (lambda: Hardware.from_dict({**load_conf("hardware", "a100"), "attention": "paged"}), "attention must be"),
    (lambda: Hardware.from_dict({**load_conf("hardware", "a100"), "mem_bw_gb_s": -3}), "must be > 0"),
    (lambda: make_pair({"name": "x", "kind": "tiny"}, load_conf("hardware", "a100")), "no profile"),
    (lambda: make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "h200"), {"tokens": "oracle"}),
     "unknown sim.tokens"),
    (lambda: make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "h200"), {"speed": 3}), "no option"),
    (lambda: make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "h200"), {"t_target_s": -1}), "> 0"),
    (lambda: make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "h200"), {"devices": 2}),
     "placement 'single' needs devices=1"),
    (lambda: make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "a100"), {}), "a100 has 78 GB usable"),
    (lambda: make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "h200"), {"p_copy": 1.5}),
     "p_copy must be in [0, 1], got 1.5"),
    (lambda: make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "h200"), {"p_copy": 0.3,
                                                                                        "copy_window": 2}),
     "sim.copy_window must be >= 3, got 2"),
    (lambda: ModelProfile.from_dict({"name": "m", "layers": 2, "hidden": 64, "intermediate": 128, "heads": 4,
                                     "kv_heads": 4, "vocab": 100, "params_b": 7.0}), "3% apart"),
])
def test_bad_input_one_line(call, words):
    with pytest.raises(OuroborosError) as e:
        call()
    assert words in one_line(e)


def test_fit_recovers_a_known_model():
    from simulators.cost_model import FitPoint, fit

    true = CostModel(fixed_s=0.01, token_s=2e-4, weight_s=0.03, flop_s_per_token=1e-3, tile=8, kv_s_per_ctx=2e-6,
                     attn_s_per_q_ctx=1e-8)
    pts = [FitPoint(k, c, true.forward_s(k, c)) for k in (1, 3, 5, 12, 20, 40, 72, 130) for c in (16, 256, 1024)]
    cm, rep = fit(pts)
    assert rep.max_abs_rel_err < 0.01
    assert cm.tile in (8, 16)  # on this grid tile 16 with 8 ms less fixed_s fits exactly too (k = 40 -> 48)
    for k, c in ((3, 100), (100, 700), (200, 2000)):  # also between and beyond the grid
        assert cm.forward_s(k, c) == pytest.approx(true.forward_s(k, c), rel=0.03)
    with pytest.raises(OuroborosError, match="seconds > 0"):
        fit([FitPoint(1, 0, -1.0)] * 8)


def test_a_one_row_forward_costs_its_own_measured_extra_and_fit_finds_it():
    """torch's bf16 CPU kernels run a one-token forward slower than a 2- or 4-token one (module doc): `one_row_s`
    adds to a forward of exactly one new token, nothing else; `fit` sets it from the k = 1 points' excess over the
    formula fitted to the others, and leaves it 0 without them."""
    from dataclasses import replace

    from simulators.cost_model import FitPoint, fit

    base = CostModel(fixed_s=0.2, token_s=4e-3, weight_s=0.04, flop_s_per_token=4e-3, tile=8, kv_s_per_ctx=1e-5,
                     attn_s_per_q_ctx=2e-6)
    true = replace(base, one_row_s=0.05)
    assert true.forward_s(1, 100) == pytest.approx(base.forward_s(1, 100) + 0.05)
    assert true.forward_s(1, 100) > true.forward_s(2, 100)                       # the measured shape
    assert true.forward_s(2, 100) == base.forward_s(2, 100)
    assert true.batch_forward_s([(1, 10, None), (1, 20, None)]) == base.batch_forward_s([(1, 10, None), (1, 20, None)])
    assert true.scaled(2.0).one_row_s == pytest.approx(0.1)
    grid = [(k, c) for k in (1, 2, 4, 8, 16, 32, 64, 128) for c in (32, 256, 768)]
    cm, rep = fit([FitPoint(k, c, true.forward_s(k, c)) for k, c in grid], tiles=(1, 8))
    assert rep.max_abs_rel_err < 0.02 and cm.one_row_s == pytest.approx(0.05, rel=0.1), (cm, rep.max_abs_rel_err)
    flat, _ = fit([FitPoint(k, c, base.forward_s(k, c)) for k, c in grid if k > 1], tiles=(1, 8))
    assert flat.one_row_s == 0.0
    faster = [FitPoint(k, c, true.forward_s(k, c) * (0.5 if k == 1 else 1.0)) for k, c in grid]
    assert fit(faster, tiles=(1, 8))[0].one_row_s == 0.0                        # never below 0


def test_fit_weights_points_by_the_forwards_they_stand_for():
    """A records group of 3 steps must not pull the fit as hard as one of 300: with each point weighted by its
    steps, a slow one-token group of 3 steps (the first forwards of a few short prompts) moves one_row_s and the
    formula little; unweighted it moves one_row_s by a quarter of its excess."""
    from dataclasses import replace

    from simulators.cost_model import FitPoint, fit

    base = CostModel(fixed_s=0.2, token_s=4e-3, weight_s=0.04, flop_s_per_token=4e-3, tile=8, kv_s_per_ctx=1e-5,
                     attn_s_per_q_ctx=2e-6)
    true = replace(base, one_row_s=0.05)
    grid = [(k, c) for k in (1, 2, 4, 8, 16, 32, 64, 128) for c in (64, 192, 320, 448)]
    pts = [FitPoint(k, c, true.forward_s(k, c) * (1.6 if (k, c) in ((1, 64), (8, 64)) else 1.0),
                    weight=3 if (k, c) in ((1, 64), (8, 64)) else 300) for k, c in grid]
    weighted, _ = fit(pts, tiles=(1, 8))
    plain, _ = fit([replace(p, weight=1.0) for p in pts], tiles=(1, 8))
    assert weighted.one_row_s == pytest.approx(0.05, abs=0.01)
    assert plain.one_row_s - 0.05 > 0.025
    assert abs(weighted.forward_s(1, 192) / true.forward_s(1, 192) - 1) < 0.03
    assert abs(plain.forward_s(1, 192) / true.forward_s(1, 192) - 1) > 0.06


def test_smooth_roofline_shape():
    """roofline_p 0 is the sharp max(w, f); p > 0 is (w^p + f^p)^(1/p): 2^(1/p) x w at the ridge, near the max far
    from it, never below it, and the same in the batched and uniform-batch forms."""
    from dataclasses import replace

    sharp = CostModel(fixed_s=0.01, weight_s=0.04, flop_s_per_token=1e-3, tile=1, kv_s_per_ctx=1e-6)
    assert sharp.forward_s(10, 100) == pytest.approx(0.01 + 0.04 + 1e-4)           # memory bound
    assert sharp.forward_s(80, 100) == pytest.approx(0.01 + 0.08 + 1e-4)           # compute bound
    smooth = replace(sharp, roofline_p=2.0)
    assert smooth.matmul_s(40) == pytest.approx(0.04 * 2 ** 0.5)                    # the ridge: w = f
    assert smooth.matmul_s(1) == pytest.approx(0.04, rel=1e-3)
    assert smooth.matmul_s(4000) == pytest.approx(4.0, rel=1e-4)
    assert replace(sharp, roofline_p=1.0).matmul_s(20) == pytest.approx(0.04 + 0.02)  # p = 1: no overlap
    ks = range(1, 200)
    assert all(smooth.matmul_s(k) >= sharp.matmul_s(k) for k in ks)
    assert all(smooth.forward_s(k + 1, 50) > smooth.forward_s(k, 50) for k in ks)
    assert smooth.batch_forward_s([(30, 10, None), (10, 20, None)]) == pytest.approx(
        0.01 + smooth.matmul_s(40) + 30 * 1e-6)
    assert smooth.uniform_batch_s(4, 10, 20) == pytest.approx(smooth.batch_forward_s([(10, 20, None)] * 4))
    with pytest.raises(OuroborosError, match="roofline_p must be in"):
        Hardware.from_dict({**load_conf("hardware", "a100"), "roofline_p": -1})
    yi = PairProfile.from_model_cfg(load_conf("model", "yi34b_6b")).target
    assert from_spec(yi, Hardware.from_dict({**load_conf("hardware", "a100"), "roofline_p": 2})).roofline_p == 2


def test_fit_recovers_a_smooth_roofline_and_keeps_a_sharp_one():
    """`fit` chooses the roofline's shape with the tile: points of a smooth model are fitted smooth (its p), points
    of a sharp one sharp."""
    from dataclasses import replace

    from simulators.cost_model import FitPoint, fit

    base = CostModel(fixed_s=0.01, token_s=2e-4, weight_s=0.03, flop_s_per_token=1e-3, tile=1, kv_s_per_ctx=2e-6,
                     attn_s_per_q_ctx=1e-8)
    grid = [(k, c) for k in (1, 3, 8, 16, 24, 30, 36, 48, 64, 96, 128) for c in (16, 512)]
    for p in (0.0, 2.0):
        true = replace(base, roofline_p=p)
        cm, rep = fit([FitPoint(k, c, true.forward_s(k, c)) for k, c in grid], tiles=(1, 8))
        assert cm.roofline_p == p and rep.max_abs_rel_err < 0.01, (p, cm, rep.max_abs_rel_err)


def test_logits_rows_kept():
    from dataclasses import replace

    c = CostModel(fixed_s=1, token_s=0.1, weight_s=2, flop_s_per_token=0.5, tile=4, kv_s_per_ctx=0.01,
                  attn_s_per_q_ctx=0.001, head_s_per_row=0.05)
    assert c.forward_s(5, 100, logits=5) == c.forward_s(5, 100)          # every row: a scored forward
    assert c.forward_s(5, 100, logits=1) == pytest.approx(7.025 - 4 * 0.05)
    assert c.forward_s(5, 100, logits=0) == c.forward_s(5, 100, logits=1)  # a forward yields at least one row
    greedy_head = replace(c, head_s_per_row=10.0)
    assert greedy_head.forward_s(5, 100, logits=1) == pytest.approx(1 + 2 + 100 * 0.01)  # floor: fixed + weights + KV
    assert c.scaled(2).forward_s(5, 100, logits=1) == pytest.approx(2 * c.forward_s(5, 100, logits=1))
    with pytest.raises(OuroborosError) as e:
        CostModel(head_s_per_row=-1.0)
    assert "head_s_per_row must be >= 0" in one_line(e)


def test_spec_head_row_and_sim_prefill_charge_one_row():
    pair = make_pair(load_conf("model", "qwen_coder"), load_conf("hardware", "h100"), {"corpus": "code"})
    cost = pair.costs["target"]
    assert cost.head_s_per_row > 0
    assert cost.forward_s(400, 0, logits=1) < cost.forward_s(400, 0)
    prompt = pair.default_prompts(1, 0)[0].ids
    t0 = pair.clock.now()
    pair.target.prefill(prompt)
    assert pair.clock.now() - t0 == pytest.approx(cost.forward_s(len(prompt) - 1, 0, logits=1))
