"""Calibration: the jobs that write profiles (`python -m simulators calibrate JOB`, simulators/lab/cli.py).

cost.py (clock: the hardware cost model fitted to timed forwards), proposers.py (the proposers' host time per step),
paper_fit.py (the fit to vanilla + SpS figures, shared with checks/paper.py), measured.py (measured / paper: sim
profiles from those figures), prior.py (the text prior), bands.py (the error bands). `calibrate decisions` is
lab/decisions/fit.py, `calibrate floor` lab/spread.py.
"""
