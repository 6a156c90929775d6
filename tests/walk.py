"""The walk of one run: the core modules a run's config passes through, in order (issue 61 #3).

How it counts. The entry point runs in this process (tests/cli_helper.run_module) under `sys.setprofile`. A call of
a function defined in an `ouroboros` module is a step when it is handed the run's config: an argument (`self`
included) that is the composed DictConfig, the RunConfig or one of the groups config.py declares (CONFIGS), or
whose attributes hold one (a Point, the executor). A function is a step once, where the run first reaches it (called
again it is the same step: `Point.id` for every record). The config classes' own methods (`RunConfig.kind`) only
read it and are not steps. Consecutive steps in one module are one stay; a module's entries are its stays.
Outside the core's walk: the backend kinds behind the boundary (`ouroboros.backends`, the simulator) and the peers'
vLLM client; a call into them does not end a stay (`boundary` lists those calls). Run it to see a walk:

    python tests/walk.py [-v] [ouroboros.run | ouroboros.tune] model=llama70b_7b dataset.num_prompts=1
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_helper import run_module  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from ouroboros.config import RunConfig  # noqa: E402

# the run's config: the Hydra-composed DictConfig, the validated RunConfig and the groups ouroboros.config declares
# (StrategyConfig, BackendConfig, SweepConfig ...). Value types that lower modules own and the config merely holds
# (SamplingConfig, the sampling rule's parameters, defined beside the rule) are values handed down, as a strategy's
# params dict is.
_parts = [getattr(RunConfig(), f.name) for f in fields(RunConfig)]
CONFIGS: tuple[type, ...] = (
    DictConfig, RunConfig, *{type(v) for v in _parts if is_dataclass(v) and type(v).__module__ == RunConfig.__module__})


def _holds_config(v: object) -> bool:
    if isinstance(v, CONFIGS):
        return True
    attrs = getattr(v, "__dict__", None)
    return isinstance(attrs, dict) and any(isinstance(a, CONFIGS) for a in attrs.values())


@dataclass
class Walk:
    stays: list[str]      # module of each stay, in order
    steps: list[str]      # every step: module.function
    boundary: list[str]   # steps across the backend boundary (the backend kinds' side, in order)
    code: int             # the entry point's exit code
    err: str

    def entries(self) -> Counter:
        return Counter(self.stays)


def walk(module: str, *args: str, tmp: Path | None = None) -> Walk:
    stays: list[str] = []
    steps: list[str] = []
    boundary: list[str] = []

    def hook(frame, event, _arg):
        if event != "call":
            return
        name = frame.f_globals.get("__name__", "")
        if name == "__main__":
            name = module                            # the entry point itself, run as __main__
        if not name.startswith(("ouroboros.", "simulators")) or name.startswith("ouroboros.vllm"):
            return
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount
        loc = frame.f_locals
        names = code.co_varnames[:n]
        if names and names[0] == "self" and isinstance(loc.get("self"), CONFIGS):
            return                                   # the config's own accessors read it; they go nowhere
        if any(_holds_config(loc.get(a)) for a in names):
            step = f"{name}.{code.co_qualname}"
            if step in steps or step in boundary:
                return                               # a function already walked through: the same step again
            if name.startswith(("ouroboros.backends", "simulators")):
                boundary.append(step)
                return
            steps.append(step)
            if not stays or stays[-1] != name:
                stays.append(name)

    sys.setprofile(hook)
    try:
        res = run_module(module, *args, tmp=tmp)
    finally:
        sys.setprofile(None)
    return Walk(stays, steps, boundary, res.code, res.err)


if __name__ == "__main__":
    import tempfile

    argv = [a for a in sys.argv[1:] if a != "-v"]
    entry = argv.pop(0) if argv and argv[0].startswith("ouroboros.") else "ouroboros.sweep"
    with tempfile.TemporaryDirectory() as d:
        w = walk(entry, *argv, f"out={d}/r.jsonl", tmp=Path(d))
    if "-v" in sys.argv:
        print("\n".join(w.steps))
        print("boundary:", ", ".join(w.boundary))
    print(" -> ".join(s.removeprefix("ouroboros.") for s in w.stays))
    print(f"exit {w.code}; {len(w.stays)} stays in {len(w.entries())} modules; entered more than twice: "
          + (", ".join(f"{m} {k}" for m, k in w.entries().most_common() if k > 2) or "none")
          + (f"\n{w.err.strip().splitlines()[-1]}" if w.code else ""))
