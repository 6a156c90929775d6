"""Range checks of options: one call states a value's valid range, and a value outside it is one error line in one
wording, `<name> must be <range>[<note>], got <value>`:

    check_range("pld.num_pred_tokens", 0, lo=1)             -> pld.num_pred_tokens must be >= 1, got 0
    check_range("top_p", 0.0, lo=0, hi=1, lo_open=True)     -> top_p must be in (0, 1], got 0.0
    check_range("sim.local_ctx", 4, 1, 3, hi_name="order")  -> sim.local_ctx must be in [1, order=3], got 4

A bound may be another option's value (`lo_name` / `hi_name` say which). NaN lies outside every range. Checks
that are not a range (choices, conditions between several options) stay written out where they are made.
Knows nothing of which options exist; imports only the error type.
"""

from __future__ import annotations

import math

from ouroboros.errors import OuroborosError


def _bound(value: float | None, name: str | None) -> str:
    num = "" if value is None else format(value, "g") if isinstance(value, float) else str(value)
    return f"{name}={num}" if name and num else name or num


def range_words(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
                hi_open: bool = False, lo_name: str | None = None, hi_name: str | None = None) -> str:
    """The range in words: ">= 1", "> 0", "<= 8", "in [0, 1)", "in [1, order=3]" ("" when unbounded)."""
    has_lo, has_hi = lo is not None or bool(lo_name), hi is not None or bool(hi_name)
    a, b = _bound(lo, lo_name), _bound(hi, hi_name)
    if has_lo and has_hi:
        return f"in {'(' if lo_open else '['}{a}, {b}{')' if hi_open else ']'}"
    if has_lo:
        return f"{'>' if lo_open else '>='} {a}"
    if has_hi:
        return f"{'<' if hi_open else '<='} {b}"
    return ""


def in_range(value: float, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False,
             hi_open: bool = False) -> bool:
    if isinstance(value, float) and math.isnan(value):
        return False
    if lo is not None and (value <= lo if lo_open else value < lo):
        return False
    return hi is None or (value < hi if hi_open else value <= hi)


def check_range(name: str, value: float, lo: float | None = None, hi: float | None = None, *,
                lo_open: bool = False, hi_open: bool = False, lo_name: str | None = None,
                hi_name: str | None = None, note: str = "") -> None:
    """Raise OuroborosError unless lo <= value <= hi (strict on an open side; a None bound is no bound). `note`
    follows the range in the message (" (0: off)")."""
    if not in_range(value, lo, hi, lo_open=lo_open, hi_open=hi_open):
        words = range_words(lo, hi, lo_open=lo_open, hi_open=hi_open, lo_name=lo_name, hi_name=hi_name)
        raise OuroborosError(f"{name} must be {words}{note}, got {value}")
