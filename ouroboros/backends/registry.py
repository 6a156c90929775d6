"""The backend registry: each backend kind a run can name (`backend=hf|sim`) and where its parts live.

Parts are named as "module:attribute" and imported when first asked for: nothing here loads torch (hf) or the
simulator (sim) before a run uses it, and the simulator, which imports the core, never becomes an import of the
core. This is the one module of `ouroboros` that names the simulator's modules (tests/test_imports.py). A backend
says its kind (`Servable.kind` in ouroboros/contracts.py); `engine(kind)` is the batched-serving engine class its
kind runs under load (ouroboros/serving/scheduler.py `Engine`, built with `for_backend(backend, prefill)`).

Knows nothing of models, configs or strategies.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ouroboros.contracts import OuroborosError


@dataclass(frozen=True)
class BackendKind:
    name: str
    engine: str       # "module:Class" of its batched-serving engine


BACKENDS: dict[str, BackendKind] = {
    "hf": BackendKind("hf", "ouroboros.backends.hf:HFEngine"),
    "sim": BackendKind("sim", "simulators.serving:SimEngine"),
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
