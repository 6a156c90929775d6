"""Checks: the jobs that compare the simulator's predictions with measurements (`python -m simulators check JOB`).

paper.py (paper, sensitivity, copy-rate, closed-form: published figures and closed forms), clock.py (real vs
modelled time of recorded runs). `check decisions` is lab/decisions/check.py, `check spread` lab/spread.py. They
write no profile.
"""
