"""`python -m simulators {calibrate,check} JOB | trace | bench | write-options`: the simulator's commands, one tree.

Every job lives in the lab (simulators/lab/, paths below relative to it); simulators/__main__.py loads this module
only when the command runs, so the runtime simulator never imports the lab.

calibrate (writes profiles):
  clock       time a real backend over k x ctx, fit the cost model, write a hardware profile (calibration/cost.py)
  proposers   a real run's recorded steps -> the proposers' host time per step in its hardware profile
              (calibration/proposers.py)
  measured    a pair's vanilla + SpS figures -> one sim profile per task (calibration/measured.py)
  paper       `measured` on the Yi-34B/6B paper figures (conf/calibration/yi34b_6b_a800x2.yaml)
  decisions   a sim profile fitted to a real pair's recorded decisions (decisions/fit.py)
  prior       the surrogate target's text prior, fitted to several tasks' recordings (calibration/prior.py)
  bands       the error bands every simulated number is shown with (calibration/bands.py)
  floor       how far a few real prompts' figures stray from their task's: the least band on N prompts
              (spread.py)
check (compares predictions with measurements; writes no profile):
  paper, sensitivity, copy-rate, closed-form   against published figures and closed forms (checks/paper.py)
  decisions   real vs simulated decision statistics on held-out prompts (decisions/check.py)
  clock       record real runs, replay them on the simulator: real vs modelled time (checks/clock.py)
  spread      how far k prompts' real eta strays from all recorded ones: the floor under checks (spread.py)
trace        a real run's outputs as a replay trace: pld, suffix, REST replay exactly at any settings (trace_outputs.py)
bench {speed,grid}     how fast the simulator itself runs (bench.py)
write-options [--check]  conf/sim/default.yaml and docs/simulator.md's options table from SimConfig (write_options.py)

A bad job or flag is one `error:` line, exit 2. Each job's module holds its `add_args(ap)` and `main(args)`.
"""

from __future__ import annotations

from ouroboros.argparser import ArgumentParser
from ouroboros.errors import cli
from simulators.lab import bench, spread, trace_outputs, write_options
from simulators.lab.calibration import bands, cost, measured, prior, proposers
from simulators.lab.checks import clock, paper
from simulators.lab.decisions import check as check_decisions
from simulators.lab.decisions import fit as fit_decisions

# (job, what it does, add its flags, run it); the module's docstring is the job's --help description
CALIBRATE = (
    ("clock", "time a real backend and fit the hardware clock (cost model)", cost.add_args, cost.main),
    ("proposers", "the proposers' host time per step, fitted to a real run's records", proposers.add_args,
     proposers.main),
    ("measured", "a profile per task from a pair's vanilla + SpS figures", measured.add_args, measured.main),
    ("paper", "the Yi-34B/6B profiles from the paper's figures", measured.add_args, measured.paper_main),
    ("decisions", "a profile fitted to a real pair's recorded decisions", fit_decisions.add_args, fit_decisions.main),
    ("prior", "the text prior fitted to several tasks' recordings", prior.add_args, prior.main),
    ("bands", "the error bands of every simulated number", bands.add_args, bands.main),
    ("floor", "the least band of a run of N prompts, from real prompts' spread", spread.floor_args,
     spread.floor_main),
)
CHECK = (
    ("paper", "predicted vs published figures of the Ouroboros paper", paper.paper_args, paper.paper_main),
    ("sensitivity", "the paper's GSM8K 3x3x3 grid, predicted vs published", paper.fit_args, paper.sensitivity_main),
    ("copy-rate", "real vs surrogate copying, and the p_copy that matches", paper.copy_rate_args, paper.copy_rate_main),
    ("closed-form", "speculative on the i.i.d. surrogate vs E(gamma, alpha)", paper.closed_form_args,
     paper.closed_form_main),
    ("decisions", "real vs simulated decision statistics, held-out prompts", check_decisions.add_args,
     check_decisions.main),
    ("clock", "real vs modelled time of recorded runs", clock.add_args, clock.main),
    ("spread", "how far k prompts' real eta strays from the task's", spread.add_args, spread.main),
)


def parser() -> ArgumentParser:
    ap = ArgumentParser(prog="python -m simulators", description=__doc__.splitlines()[0])
    groups = ap.add_subparsers(dest="group", required=True, metavar="{calibrate,check,trace,bench,write-options}")
    for group, jobs, what in (("calibrate", CALIBRATE, "write profiles"),
                              ("check", CHECK, "compare predictions with measurements")):
        sub = groups.add_parser(group, help=what).add_subparsers(dest="job", required=True,
                                                                 metavar="{" + ",".join(j[0] for j in jobs) + "}")
        for name, help_, add_args, run in jobs:
            p = sub.add_parser(name, help=help_, description=help_)
            add_args(p)
            p.set_defaults(run=run)
    for name, help_, add_args, run in (
            ("trace", "a real run's outputs as a replay trace (context-only strategies)", trace_outputs.add_args,
             trace_outputs.main),
            ("bench", "how fast the simulator itself runs", bench.add_args, bench.main),
            ("write-options", "conf/sim/default.yaml and the options table from SimConfig", write_options.add_args,
             write_options.main)):
        p = groups.add_parser(name, help=help_, description=help_)
        add_args(p)
        p.set_defaults(run=run)
    return ap


@cli
def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    return int(a.run(a) or 0)

