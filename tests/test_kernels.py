"""ouroboros.backends.kernels.bf16_linear: fp32-accurate, row-independent (bit-identical output rows whatever the number
of rows, which the routed bf16 forwards rely on), and the blocked fp32 fallback agrees."""

import pytest
import torch

from ouroboros.backends import kernels
from ouroboros.backends.models import _fp32_blocks


@pytest.fixture(scope="module")
def op():
    """The kernel, built when a test first needs it (not at collection: every xdist worker collects every module,
    and a build there held both workers for the whole compile)."""
    fn = kernels.kernel()
    if fn is None:
        pytest.skip(f"bf16 kernel unavailable: {kernels.unavailable_reason()}")
    return fn

# (N, K, M): M < 4 runs 4 x 2 tiles, M >= 4 runs 3 x 4 tiles with 2- and 1-row remainders
SHAPES = [(1, 8, 1), (7, 13, 1), (9, 24, 5), (33, 8, 3), (64, 100, 9), (257, 1536, 8), (5, 17, 6), (11, 40, 13)]


@pytest.mark.parametrize("n, k, m", SHAPES)
def test_kernel_matches_an_fp64_product_and_is_row_independent(op, n, k, m):
    g = torch.Generator().manual_seed(n * 1000 + k)
    w = torch.randn(n, k, generator=g).bfloat16()
    x = torch.randn(m, k, generator=g)
    y = op(x, w)
    ref = x.double() @ w.double().t()
    assert y.shape == (m, n) and y.dtype == torch.float32
    assert torch.allclose(y.double(), ref, rtol=1e-5, atol=1e-5 * k ** 0.5)
    for i in range(m):  # a row alone, and inside every sub-batch that starts with it
        assert torch.equal(op(x[i:i + 1].contiguous(), w)[0], y[i])
        assert torch.equal(op(x[i:].contiguous(), w)[0], y[i])


def test_kernel_refuses_bad_inputs(op):
    w = torch.randn(4, 8).bfloat16()
    with pytest.raises(RuntimeError, match="disagree on K"):
        op(torch.randn(2, 9), w)
    with pytest.raises(RuntimeError, match="fp32"):
        op(torch.randn(2, 8).bfloat16(), w)


@pytest.mark.parametrize("n, k, m", SHAPES)
def test_blocked_fp32_fallback_matches(n, k, m):
    g = torch.Generator().manual_seed(n + k)
    w = torch.randn(n, k, generator=g).bfloat16()
    x = torch.randn(m, k, generator=g)
    with torch.no_grad():
        y = _fp32_blocks(x, w)
    assert torch.allclose(y.double(), x.double() @ w.double().t(), rtol=1e-5, atol=1e-5 * k ** 0.5)


def test_kernel_can_be_switched_off(monkeypatch):
    monkeypatch.setenv("OUROBOROS_NO_KERNELS", "1")
    op2, why = kernels._build()
    assert op2 is None and "OUROBOROS_NO_KERNELS" in why
