"""Figures a refactor must not move: the main job's table, the 27-point grid, the serving sweep and `check paper`.

    python tests/golden/check.py            # run them here and compare with tests/golden/*.txt (exit 1 on a change)
    python tests/golden/check.py --write    # record the current outputs as the expected ones

Each command runs in a fresh temporary folder (no records to resume, wandb off) and its stdout is compared line by
line after dropping the lines that name a path or a time of day. All of them are simulated (modelled clock), so
their figures are deterministic. The losslessness suites are the default `python -m pytest`.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SWEEP = [sys.executable, "-m", "ouroboros.sweep", "model=llama70b_7b", "hydra.run.dir=h",
         "logger.wandb.mode=disabled"]
JOBS: dict[str, list[str]] = {
    "main_job": SWEEP,
    "grid27": SWEEP + ["sweep=grid27"],
    "load": SWEEP + ["hardware=h100", "sweep=load", "serve.requests=32"],
    "validate_paper": [sys.executable, "-m", "simulators", "check", "paper"],
}
VOLATILE = re.compile(r"wandb|records:|\[\d{4}-\d\d-\d\d|font_manager|outputs/|multirun/")


def run(name: str) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, WANDB_MODE="disabled", PYTHONPATH=str(ROOT))
        out = subprocess.run(JOBS[name], cwd=tmp, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"error: {name} exited {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
    return [line for line in out.stdout.splitlines() if not VOLATILE.search(line)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="record the outputs as expected")
    ap.add_argument("jobs", nargs="*", help=f"which of {sorted(JOBS)} (default: all)")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.jobs) - set(JOBS))
    if unknown:
        ap.error(f"unknown job(s) {unknown}; choose from {sorted(JOBS)}")
    changed = 0
    for name in args.jobs or JOBS:
        got, path = run(name), HERE / f"{name}.txt"
        if args.write:
            path.write_text("\n".join(got) + "\n")
            print(f"{name}: recorded {len(got)} lines in {path.relative_to(ROOT)}")
            continue
        want = path.read_text().splitlines()
        diff = list(difflib.unified_diff(want, got, f"expected/{name}", f"now/{name}", lineterm="", n=1))
        changed += bool(diff)
        print(f"{name}: {'CHANGED' if diff else 'same'} ({len(got)} lines)")
        print("\n".join(diff[:40]))
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
