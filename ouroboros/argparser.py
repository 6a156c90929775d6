"""`ArgumentParser` for the argparse entry points wrapped by `@cli` (ouroboros.backends.base): a bad flag raises
OuroborosError, so it prints as one `error: <message>` line and exits 2, like every other bad input (argparse's
own error prints the usage block first). Also the two list flags of the measurement tools that load a real pair
outside Hydra (`simulators check clock`, `ouroboros.bench.forward`): `parse_runs` and `parse_kind`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, NoReturn

import yaml

from ouroboros.errors import OuroborosError


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise OuroborosError(f"{message} (see {self.prog} --help)")


@dataclass
class RunSpec:
    name: str                 # a registered strategy
    params: dict[str, Any]
    label: str                # the item as written


def _value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_runs(text: str) -> list[RunSpec]:
    """'vanilla,ouroboros:gamma=12,K=3,pld' -> [vanilla {}, ouroboros {gamma: 12, K: 3}, pld {}] (a comma item
    without ':' but with '=' is one more param of the item before it)."""
    out: list[RunSpec] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if ":" not in item and "=" in item:
            if not out:
                raise OuroborosError(f"run list starts with a parameter {item!r}; write name:key=value")
            k, v = item.split("=", 1)
            out[-1].params[k.strip()] = _value(v.strip())
            out[-1].label += f",{item}"
            continue
        name, _, rest = item.partition(":")
        params = {}
        if rest:
            if "=" not in rest:
                raise OuroborosError(f"expected name:key=value in the run list, got {item!r}")
            k, v = rest.split("=", 1)
            params[k.strip()] = _value(v.strip())
        out.append(RunSpec(name.strip(), params, item))
    return out


def parse_kind(items: list[str], what: str) -> dict[str, Any]:
    """['qwen-coder'] -> {kind: qwen-coder}; ['kind=hf', 'target=x'] -> {kind: hf, target: x}."""
    cfg: dict[str, Any] = {}
    for it in items:
        if "=" in it:
            k, v = it.split("=", 1)
            cfg[k] = _value(v)
        elif "kind" not in cfg:
            cfg["kind"] = it
        else:
            raise OuroborosError(f"--{what}: expected key=value after the kind, got {it!r}")
    if "kind" not in cfg:
        example = "qwen-coder" if what == "model" else "humaneval"
        raise OuroborosError(f"--{what} needs a kind (e.g. --{what} {example})")
    return cfg
