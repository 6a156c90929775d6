"""Run an entry point in this process as `python -m <module> args...` would (runpy, so Hydra finds conf/ from
the module's file): (exit code, stdout, stderr). Hydra writes its run folder under `tmp`."""

from __future__ import annotations

import contextlib
import io
import runpy
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

HYDRA_MODULES = ("ouroboros.run", "ouroboros.sweep", "ouroboros.tune")


@dataclass
class Result:
    code: int
    out: str
    err: str


def run_module(module: str, *args: str, tmp: Path | None = None) -> Result:
    argv = [module, *args]
    if module in HYDRA_MODULES:
        argv += [f"hydra.run.dir={tmp or '.'}/hydra", "hydra.output_subdir=null"]
    out, err = io.StringIO(), io.StringIO()
    saved = sys.argv
    sys.argv = argv
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv = saved
    return Result(code, out.getvalue(), err.getvalue())
