"""Checks: the jobs that compare the simulator's predictions with measurements (`python -m simulators check JOB`).

paper.py (paper, sensitivity, copy-rate, closed-form: published figures and closed forms), decisions.py (real vs
simulated decision statistics on held-out prompts), clock.py (real vs modelled time of recorded runs), spread.py
(how far a few prompts' real eta strays from the task's: the floor under every check). They write no profile.
"""
