"""Calibration profiles: conf/sim/<pair>_<task>.yaml, one per (model pair, task), selected with `sim=<profile>` by
`ouroboros.run`, `sweep`, `tune` and `simulators check paper`; each pair's conf/model/<pair>.yaml names its own under
`sim_profiles:` (task -> profile). A profile is a partial `sim` config (Hydra's `defaults: [default, _self_]` fills
the rest, so `sim.<key>=v` still overrides any option) holding only what its fit set, `pair:` (the model it was fitted
for; make_pair refuses another) and `fit:` (its inputs: which published or measured figures, which command, commit).

Writers (`python -m simulators calibrate measured|decisions`):
- `simulators.lab.calibration.measured`: any pair's per-task fit from its measured vanilla token/s, SpS token/s and SpS
  block efficiency ONLY (the fit of `simulators check paper`; the Yi-34B/6B profiles are it on the paper's figures);
  the model YAML's `sim_profiles:` or the name <pair>_<task> makes a profile its task's default (simulators/trust.py);
- `simulators.lab.decisions.fit.fit_profile`: the surrogate's agreement knobs fitted to a real pair's recorded
  decisions.

Knows nothing of strategies or the loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ouroboros.errors import OuroborosError
from simulators.architectures import conf_file, conf_names, conf_root, load_conf
from simulators.simconfig import SimConfig, summary

# What each field a profile may set means (written as a comment beside it): its SimConfig doc's first clause.
FIELD_DOCS = {name: summary(name) for name in SimConfig.__dataclass_fields__}

PAPER_TASK_KEYS = {"HumanEval": "humaneval", "MBPP": "mbpp", "GSM8K": "gsm8k", "CNN/DM": "cnndm", "WMT16": "wmt16"}


def git_commit() -> str:
    """The commit a profile or band was measured at ("-dirty": with uncommitted changes to tracked files)."""
    from ouroboros.running.session import git_commit as commit

    return commit() or "unknown"


def profile_text(title: str, fields: dict[str, Any], fit: dict[str, Any]) -> str:
    """A profile file: a header, the defaults list, one documented line per field, then `fit:`."""
    lines = [f"# {title}", "# Written by `python -m simulators calibrate` (simulators/sim_profiles.py); select with",
             "# sim=<this file's name>. Unlisted options come from conf/sim/default.yaml.",
             "defaults:", "  - default", "  - _self_"]
    for k, v in fields.items():
        val = yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()
        lines.append(f"{k + ': ' + val:<33} # {FIELD_DOCS.get(k, '')}")
    lines.append(f"{'fit:':<33} # provenance: what this profile was fitted to (nothing else)")
    lines += ["  " + ln for ln in yaml.safe_dump(fit, sort_keys=False, width=110).splitlines()]
    return "\n".join(lines) + "\n"


def write_profile(name: str, title: str, fields: dict[str, Any], fit: dict[str, Any], out_dir: Path | None = None
                  ) -> Path:
    path = (out_dir or conf_root() / "sim") / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile_text(title, fields, fit), encoding="utf-8")
    return path


def load_profile(name: str) -> dict[str, Any]:
    """conf/sim/<name>.yaml as the sim options it sets (its defaults list dropped: sim_options fills the rest)."""
    d = load_conf("sim", name)
    d.pop("defaults", None)
    return d


def pair_profiles(model: str) -> dict[str, str]:
    """task -> profile name, from conf/model/<model>.yaml's `sim_profiles:` (empty if it has none)."""
    return dict(load_conf("model", model).get("sim_profiles") or {})


def check_profile_name(name: str) -> None:
    if conf_file("sim", name) is None:
        known = conf_names("sim")
        raise OuroborosError(f"unknown sim profile {name!r}; known: {', '.join(known)}")
