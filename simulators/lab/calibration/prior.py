"""`python -m simulators calibrate prior`: the surrogate target's text prior, fitted to several tasks' recordings.

The target's text knobs alone (`fit_prior`), shared by several tasks' recorded runs and fitted on all of them at once
(each task with its own profile's draft agreement); conf/sim/default.yaml holds the result, for every pair with no
recordings of its own. `--holdout TASK` checks how it transfers to a task it was not fitted on. Prints the knobs;
writes nothing. Knows nothing of real models (the real side is traces).
"""

from __future__ import annotations

import os
from typing import Any

from ouroboros.errors import OuroborosError
from ouroboros.paths import default_cache_dir
from simulators.lab.decisions.fit import FIT_GRID, coordinate_search, fit_error, fit_real_stats, task_corpus
from simulators.lab.decisions.stats import SIM_SEEDS, RealRun, compare, id_mapper, load_real, score

# The text prior (`fit_prior`): the surrogate TARGET's knobs that describe how a real LM's greedy text behaves
# (copying, runner-up choices, locality), shared by every task, for the pairs no real run was recorded for (their
# draft agreement is a profile's own fit). pieces stays bpe (words carry their leading space, as in real tokenizers:
# their characters per token, docs/simulator-fidelity.md); the corpus follows the task's kind. surprise_copy stays
# off (1.0): on, the surrogate predicts at every step to know whether a token surprised it, which made simulations
# 2.1x slower (the 27-point grid 87.5 s against its 60 s target), and the fit without it reached the same error
# (2.394 against 2.396 with surprise_copy 0.75 searched; docs/simulator-fidelity.md). forgive stays off too:
# searched from the prior it stays at 0, and on it makes simulations about 3x slower. recall is off:
# it needs the text a REST run's target knows (sim.recall_text), which a pair without recordings does not have.
PRIOR_KNOBS = ("induction", "induction_decay", "p_copy", "p_top", "pos_grain", "choice_ctx", "local_frac",
               "local_ctx", "local_novel", "vocab")
PRIOR_START = {"induction": 0.0, "induction_decay": 1.0, "surprise_copy": 1.0, "p_copy": 0.0, "p_top": 0.75,
               "pos_grain": 1, "choice_ctx": 0, "local_frac": 0.0, "local_ctx": 1, "local_novel": False,
               "vocab": 4096, "pieces": "bpe"}
def fit_prior(tasks: dict[str, tuple[dict[str, RealRun], dict[str, Any]]], mapper, out=print, rounds: int = 2,
              seeds: int = SIM_SEEDS, jobs: int = 1, start: dict[str, Any] | None = None) -> dict[str, Any]:
    """Coordinate search of the PRIOR_KNOBS shared by all `tasks` (task -> (its recorded runs, its own options: the
    draft's agreement and the corpus)), minimising the sum of their `fit_error`s on their fit prompts. Returns
    the prior's knobs (PRIOR_KNOBS and pieces)."""
    fit_real = {t: fit_real_stats(real) for t, (real, _) in tasks.items()}

    def error(o: dict[str, Any]) -> float:
        return sum(fit_error(real, fit_real[t], {**base, **o}, mapper, seeds) for t, (real, base) in tasks.items())

    grids = {k: g for k, g in FIT_GRID if k in PRIOR_KNOBS}
    return coordinate_search({**PRIOR_START, **(start or {})}, grids, error, out, rounds, 0, jobs)


def add_args(ap) -> None:
    ap.add_argument("--model", default="qwen_coder", help="the real pair (conf/model/<name>.yaml)")
    ap.add_argument("--tasks", default="humaneval,gsm8k,mtbench",
                    help="tasks whose recorded runs the prior is fitted on (each with its profile's draft agreement)")
    ap.add_argument("--root", default=None, help="where the recordings are (default <cache>/decisions; one "
                                                 "<model>-<task>-<max new tokens> folder per task)")
    ap.add_argument("--max-new-tokens", type=int, default=64, help="the recorded budget")
    ap.add_argument("--holdout", default=None, help="one of --tasks left out of the fit: its held-out prompts are "
                                                    "then scored under the prior and under the current defaults")
    ap.add_argument("--tokenizer", default=None, help="the pair's tokenizer directory (default: the fetched one)")
    ap.add_argument("--rounds", type=int, default=2, help="passes of the coordinate search (>= 1)")
    ap.add_argument("--jobs", type=int, default=1, help="processes evaluating a knob's grid values at once (>= 1)")


def main(a, out=print) -> dict[str, Any]:
    """The text prior (`fit_prior`) on the tasks' recorded runs; prints the
    knobs for conf/sim/default.yaml (and simulators.pair.SIM_DEFAULTS), and each task's fit-prompt error under the
    prior and under the current defaults; with --holdout, the left-out task's held-out score under both."""
    from simulators.pair import SIM_DEFAULTS
    from simulators.sim_profiles import load_profile, pair_profiles

    if a.rounds < 1:
        raise OuroborosError(f"--rounds must be >= 1, got {a.rounds}")
    if a.jobs < 1:
        raise OuroborosError(f"--jobs must be >= 1, got {a.jobs}")
    tasks = [t for t in a.tasks.split(",") if t]
    own = pair_profiles(a.model)
    missing = [t for t in tasks if t not in own]
    if missing or not tasks:
        raise OuroborosError(f"--tasks: {a.model} has no decision profile for {', '.join(missing) or 'no task'} "
                             f"(its profiles: {', '.join(f'{k}={v}' for k, v in own.items()) or 'none'})")
    if a.holdout is not None and (a.holdout not in tasks or len(tasks) < 2):
        raise OuroborosError(f"--holdout must be one of --tasks ({', '.join(tasks)}) with another left to fit on, "
                             f"got {a.holdout!r}")
    root = a.root or str(default_cache_dir() / "decisions")
    dirs = {t: os.path.join(root, f"{a.model}-{t}-{a.max_new_tokens}") for t in tasks}
    for t, d in dirs.items():
        if not os.path.isdir(d):
            raise OuroborosError(f"no recorded runs of {t} in {d} (record them with "
                                 "`python -m simulators check clock`: docs/simulator-fidelity.md)")
    mapper = id_mapper(a.model, a.tokenizer)
    data: dict[str, tuple[dict[str, RealRun], dict[str, Any]]] = {}
    for t in tasks:
        prof = load_profile(own[t])
        base = {k: v for k, v in prof.items() if k not in (*PRIOR_START, "fit")}
        data[t] = (load_real(dirs[t], a.model), {**base, "corpus": task_corpus(t)})
    fit_on = {t: v for t, v in data.items() if t != a.holdout}
    out(f"text prior: fitting {', '.join(PRIOR_KNOBS)} on the fit prompts of {', '.join(fit_on)} ({a.model}; each "
        "task with its own profile's draft agreement and its kind's corpus)")
    prior = fit_prior(fit_on, mapper, out, a.rounds, jobs=a.jobs)
    knobs = {k: prior[k] for k in PRIOR_START}
    defaults = {k: SIM_DEFAULTS[k] for k in knobs}
    out("prior (conf/sim/default.yaml, simulators.pair.SIM_DEFAULTS): "
        + ", ".join(f"{k}: {v}" for k, v in knobs.items()))
    result: dict[str, Any] = {"prior": knobs, "tasks": {}}
    for t, (real, base) in data.items():
        fr = fit_real_stats(real)
        e_prior, e_def = (fit_error(real, fr, {**base, **k}, mapper, SIM_SEEDS) for k in (knobs, defaults))
        line = f"{t}: fit-prompt error {e_prior:.3f} under the prior, {e_def:.3f} under the current defaults"
        row: dict[str, Any] = {"error_prior": e_prior, "error_defaults": e_def}
        if t == a.holdout:
            sc = [score(compare(real, {**base, **k}, mapper, "eval")) for k in (knobs, defaults)]
            line += (f"; held-out task, held-out prompts within target: {sc[0]['ok']}/{sc[0]['all']} under the prior, "
                     f"{sc[1]['ok']}/{sc[1]['all']} under the current defaults")
            row.update(score_prior=sc[0]["ok"], score_defaults=sc[1]["ok"], cells=sc[0]["all"])
        out(line)
        result["tasks"][t] = row
    return result
