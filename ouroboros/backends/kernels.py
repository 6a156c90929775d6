"""A bf16 x fp32 matrix product for CPUs without native bf16 (AVX2 + FMA, no AVX512-BF16 / AMX).

Why: there, torch's bf16 linear re-reads (and re-converts) the weights for every input row, so a forward over k
tokens costs about k times a 1-token forward (measured on a Zen 3 core: 1536x8960 layer, k=16: 47 ms vs 3.7 ms).
Speculative decoding lives on k-token forwards costing about one. `bf16_linear(x, w)` reads each bf16 weight row
once, converts it to fp32 in registers and multiplies it with every input row (fp32 accumulation, one rounding to
bf16 by the caller, as a bf16 GEMM does).

Row independence: output (m, n) is summed in the same order whatever the number of rows M, so a k-token forward's
linear layers give every token bit-for-bit what a 1-token forward gives it (torch's bf16 kernels do not promise
this; near-tie argmaxes then flip between vanilla decoding and verification).

Built on first use with torch's C++ extension loader (g++ and ninja; cached under TORCH_EXTENSIONS_DIR, default
~/.cache/torch_extensions, outside the repo; 7-25 s once). `kernel()` returns None, with the reason in
`unavailable_reason()`, where it cannot be built or the CPU lacks AVX2/FMA; callers then keep torch's kernels.

Knows nothing of models or strategies.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import torch

_SRC = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <torch/library.h>
#include <immintrin.h>
#include <cstring>

static inline __m256 load_bf16x8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 sh = _mm_movehdup_ps(s);
  s = _mm_add_ps(s, sh);
  sh = _mm_movehl_ps(sh, s);
  s = _mm_add_ss(s, sh);
  return _mm_cvtss_f32(s);
}

static inline float bf16_to_float(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// rows m0..m0+MT of y, columns n..n+NR-1 (weight rows w + j*K; rows past `nr` repeat the last one, unwritten).
// Every (m, n) is summed over K in the same order (8-lane FMA chains, then one horizontal sum, then the tail),
// whatever MT, NR or M: the row independence the module doc promises.
template <int NR, int MT>
static void tile(const float* x, int64_t K, const uint16_t* w, int nr, float* y, int64_t N, int64_t n) {
  const uint16_t* wr[NR];
  for (int j = 0; j < NR; ++j) wr[j] = w + (j < nr ? j : nr - 1) * K;
  __m256 acc[NR][MT];
  for (int j = 0; j < NR; ++j)
    for (int m = 0; m < MT; ++m) acc[j][m] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 v[NR];
    for (int j = 0; j < NR; ++j) v[j] = load_bf16x8(wr[j] + k);
    for (int m = 0; m < MT; ++m) {
      __m256 xv = _mm256_loadu_ps(x + m * K + k);
      for (int j = 0; j < NR; ++j) acc[j][m] = _mm256_fmadd_ps(v[j], xv, acc[j][m]);
    }
  }
  for (int m = 0; m < MT; ++m) {
    for (int j = 0; j < nr; ++j) {
      float s = hsum8(acc[j][m]);
      for (int64_t kk = k; kk < K; ++kk) s = std::fma(bf16_to_float(wr[j][kk]), x[m * K + kk], s);
      y[m * N + n + j] = s;
    }
  }
}

// y = x w^T over all M rows: weight rows in groups of NR (threads split the groups), input rows in tiles of MT
// (then 2, then 1 for the remainder). The tile shape changes speed, never the sums.
template <int NR, int MT>
static void run(const float* xp, const uint16_t* wp, float* yp, int64_t M, int64_t K, int64_t N) {
  at::parallel_for(0, (N + NR - 1) / NR, 16, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const int64_t n = NR * p;
      const int nr = static_cast<int>(std::min<int64_t>(NR, N - n));
      const uint16_t* wn = wp + n * K;
      int64_t m0 = 0;
      for (; m0 + MT <= M; m0 += MT) tile<NR, MT>(xp + m0 * K, K, wn, nr, yp + m0 * N, N, n);
      for (; m0 + 2 <= M; m0 += 2) tile<NR, 2>(xp + m0 * K, K, wn, nr, yp + m0 * N, N, n);
      if (m0 < M) tile<NR, 1>(xp + m0 * K, K, wn, nr, yp + m0 * N, N, n);
    }
  });
}

at::Tensor bf16_linear(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous(), "x: contiguous fp32 [M, K]");
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kBFloat16 && w.is_contiguous(), "w: contiguous bf16 [N, K]");
  TORCH_CHECK(x.size(1) == w.size(1), "x and w disagree on K");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  auto y = at::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  float* yp = y.data_ptr<float>();
  // 4 weight rows x 2 input rows for M < 4; 3 x 4 from M = 4 on (12 accumulators + 3 weight vectors + 1 input
  // vector = the 16 ymm registers; measured 10-25% faster than 4 x 2 at M >= 4 on a Zen 3 core)
  if (M >= 4) run<3, 4>(xp, wp, yp, M, K, N);
  else run<4, 2>(xp, wp, yp, M, K, N);
  return y;
}

TORCH_LIBRARY(ouroboros_kernels, m) { m.def("bf16_linear(Tensor x, Tensor w) -> Tensor", &bf16_linear); }
"""

_NAME = "ouroboros_bf16_linear_v4"
_lock = threading.Lock()
_state: dict[str, Any] = {}


def cpu_supports() -> bool:
    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512", "AVX512_BF16", "AMX")


def kernel():
    """The compiled `bf16_linear(x fp32 [M, K], w bf16 [N, K]) -> fp32 [M, N]`, or None (see
    `unavailable_reason`). Built once per process (and cached on disk across processes)."""
    with _lock:
        if "op" not in _state:
            _state["op"], _state["why"] = _build()
        return _state["op"]


def unavailable_reason() -> str | None:
    kernel()
    return _state["why"]


def _build():
    if os.environ.get("OUROBOROS_NO_KERNELS"):
        return None, "OUROBOROS_NO_KERNELS is set"
    if not cpu_supports():
        return None, f"the CPU has no AVX2/FMA (torch reports {torch.backends.cpu.get_cpu_capability()})"
    try:
        from torch.utils import cpp_extension

        # A torch op library, not a Python module: its source includes ATen's tensor header only, not
        # torch/extension.h (pybind11 and all of ATen), which cut the first build from about 23 s to 7 s here. The
        # source is rewritten only when it changed, so a cached build is not rebuilt (ninja compares times).
        src = Path(cpp_extension._get_build_directory(_NAME, verbose=False)) / "bf16_linear.cpp"
        if not src.exists() or src.read_text() != _SRC:
            src.write_text(_SRC)
        cpp_extension.load(name=_NAME, sources=[str(src)], extra_cflags=["-O3", "-mavx2", "-mfma", "-fopenmp"],
                           extra_ldflags=["-fopenmp"], is_python_module=False, verbose=False)
    except Exception as e:  # no compiler, no ninja, a read-only cache: torch's kernels stay
        return None, f"the bf16 kernel could not be built ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
    return torch.ops.ouroboros_kernels.bf16_linear, None
