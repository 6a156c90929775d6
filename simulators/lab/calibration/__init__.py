"""Calibration: the jobs that write profiles (`python -m simulators calibrate JOB`, simulators/__main__.py).

cost.py (clock: the hardware cost model fitted to timed forwards), paper_fit.py (the fit to vanilla + SpS figures,
shared with checks/paper.py), measured.py (measured / paper: sim profiles from those figures), decisions.py (a sim
profile fitted to recorded real decisions), prior.py (the text prior), bands.py (the error bands).
"""
