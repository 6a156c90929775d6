"""ouroboros/checks.py: the range words, the bounds (closed, open, another option's value) and NaN."""

import math

import pytest

from ouroboros.checks import check_range, in_range, range_words
from ouroboros.errors import OuroborosError


@pytest.mark.parametrize(("kw", "words"), [
    ({"lo": 1}, ">= 1"),
    ({"lo": 0, "lo_open": True}, "> 0"),
    ({"hi": 8}, "<= 8"),
    ({"hi": 8, "hi_open": True}, "< 8"),
    ({"lo": 0, "hi": 1}, "in [0, 1]"),
    ({"lo": 0, "hi": 1, "lo_open": True}, "in (0, 1]"),
    ({"lo": 0, "hi": 1, "hi_open": True}, "in [0, 1)"),
    ({"lo": 0, "hi": 64.0}, "in [0, 64]"),
    ({"lo": 1, "hi": 3, "hi_name": "order"}, "in [1, order=3]"),
    ({"lo": 1, "hi_name": "order"}, "in [1, order]"),
    ({}, ""),
])
def test_range_words(kw, words):
    assert range_words(**kw) == words


@pytest.mark.parametrize(("value", "kw", "ok"), [
    (1, {"lo": 1}, True), (0, {"lo": 1}, False),
    (0.0, {"lo": 0, "lo_open": True}, False), (1e-300, {"lo": 0, "lo_open": True}, True),
    (1.0, {"lo": 0, "hi": 1}, True), (1.0, {"lo": 0, "hi": 1, "hi_open": True}, False),
    (math.inf, {"lo": 0}, True), (math.inf, {"lo": 0, "hi": 1}, False),
    (math.nan, {"lo": 0}, False), (math.nan, {}, False),
])
def test_in_range(value, kw, ok):
    assert in_range(value, **kw) is ok


def test_check_range_message():
    check_range("pld.num_pred_tokens", 1, lo=1)
    with pytest.raises(OuroborosError) as e:
        check_range("pld.num_pred_tokens", 0, lo=1)
    assert str(e.value) == "pld.num_pred_tokens must be >= 1, got 0"
    with pytest.raises(OuroborosError) as e:
        check_range("serve.requests", -1, lo=0, note=" (0: one per prompt)")
    assert str(e.value) == "serve.requests must be >= 0 (0: one per prompt), got -1"
    with pytest.raises(OuroborosError) as e:
        check_range("top_p", 0.0, lo=0, hi=1, lo_open=True)
    assert str(e.value) == "top_p must be in (0, 1], got 0.0"
