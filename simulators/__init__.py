"""The simulator: a second backend (`sim`) behind the same Backend protocol, whose clock is a cost model and whose
token decisions come from surrogate LMs, a replayed trace or a real proxy pair.

    from simulators import make_pair
    pair = make_pair(model_cfg, hardware_cfg, sim_cfg, seed=0)   # plain dicts of the Hydra groups
    pair.target, pair.draft, pair.tokenizer, pair.eos_ids, pair.default_prompts(10, seed=0)

Tree: hardware.py (machine profiles), architectures.py (model architectures), cost_model.py (t(k, ctx), memory
check), surrogate.py (surrogate LMs), corpus.py (their text), tokens.py (every tokenizer), backend.py (SimClock,
SimBackend, ProxyBackend), pair.py (make_pair), replay.py (trace record / replay), sim_profiles.py (calibration
profiles), plugin.py (`SIM`: the `sim` backend kind the core reaches through the `ouroboros.backends` entry point,
and nothing else of this package). The lab (lab/: calibration, checks, decision statistics, bench, write-options,
run by `python -m simulators ...`) is apart: no module here imports it.
"""

from simulators.architectures import ModelProfile, PairProfile
from simulators.backend import ProxyBackend, SimBackend, SimClock
from simulators.cost_model import CostModel, check_fits, from_spec, scaled_to
from simulators.hardware import Hardware
from simulators.pair import SIM_DEFAULTS, SimPair, make_pair

__all__ = ["SIM_DEFAULTS", "CostModel", "Hardware", "ModelProfile", "PairProfile", "ProxyBackend", "SimBackend",
           "SimClock", "SimPair", "check_fits", "from_spec", "make_pair", "scaled_to"]
