"""The simulator's lab: the calibration and checking tooling behind `python -m simulators ...` (cli.py), apart from
the runtime simulator (simulators/*.py), which imports nothing from here.

calibration/ (jobs that write profiles: cost, proposers, measured/paper, prior, bands, and paper_fit, the fit they
share with checks/paper.py), checks/ (jobs that compare predictions with measurements: paper, clock), decisions/
(one topic: stats.py, the real vs simulated decision statistics; fit.py, `calibrate decisions`; check.py, `check
decisions`), spread.py (`check spread` and `calibrate floor`: how far a few prompts stray from their task's),
copyrate.py, closed_form.py, figures.py (published figures), trace_outputs.py, bench.py, write_options.py.
"""
