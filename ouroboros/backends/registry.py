"""The backend registry: each backend kind a run can name (`backend=hf|sim`) and where its parts live.

Parts are named as "module:attribute" and imported when first asked for: nothing here loads torch (hf) or the
simulator (sim) before a run uses it, and the simulator, which imports the core, never becomes an import of the
core. This is the one module of `ouroboros` that names the simulator's modules (tests/test_imports.py). A backend
says its kind (`Servable.kind` in ouroboros/contracts.py); `engine(kind)` is the batched-serving engine class its
kind runs under load (ouroboros/serving/scheduler.py `Engine`, built with `for_backend(backend, prefill)`);
`part(kind, name)` is one of the kind's other parts (the simulated pair's loader and its load-time checks, its
decisions block and notes, its default calibration profile, its memory check, the stand-in datastore it gives a
REST run that names none), for the modules that check a config, load a session or build a record.

Knows nothing of models, configs or strategies.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from ouroboros.contracts import OuroborosError


@dataclass(frozen=True)
class BackendKind:
    name: str
    engine: str       # "module:Class" of its batched-serving engine
    parts: dict[str, str] = field(default_factory=dict)   # part name -> "module:attr"


BACKENDS: dict[str, BackendKind] = {
    "hf": BackendKind("hf", "ouroboros.backends.hf:HFEngine"),
    "sim": BackendKind("sim", "simulators.serving:SimEngine", {
        "pair": "simulators:make_pair",                          # (model, hardware, sim, seed, rest_stand_in) -> pair
        "decisions": "simulators.trust:record_decisions",        # (sim, strategy, dataset, hardware, prompts, budget)
        "serving_fit": "simulators.pair:check_serving_fit",      # a served point's weights + KV caches fit
        "setup": "simulators.pair:pair_setup",                   # (model, hardware, sim): load-time checks, no tokens
        "source_check": "simulators.pair:check_source",          # (sim, strategy): the token source decides it
        "default_profile": "simulators.trust:with_default_profile",   # the dataset task's calibration profile
        "notes": "simulators.trust:source_notes",                # its `note:` lines on decisions (…, hardware, budget)
        "rest_stand_in": "simulators.stand_in:rest_stand_in",    # (sim, model) -> REST's datastore if a run has none
    }),
}


def backend_kind(name: str) -> BackendKind:
    if name not in BACKENDS:
        raise OuroborosError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    return BACKENDS[name]


def resolve(ref: str) -> Any:
    """'package.module:attr' -> the attribute (its module imported now)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def engine(kind: str) -> Any:
    """The batched-serving engine class of a backend kind."""
    return resolve(backend_kind(kind).engine)


def part(kind: str, name: str) -> Any:
    """A named part of a backend kind (`BackendKind.parts`)."""
    ref = backend_kind(kind).parts.get(name)
    if ref is None:
        raise OuroborosError(f"backend {kind!r} has no {name!r}")
    return resolve(ref)
