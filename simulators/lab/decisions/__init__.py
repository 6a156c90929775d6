"""One topic: a real pair's recorded decisions against the simulator's. stats.py (the statistics, shared),
fit.py (`python -m simulators calibrate decisions`: a sim profile fitted to them), check.py (`python -m simulators
check decisions`: real vs simulated on held-out prompts).
"""
