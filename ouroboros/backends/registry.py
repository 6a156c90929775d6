"""The backend registry: each backend kind a run can name (`backend=hf|sim|auto`), as an object.

A kind is a `BackendKind` (ouroboros/backends/base.py): the core asks it for its checks, notes, defaults, its pair,
its record's facts and its batched-serving engine, and never branches on its name. hf is the core's own
(ouroboros/backends/hf.py `HF`); every other kind is a plugin an installed package declares as a Python entry point
in the group `ouroboros.backends` (the simulator's, in pyproject.toml: `sim = simulators.plugin:SIM`), loaded when
a run first asks for it. So nothing here loads torch (hf) or the simulator (sim) before a run uses it, and no module
of the core names a backend's modules (tests/test_imports.py).

Knows nothing of models, configs or strategies.
"""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from ouroboros.backends.base import BackendKind
from ouroboros.errors import OuroborosError

GROUP = "ouroboros.backends"   # the entry-point group plugins declare their kinds in
AUTO = "auto"                  # backend=auto: the plugin that claims the model, else hf


def core() -> BackendKind:
    """The core's own kind: real transformers models on the wall clock."""
    from ouroboros.backends.hf import HF

    return HF


@functools.cache
def _declared() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


@functools.cache
def _plugin(name: str) -> BackendKind:
    kind = _declared()[name].load()
    if not isinstance(kind, BackendKind) or kind.name != name:
        raise OuroborosError(f"backend plugin {name!r} ({_declared()[name].value}) is not a BackendKind named {name!r}")
    return kind


def plugins() -> list[BackendKind]:
    """The installed plugin kinds (loaded now), by name."""
    return [_plugin(n) for n in sorted(_declared())]


def names() -> list[str]:
    """What `backend=` takes."""
    return [core().name, *sorted(_declared()), AUTO]


def get(name: str, model: dict[str, Any] | None = None) -> BackendKind:
    """The kind `backend=<name>` runs on (`auto`: the plugin kind that claims `model`, else hf); an unknown name is
    one line naming the known ones."""
    if name == AUTO:
        return next((k for k in plugins() if k.claims(model or {})), None) or core()
    if name in _declared():
        return _plugin(name)
    if name == core().name:
        return core()
    hint = "" if _declared() else f" (no backend plugin is installed: `pip install -e .` declares them in {GROUP})"
    raise OuroborosError(f"unknown backend {name!r}; known: {', '.join(names())}{hint}")


def owner(model: dict[str, Any]) -> BackendKind | None:
    """The plugin kind whose model kinds include `model`'s (only that kind runs it), if any."""
    return next((k for k in plugins() if model.get("kind") in k.model_kinds), None)
