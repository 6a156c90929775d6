"""Closed form: speculative decoding on an i.i.d.-acceptance surrogate matches E(gamma, alpha). Here on 20k tokens
within 1% or 3 standard errors, whichever is wider; `python -m simulators check closed-form` runs 400k tokens
per point for the 1% figure."""

import pytest

from simulators.lab.closed_form import expected_block_efficiency, simulated_block_efficiency


def test_formula_golden():
    assert expected_block_efficiency(0.5, 1) == pytest.approx(1.5)
    assert expected_block_efficiency(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)


@pytest.mark.parametrize("alpha, gamma", [(0.6, 3), (0.8, 5), (0.9, 8)])
def test_speculative_matches_closed_form(alpha, gamma):
    r = simulated_block_efficiency(alpha, gamma, new_tokens=20_000)
    assert abs(r.simulated - r.expected) < max(0.01 * r.expected, 3 * r.stderr), r
    assert r.stderr < 0.01 * r.expected


def test_alpha_zero_gives_one_token_per_forward():
    r = simulated_block_efficiency(0.0, 4, new_tokens=2_000)
    assert r.simulated == pytest.approx(1.0)
