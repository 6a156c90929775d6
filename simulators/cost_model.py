"""Cost model: seconds for ONE forward of k new tokens over ctx cached tokens,

    t(k, ctx) = fixed_s + token_s * k + max(weight_s, flop_s_per_token * ceil(k / tile) * tile)
                + kv_s_per_ctx * ctx + attn_s_per_q_ctx * k * (ctx + k)

- fixed_s: per-forward framework / launch / per-layer overheads (large in HF eager mode) + pipeline hops;
- token_s: per-token costs that are neither weight reads nor matmuls (activation transfers, elementwise);
- max(...): the roofline of the weight matmuls (all decoder layers + LM head): reading every weight once
  (memory bound, small k) vs 2 * params FLOP per token (compute bound, large k), k rounded up to the tile.
  `roofline_p` > 0 replaces the sharp max(w, f) with the smooth (w^p + f^p)^(1/p): real kernels fall below both
  ceilings near the ridge (k where w = f), by 2^(1/p) at the ridge itself (p = 1: weight streaming and compute do
  not overlap at all), and approach the max far from it. 0 (the default) keeps the sharp roofline. Only a
  measurement sets it (`fit` chooses it with the tile: `simulators calibrate clock` on the machine, `--weights random`
  where the weights are not at hand);
- kv_s_per_ctx: reading one cached token's K and V in every layer; attn_s_per_q_ctx: the QK^T and AV cost of one
  query x one key (the k new tokens attend to the ctx cached ones and to each other: k x (ctx + k) pairs).
  With `attention: eager` in the hardware profile (HF transformers' eager LlamaAttention, as the Ouroboros
  paper's code runs) the score matrix [heads, k, ctx + k] is materialised in memory (fp16 scores, scaling, mask
  add, fp32 softmax, cast back: 24 bytes per element at fp16) and the KV cache is copied (torch.cat of the
  legacy cache) and expanded to all heads (GQA repeat_kv) every forward; both are memory traffic at bw.
- Batches (`batch_forward_s`): B sequences with k_i new tokens over ctx_i cached ones in ONE forward read the
  weights once and run the matmuls over sum(k_i) tokens (tile-rounded), while KV reads and attention are per
  sequence: t = fixed + token_s sum k + max(weight_s, flop tile(sum k)) + sum(kv ctx_i + attn k_i (ctx_i + k_i)).
  This is why speculation pays less under load: at B = 1 verifying k tokens costs about one weight read, but
  once sum(k_i) crosses the roofline's ridge every drafted token costs compute. `calibrate batch` measures it.
- one_row_s: what a forward over ONE new token (one row, no batch) costs beyond the formula: matrix-vector
  kernels are not the matrix-matrix ones. Measured with torch's bf16 CPU kernels, the 1.5B target's one-token
  forward is slower than its 2- and 4-token ones on three CPUs (Zen 4 with avx512_bf16: 280 vs 240 ms; Xeon with
  avx512_bf16: 315 vs 298 ms; Xeon with AMX: 275 vs 272 ms at 4), so a monotone formula fitted through them puts
  vanilla's decode step, the step every speedup divides by, 12-14% fast. `fit` fits the formula to the multi-token
  forwards and sets this to the one-token points' mean excess over it (never below 0); every other source leaves
  it 0.
- head_s_per_row: what one LM-head output row (a logits row) costs. The formula above is for a forward that
  computes logits at every fed token, as scoring does (k rows); one that keeps fewer (`logits=`: a prefill keeps
  1) is cheaper by head_s_per_row per row not computed, floored at fixed + weight reads + KV reads. A big
  vocabulary makes this matter: measured on a CPU, Qwen2.5's LM head (151,936 rows) is about 11% of the 1.5B
  target's long prefill and 30% of the 0.5B draft's.

Three ways in: `from_spec` (model profile x hardware profile x dtype, with placement: single device,
pipeline = device_map="auto" (layers run one device after another), tensor parallel), `scaled_to` (a
user's measured t(1) = t_T or t_S; the shape comes from the spec model or is flat), and `fit` (least squares
over measured (k, ctx, seconds) points, as `simulators calibrate clock` does; each point weighted by the forwards
it stands for: 1 when timed, a records group's steps with `--records`, as a decode's time is their sum).
`check_fits` refuses pairs that do not fit the machine's memory.

This module knows nothing of tokens, strategies or clocks: it only turns shapes into seconds.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from simulators.architectures import ModelProfile
from simulators.hardware import ROOFLINE_P_MAX, Hardware

DTYPE_BYTES = {"fp32": 4.0, "float32": 4.0, "fp16": 2.0, "float16": 2.0, "bf16": 2.0, "bfloat16": 2.0,
               "int8": 1.0, "fp8": 1.0, "int4": 0.5}


def dtype_bytes(name: str) -> float:
    if name not in DTYPE_BYTES:
        raise OuroborosError(f"unknown dtype {name!r} for the cost model; known: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[name]


@dataclass(frozen=True)
class CostModel:
    fixed_s: float = 0.0
    token_s: float = 0.0
    weight_s: float = 0.0
    flop_s_per_token: float = 0.0
    tile: int = 1
    kv_s_per_ctx: float = 0.0
    attn_s_per_q_ctx: float = 0.0
    head_s_per_row: float = 0.0
    one_row_s: float = 0.0       # extra for a forward of one new token (module doc)
    roofline_p: float = 0.0      # 0: max(weights, flops); p > 0: (w^p + f^p)^(1/p) (module doc)
    name: str = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, float | int) and not isinstance(v, bool):
                check_range(f"cost model {self.name!r}: {f.name}", v, lo=0)
        check_range(f"cost model {self.name!r}: tile", self.tile, lo=1)
        check_range(f"cost model {self.name!r}: roofline_p", self.roofline_p, lo=0, hi=ROOFLINE_P_MAX,
                    note=" (0 = the sharp roofline)")

    def matmul_s(self, tokens: int) -> float:
        """The weight matmuls of one forward over `tokens` tokens (all rows of a batch): the roofline of reading
        every weight once vs their FLOPs, tokens rounded up to the tile (module doc)."""
        mm = self.flop_s_per_token * (-(-tokens // self.tile) * self.tile)
        p = self.roofline_p
        if not p:
            return mm if mm > self.weight_s else self.weight_s
        w = self.weight_s
        hi = mm if mm > w else w
        return hi * (1.0 + (min(mm, w) / hi) ** p) ** (1.0 / p) if hi > 0 else 0.0

    def forward_s(self, k: int, ctx: int, logits: int | None = None) -> float:
        """Seconds for one forward of k >= 1 new tokens over ctx >= 0 cached tokens, computing `logits` rows of
        the LM head (default: all k)."""
        if k <= 0 or ctx < 0:
            raise OuroborosError(f"a forward needs k >= 1 new tokens and ctx >= 0 cached ones, got k={k}, ctx={ctx}")
        t = (self.fixed_s + self.token_s * k + self.matmul_s(k)
             + ctx * self.kv_s_per_ctx + self.attn_s_per_q_ctx * k * (ctx + k))
        if k == 1:
            t += self.one_row_s
        if logits is not None and logits < k and self.head_s_per_row:
            floor = self.fixed_s + self.weight_s + ctx * self.kv_s_per_ctx
            t = max(t - self.head_s_per_row * (k - max(logits, 1)), floor)
        return t

    def batch_forward_s(self, rows: list[tuple[int, int, int | None]]) -> float:
        """Seconds for ONE forward over a batch: `rows` = (k_i new tokens, ctx_i cached tokens, logits rows or None
        = k_i) per sequence. Weights are read once, the matmuls run over sum(k_i) (tile-rounded), KV reads and
        attention are per sequence. With one row it equals `forward_s`."""
        if not rows:
            raise OuroborosError("a batched forward needs at least one sequence")
        if len(rows) == 1:
            k, ctx, lg = rows[0]
            return self.forward_s(k, ctx, lg)
        ks = kv = attn = saved = 0.0
        for k, ctx, lg in rows:
            if k <= 0 or ctx < 0:
                raise OuroborosError(f"a forward needs k >= 1 new tokens and ctx >= 0 cached ones, got k={k}, "
                                     f"ctx={ctx}")
            ks += k
            kv += ctx
            attn += k * (ctx + k)
            if lg is not None and lg < k:
                saved += k - max(lg, 1)
        t = (self.fixed_s + self.token_s * ks + self.matmul_s(int(ks))
             + kv * self.kv_s_per_ctx + self.attn_s_per_q_ctx * attn)
        if saved and self.head_s_per_row:
            t = max(t - self.head_s_per_row * saved, self.fixed_s + self.weight_s + kv * self.kv_s_per_ctx)
        return t

    def uniform_batch_s(self, batch: int, k: int, ctx: int) -> float:
        """`batch_forward_s` of `batch` identical rows (k new tokens over ctx cached each, logits at every token),
        in O(1)."""
        if batch == 1:
            return self.forward_s(k, ctx)
        ks = batch * k
        return (self.fixed_s + self.token_s * ks + self.matmul_s(ks)
                + batch * ctx * self.kv_s_per_ctx + self.attn_s_per_q_ctx * batch * k * (ctx + k))

    def scaled(self, factor: float) -> CostModel:
        check_range("cost scale factor", factor, lo=0, lo_open=True)
        return replace(self, fixed_s=self.fixed_s * factor, token_s=self.token_s * factor,
                       weight_s=self.weight_s * factor, flop_s_per_token=self.flop_s_per_token * factor,
                       kv_s_per_ctx=self.kv_s_per_ctx * factor, attn_s_per_q_ctx=self.attn_s_per_q_ctx * factor,
                       head_s_per_row=self.head_s_per_row * factor, one_row_s=self.one_row_s * factor)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CostModel:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise OuroborosError(f"cost model has no field {unknown[0]!r}; fields: {', '.join(sorted(known))}")
        return cls(**d)


def from_spec(model: ModelProfile, hw: Hardware, dtype: str = "fp16") -> CostModel:
    """Roofline cost of `model` on `hw` (placement from the hardware profile)."""
    b = dtype_bytes(dtype)
    d = hw.devices if hw.placement != "single" else 1
    bw = hw.mem_bw_gb_s * 1e9 * hw.bw_eff       # bytes/s per device
    fl = hw.tflops * 1e12 * hw.flop_eff          # FLOP/s per device
    weight_s = model.read_params * b / bw
    flop_tok = 2.0 * model.read_params / fl
    kv = model.kv_bytes_per_token(b) / bw
    attn = 4.0 * model.layers * model.hidden / fl  # QK^T + AV: 2 FLOP x hidden each, per query x key
    if hw.attention == "eager":
        # materialised scores: QK^T write 1, scaling r/w 2, mask add r/w 2, fp32 softmax r 1 + w 2, cast r 2 + w 1,
        # AV read 1 = 12 element-sized (b) accesses per query x key x head x layer
        attn += 12.0 * b * model.heads * model.layers / bw
        # legacy cache: torch.cat reads and writes the layer's K, V; GQA repeat_kv writes and reads them per head
        kv += 2 * model.kv_bytes_per_token(b) / bw
        if model.kv_heads != model.heads:
            kv += 2 * 2 * model.layers * model.hidden * b / bw
    fixed = hw.forward_overhead_s + model.layers * hw.layer_overhead_s
    token = 0.0
    link = hw.link_gb_s * 1e9
    if hw.placement == "pipeline" and d > 1:
        # device_map="auto": layers split over d devices that run one after another -> no speed-up from the
        # extra bandwidth; each of the d - 1 boundaries ships the hidden states (k x hidden) once.
        fixed += (d - 1) * hw.link_latency_s
        token += (d - 1) * model.hidden * b / link
    elif hw.placement == "tensor" and d > 1:
        # Megatron-style: every device reads 1/d of each layer; two ring all-reduces of k x hidden per layer.
        weight_s, flop_tok, kv, attn = weight_s / d, flop_tok / d, kv / d, attn / d
        fixed += 2 * model.layers * hw.link_latency_s
        token += 2 * model.layers * 2 * (d - 1) / d * model.hidden * b / link
    head = 2.0 * model.vocab * model.hidden / fl / (d if hw.placement == "tensor" and d > 1 else 1)
    return CostModel(fixed_s=fixed, token_s=token, weight_s=weight_s, flop_s_per_token=flop_tok, tile=hw.tile,
                     roofline_p=hw.roofline_p,
                     kv_s_per_ctx=kv, attn_s_per_q_ctx=attn, head_s_per_row=head,
                     name=f"{model.name}@{hw.name}/{dtype}")


def scaled_to(t1_s: float, base: CostModel | None, ctx_ref: int = 256, name: str = "") -> CostModel:
    """A cost model whose t(1, ctx_ref) equals a measured single-token forward time `t1_s` (t_T or t_S).
    With `base` (e.g. the spec model) its shape in k and ctx is kept; without, the cost is flat in k and ctx."""
    check_range("a measured forward time", t1_s, lo=0, lo_open=True, note=" seconds")
    if base is None:
        return CostModel(fixed_s=float(t1_s), name=name or "flat")
    return replace(base.scaled(t1_s / base.forward_s(1, ctx_ref)), name=name or base.name)


def check_fits(target: ModelProfile, draft: ModelProfile | None, hw: Hardware, dtype: str, ctx: int) -> float:
    """Bytes the pair needs (weights + KV caches at `ctx` tokens); raises a one-line error if the machine's
    usable memory is smaller. Returns the bytes needed."""
    b = dtype_bytes(dtype)
    models = [target] + ([draft] if draft is not None else [])
    weights = sum(m.params for m in models) * b
    kv = sum(m.kv_bytes_per_token(b) for m in models) * ctx
    need = weights + kv
    if need > hw.usable_bytes:
        names = " + ".join(m.name for m in models)
        per_device = hw.usable_bytes / hw.devices
        devices = max(hw.devices + 1, math.ceil(need / per_device))
        placement = "" if hw.devices > 1 else " sim.placement=pipeline"   # 'single' holds one device only
        raise OuroborosError(
            f"{names} in {dtype} needs {need / 1e9:.0f} GB ({weights / 1e9:.0f} GB weights + {kv / 1e9:.1f} GB KV "
            f"at {ctx} tokens) but {hw.name} has {hw.usable_bytes / 1e9:.0f} GB usable ({hw.devices} x "
            f"({hw.mem_gb:g} - {hw.runtime_gb:g}) GB): use more devices (sim.devices={devices}{placement}) or a "
            f"smaller dtype (sim.dtype)")
    return need


@dataclass(frozen=True)
class FitPoint:
    k: int
    ctx: int
    seconds: float
    batch: int = 1      # B sequences of k new tokens over ctx cached ones each, in one forward
    weight: float = 1.0  # its share of the fit: the forwards it stands for (a records group's steps); 1 when timed


@dataclass(frozen=True)
class FitReport:
    mean_abs_rel_err: float
    max_abs_rel_err: float
    rel_errs: tuple[float, ...]      # per point: fitted / measured - 1


_FIT_FIELDS = ("fixed_s", "token_s", "weight_s", "flop_s_per_token", "kv_s_per_ctx", "attn_s_per_q_ctx")
MIN_FIT_POINTS = len(_FIT_FIELDS)


ROOFLINE_PS = (0.0, 1.0, 2.0, 4.0)   # the roofline shapes `fit` tries: sharp, then smooth (module doc)


def fit(points: list[FitPoint], tiles: tuple[int, ...] = (1, 4, 8, 16, 32), name: str = "fitted",
        roofline_ps: tuple[float, ...] = ROOFLINE_PS) -> tuple[CostModel, FitReport]:
    """Least squares (relative residuals, non-negative parameters) of the cost formula over measured points;
    the tile and the roofline's shape (`roofline_p`) are chosen from `tiles` x `roofline_ps` by the best fit (a
    smooth shape must beat the sharp one by more than 1 point of mean relative error to be taken: it has no more
    parameters, but a noisy grid should not buy one). Where there are one-token points and enough others, the
    formula is fitted to the others and `one_row_s` is the one-token points' mean excess over it (module doc)."""
    import numpy as np

    if len(points) < MIN_FIT_POINTS:
        raise OuroborosError(f"fitting the cost model needs >= {MIN_FIT_POINTS} points, got {len(points)}")
    if any(p.seconds <= 0 or p.k < 1 or p.ctx < 0 or p.batch < 1 for p in points):
        raise OuroborosError("fit points need k >= 1, ctx >= 0, batch >= 1 and seconds > 0")
    ones = [p for p in points if p.k * p.batch == 1]
    rest = [p for p in points if p.k * p.batch > 1]
    if not ones or len(rest) < MIN_FIT_POINTS:
        cm = _fit_formula(points, tiles, name, roofline_ps)
    else:
        cm = _fit_formula(rest, tiles, name, roofline_ps)
        excess = float(np.average([p.seconds - cm.forward_s(1, p.ctx) for p in ones], weights=[p.weight for p in ones]))
        cm = replace(cm, one_row_s=max(excess, 0.0))
    rel = tuple(cm.batch_forward_s([(p.k, p.ctx, None)] * p.batch) / p.seconds - 1 for p in points)
    return cm, FitReport(sum(map(abs, rel)) / len(rel), max(map(abs, rel)), rel)


def _fit_formula(points: list[FitPoint], tiles: tuple[int, ...], name: str,
                 roofline_ps: tuple[float, ...]) -> CostModel:
    """The formula's least-squares fit (no one_row_s): `fit` without the one-token split."""
    import numpy as np
    from scipy.optimize import least_squares

    b = np.array([p.batch for p in points], dtype=float)
    k = np.array([p.k for p in points], dtype=float) * b          # tokens in the forward
    kq = np.array([p.k for p in points], dtype=float)             # per sequence
    ctx = np.array([p.ctx for p in points], dtype=float)
    t = np.array([p.seconds for p in points])
    w = np.sqrt(np.array([p.weight for p in points], dtype=float))
    scale = float(t.min())
    def roof(weight, mm, p):
        if not p:
            return np.maximum(weight, mm)
        hi = np.maximum(np.maximum(weight, mm), 1e-300)
        return hi * (1.0 + (np.minimum(weight, mm) / hi) ** p) ** (1.0 / p)

    best: dict[bool, tuple[float, CostModel]] = {}   # sharp / smooth -> (mean error, model)
    for p in roofline_ps:
        for tile in tiles:
            kt = np.ceil(k / tile) * tile

            def model(x, kt=kt, p=p):
                fixed, token, weight, flop, kv, attn = x
                return (fixed + token * k + roof(weight, flop * kt, p) + b * ctx * kv
                        + attn * b * kq * (ctx + kq))

            x0 = np.array([0.3 * scale, 0.1 * scale / max(k.max(), 1), 0.5 * scale, scale / max(kt.max(), 1),
                           0.01 * scale / max(ctx.max(), 1), 0.001 * scale / max((k * ctx).max(), 1)])
            res = least_squares(lambda x, model=model: w * (model(x) / t - 1), x0, bounds=(0, np.inf),
                                x_scale=x0 + 1e-12, max_nfev=4000)
            cm = CostModel(**dict(zip(_FIT_FIELDS, (float(v) for v in res.x), strict=True)), tile=tile,
                           roofline_p=float(p), name=name)
            err = float(np.average(np.abs(model(res.x) / t - 1), weights=w * w))
            if bool(p) not in best or err < best[bool(p)][0]:
                best[bool(p)] = (err, cm)
    if not best:
        raise OuroborosError("fit needs at least one tile and one roofline shape")
    sharp, smooth = best.get(False), best.get(True)
    if smooth is not None and (sharp is None or smooth[0] < sharp[0] - 0.01):
        return smooth[1]
    assert sharp is not None
    return sharp[1]
