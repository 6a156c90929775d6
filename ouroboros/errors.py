"""The one error type of bad inputs (`OuroborosError`) and the command-line convention for it (`cli`,
`report_error`): an entry point prints its message as one `error: <message>` line on stderr and exits 2.

At the very bottom of the import graph: imports nothing of ouroboros, so every module may import it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import ParamSpec

__all__ = ["OuroborosError", "cli", "report_error"]

_P = ParamSpec("_P")


class OuroborosError(ValueError):
    """A bad input or configuration. Entry points print its message as one line and exit non-zero."""


def report_error(e: OuroborosError) -> int:
    """Print `error: <message>` to stderr; return the exit code (2) entry points use for a bad input."""
    print(f"error: {e}", file=sys.stderr)
    return 2


def cli(main: Callable[_P, int]) -> Callable[_P, int]:
    """Decorate a command-line `main(argv=None) -> int`: an `OuroborosError` it raises is printed as one
    `error: <message>` line on stderr and main returns 2; otherwise main's own return value is returned."""

    @functools.wraps(main)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> int:
        try:
            return main(*args, **kwargs)
        except OuroborosError as e:
            return report_error(e)

    return wrapper
