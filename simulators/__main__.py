"""`python -m simulators {calibrate,check} JOB | trace | bench | write-options`: the simulator's commands, one tree.

The jobs are the lab's (calibration and checking tooling, simulators/lab/; the tree and its help in
simulators/lab/cli.py), loaded only when the command runs: the runtime simulator imports nothing from the lab.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from simulators.lab.cli import main as lab_main

    return lab_main(argv)


if __name__ == "__main__":
    sys.exit(main())
