"""The Hydra command line the entry points share (`python -m ouroboros.run`, `.sweep`, `.tune`): overrides checked
before Hydra starts, the validated run with the command line's explicit values applied, and `entry`, which turns a
bad input into one `error:` line (exit 2), an interrupt into `interrupted: N points recorded` (exit 130) and a
Python warning into one `warning: <message>` line (no file path, no source line).

The entry points call down into this module and the executor; nothing here calls back up into an entry point.
"""

from __future__ import annotations

import signal
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

from omegaconf import DictConfig

from ouroboros.config import RunConfig, apply_explicit, check_overrides, explicit_notices, validate
from ouroboros.errors import OuroborosError, report_error
from ouroboros.running.interrupts import Interrupted


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


RESUMES = "rerun to resume"   # what a rerun of a resuming entry point (sweep, tune) does with the records


def _one_line(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
              line: str | None = None) -> None:
    """`warnings.showwarning` for the command line: `warning: <message>` on one line (a path and a source line
    say nothing to whoever runs a benchmark)."""
    print(f"warning: {' '.join(str(message).split())}", file=file if file is not None else sys.stderr)


def one_line_warnings() -> None:
    """Print Python warnings as one `warning:` line each from here on."""
    warnings.showwarning = _one_line


def entry(fn: Callable[[], Any], rerun: str = RESUMES) -> Any:
    """Run an entry point body: a bad input prints `error: <one line>` and exits 2; Ctrl-C or SIGTERM prints
    `interrupted: N points recorded, <rerun>` and exits 130 (every appended record is complete): `rerun` says what
    running the same command again does (`python -m ouroboros.run` measures afresh). Warnings print as one line."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _sigterm)
    one_line_warnings()
    try:
        return fn()
    except OuroborosError as e:
        sys.exit(report_error(e))
    except (Interrupted, KeyboardInterrupt) as e:
        n = e.recorded if isinstance(e, Interrupted) else 0
        print(f"interrupted: {n} point{'s' if n != 1 else ''} recorded, {rerun}", file=sys.stderr)
        sys.exit(130)


def explicit_run(cfg: DictConfig, late: list[str] | None = None) -> RunConfig:
    """The validated run with the command line's explicit values applied (ouroboros.config precedence); prints
    a one-line note for each setting the command line did not pick but that decides the numbers. Notes on the
    decisions' source go to `late` when given (printed once the points pass their checks: `Executor.notes`)."""
    from hydra.core.hydra_config import HydraConfig

    overrides = list(HydraConfig.get().overrides.task)
    run = apply_explicit(validate(cfg), overrides)
    for note in explicit_notices(run, overrides):
        if late is not None and is_late(note):
            late.append(note)
        else:
            print(f"note: {note}", file=sys.stderr)
    return run


def is_late(note: str) -> bool:
    """A note printed after the checks (the decisions' source: loading the simulated pair can still fail)."""
    return note.startswith("decisions:")


def hydra_cli(main: Callable[[], Any]) -> None:
    """Start a Hydra entry point (`main`, decorated with hydra.main) from the command line. Overrides that do not
    compose (`strategy=nope`, a typo'd key, `seed=abc`) print `error: <one line>` and exit 2 before Hydra starts;
    flags (--help, --cfg, -m, ...) go to Hydra as they are."""
    one_line_warnings()
    args = sys.argv[1:]
    if not any(a.startswith("-") for a in args):
        entry(lambda: check_overrides(args))
    main()
