"""Calibration profiles: conf/sim/<pair>_<task>.yaml, one per (model pair, task), selected with `sim=<profile>` by
`ouroboros.run`, `sweep`, `tune` and `simulators.validate`; each pair's conf/model/<pair>.yaml names its own under
`sim_profiles:` (task -> profile). A profile is a partial `sim` config (Hydra's `defaults: [default, _self_]` fills
the rest, so `sim.<key>=v` still overrides any option) holding only what its fit set, `pair:` (the model it was fitted
for; make_pair refuses another) and `fit:` (its inputs: which published or measured figures, which command, commit).

Writers (`python -m simulators.calibrate measured|decisions`):
- `simulators.measured`: any pair's per-task fit from its measured vanilla token/s, SpS token/s and SpS block
  efficiency ONLY (the fit of `simulators.validate paper`; the Yi-34B/6B profiles are it on the paper's figures);
  the model YAML's `sim_profiles:` or the name <pair>_<task> makes a profile its task's default (simulators/trust.py);
- `simulators.decisions.fit_profile`: the surrogate's agreement knobs fitted to a real pair's recorded decisions.

Knows nothing of strategies or the loop.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from ouroboros.backends.base import OuroborosError
from simulators.profiles import conf_root, load_conf

# What each field a profile may set means (written as a comment beside it).
FIELD_DOCS = {
    "corpus": "surrogate corpus standing in for the task's text (code | pycode | prose)",
    "alpha_easy": "surrogate draft agreement in easy stretches (fitted)",
    "alpha_hard": "... in hard stretches (fitted; paper profiles tie it to alpha_easy^4)",
    "hard_frac": "fraction of positions in hard stretches",
    "burst_len": "length of an easy / hard stretch (tokens)",
    "p_shift": "share of mismatches that are 'one token too early' (else the runner-up)",
    "p_copy": "how often the surrogate target copies what followed its last two tokens earlier",
    "vocab": "surrogate vocabulary (pieces of the corpus)",
    "pieces": "surrogate tokenizer: words (spaces apart) | bpe (words carry their leading space) | real (the pair's)",
    "induction": "match-length copying: P(copy | the last token alone matched earlier) (0: off)",
    "induction_decay": "... P(copy | L tokens matched) = 1 - (1 - induction) * induction_decay^(L - 1)",
    "surprise_copy": "... scaled by 1 - (1 - surprise_copy) / 2^k, k steps after a token the target would not write",
    "alpha_copy": "draft agreement where the target copies by induction (null: the stretches' agreement)",
    "p_top": "how often the surrogate target takes its n-gram table's top continuation",
    "pos_grain": "the target's varied choices hash the position in blocks of this many tokens",
    "choice_ctx": "... and the last this many tokens (0: all 8 of the tail)",
    "local_frac": "share of contexts whose next token their last local_ctx tokens alone decide",
    "local_ctx": "... that many last tokens (1..order)",
    "local_novel": "... only where those tokens did not occur earlier in the window (phrases, no loops)",
    "forgive": "P(the target reads a token it would not have written as its own and goes on as it would have)",
    "forgive_run": "... only after at least this many tokens it would have written itself",
    "recall": "P(right after a token it would not have written, the target goes on with text it knows: recall_text)",
    "recall_min": "... where its last this many tokens occur in that text",
    "recall_text": "the text it knows: a REST datastore (.npz) in the simulator's ids (validate decisions: REST's own)",
    "target_overhead_s": "target's per-forward overhead (s), replacing the hardware's estimate (fitted)",
    "draft_overhead_s": "draft's per-forward overhead (s), replacing the hardware's estimate (fitted)",
    "dtype": "weights' dtype for the cost model",
    "prompt_tokens": "how real prompts get their token counts (simulators/tokens.py)",
    "chars_per_token": "characters per token of the pair's tokenizer on the task's text (measured)",
    "pair": "the conf/model pair this profile was fitted for (make_pair refuses another)",
    "profile": "this profile's name: records and tables name it as their decisions' source",
}

PAPER_TASK_KEYS = {"HumanEval": "humaneval", "MBPP": "mbpp", "GSM8K": "gsm8k", "CNN/DM": "cnndm", "WMT16": "wmt16"}


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def profile_text(title: str, fields: dict[str, Any], fit: dict[str, Any]) -> str:
    """A profile file: a header, the defaults list, one documented line per field, then `fit:`."""
    lines = [f"# {title}", "# Written by `python -m simulators.calibrate` (simulators/sim_profiles.py); select with",
             "# sim=<this file's name>. Unlisted options come from conf/sim/default.yaml.",
             "defaults:", "  - default", "  - _self_"]
    for k, v in fields.items():
        val = yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()
        lines.append(f"{k + ': ' + val:<34}# {FIELD_DOCS.get(k, '')}")
    lines.append(f"{'fit:':<34}# provenance: what this profile was fitted to (nothing else)")
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
    if not (conf_root() / "sim" / f"{name}.yaml").is_file():
        known = sorted(p.stem for p in (conf_root() / "sim").glob("*.yaml"))
        raise OuroborosError(f"unknown sim profile {name!r}; known: {', '.join(known)}")
