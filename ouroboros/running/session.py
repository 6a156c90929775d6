"""A session: a loaded backend pair (hf: transformers models; sim: the simulator), its prompt set, the model
context they share and what the clock measures (this machine, or the simulated hardware profile).

`open_session(run)` loads it through the run's backend kind (`run.kind.open_pair`, ouroboros/backends/base.py
`BackendKind`); the executor keeps one per (models, backend, hardware, dataset). Also the facts a record states
about where it was measured (`machine_info`, `versions`). Knows nothing of points, records or the command line.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ouroboros.backends.base import Backend, OpenPair
from ouroboros.config import RunConfig
from ouroboros.errors import OuroborosError
from ouroboros.prompts.datasets import Prompt, fit_context, load_prompts
from ouroboros.strategies import needs_stand_in


@dataclass
class Session:
    backend: str                     # its backend kind's name ("hf" | "sim")
    target: Backend
    draft: Backend | None
    eos_ids: tuple[int, ...]
    prompts: list[Prompt]
    hardware: dict[str, Any]         # what the clock measures: this machine (hf) or the profile (sim)
    tokenizer: Any = None            # decodes outputs into the record's `text` (None: ids only)
    margin: Callable[[list[int]], float] | None = None   # target's top-2 logit margin after a prefix (hf only)
    context: int = 0                 # the pair's model context (tokens): prompt + new tokens fit in it
    notes: list[str] = dataclasses.field(default_factory=list)   # `note:` lines the executor prints once


def pair_key(run: RunConfig) -> str:
    """What makes two runs share a loaded pair: model, backend settings, the groups its kind reads (simulated
    hardware and options), seed; a REST point on the kind's stand-in gets a pair of its own (the simulator's target
    may know the stand-in's text: simulators/stand_in.py)."""
    kind = run.kind
    groups = [getattr(run, g) for g in kind.config_groups] + (["rest stand-in"] if stand_in(run) else [])
    return json.dumps([run.model, dataclasses.asdict(run.backend), kind.name, groups or None, run.seed],
                      sort_keys=True, default=str)


def stand_in(run: RunConfig) -> bool:
    """A REST point with no datastore on a kind that has a stand-in (the simulator's): it retrieves from that
    (`BackendKind.stand_in_datastore`); the record keeps its params as given and says so in `decisions`."""
    return run.kind.stand_in and needs_stand_in(run.strategy.name, run.strategy.params)


def proposer_params(run: RunConfig) -> dict[str, Any]:
    """The strategy's params as its proposer gets them: the stand-in's file as a REST point's datastore, if it runs
    on the stand-in."""
    params = dict(run.strategy.params)
    if stand_in(run):
        params["datastore"] = run.kind.stand_in_datastore(run)
    return params


def load_backends(run: RunConfig) -> OpenPair:
    """(target, draft, tokenizer, eos_ids, ...) of the run's pair, as its backend kind opens it."""
    return run.kind.open_pair(run, stand_in=stand_in(run))


def session_prompts(run: RunConfig, pair: OpenPair) -> list[Prompt]:
    """The dataset's prompts; with the `synthetic` dataset, the kind's own prompts where it has them (the
    simulator's: random ids mean nothing to a surrogate LM; its prompts come from the surrogate's corpus)."""
    if pair.synthetic_prompts is not None and run.dataset.get("kind") == "synthetic":
        return pair.synthetic_prompts(int(run.dataset.get("num_prompts", 8)), run.seed)
    return load_prompts(run.dataset, pair.tokenizer, pair.target.vocab_size, run.seed)


def stock_models(sess: Session) -> tuple[Any, Any]:
    """The transformers models behind an hf session's backends (the peers call their `generate`)."""
    from ouroboros.backends.hf import HFBackend

    assert isinstance(sess.target, HFBackend) and (sess.draft is None or isinstance(sess.draft, HFBackend))
    return sess.target.model, (sess.draft.model if sess.draft is not None else None)


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": platform.machine(), "system": platform.system(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info["cpu"] = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        info["cpu"] = platform.processor() or None
    if "torch" in sys.modules:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def open_session(run: RunConfig) -> Session:
    pair = load_backends(run)
    target, draft = pair.target, pair.draft
    prompts = session_prompts(run, pair)
    context = min(b.max_context for b in (target, draft) if b is not None)
    prompts, skipped = fit_context(prompts, context, bool(run.dataset.get("skip_too_long")))
    if skipped:
        print(f"warning: skipped {len(skipped)} prompt(s) longer than the model context of {context} tokens: "
              f"{', '.join(skipped)}", file=sys.stderr)
    if not prompts:
        raise OuroborosError("the dataset gave no prompts")
    notes = pair.route(prompts) if pair.route is not None else []   # sim.by_category: a profile per category
    hardware = run.kind.hardware(run)   # a modelled clock's profile as simulated
    if hardware is None:                # the wall clock: this machine
        hardware = machine_info()
    return Session(run.kind.name, target, draft, pair.eos_ids, prompts, hardware, pair.tokenizer, pair.margin, context,
                   notes)


@functools.cache
def versions() -> dict[str, str | None]:
    import importlib.metadata as md

    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("ouroboros-bench", "torch", "transformers", "hydra-core", "omegaconf", "wandb"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    out["git"] = git_commit()
    return out


def git_commit() -> str | None:
    """The checkout's short commit, with "-dirty" when tracked files differ from it (the code that ran is then not
    that commit's); None outside a git checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        head = subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=5).stdout.strip()
        if not head:
            return None
        dirty = subprocess.run(["git", "-C", here, "diff", "--quiet", "HEAD", "--"], capture_output=True,
                               timeout=10).returncode == 1
    except (OSError, subprocess.SubprocessError):
        return None
    return head + "-dirty" if dirty else head


def effective_budgets(session: Session, budgets: list[int]) -> list[int]:
    """Each prompt's budget as decoding can spend it: at most what the context leaves after the prompt."""
    if not session.context:
        return budgets
    return [min(b, session.context - len(p.ids)) for p, b in zip(session.prompts, budgets, strict=True)]


def budgets(run: RunConfig, sess: Session) -> list[int]:
    """Each prompt's new-token budget: the prompt's own (a dataset may set one), else the run's."""
    return [p.max_new_tokens or run.max_new_tokens for p in sess.prompts]


def budget_note(sess: Session, budgets: list[int]) -> str | None:
    """A note when the model context leaves some prompt less room than its budget (decoding stops there)."""
    short = [(p, b, sess.context - len(p.ids)) for p, b in zip(sess.prompts, budgets, strict=True)
             if b > sess.context - len(p.ids)]
    if not short:
        return None
    room = min(r for _, _, r in short)
    return (f"max_new_tokens={max(b for _, b, _ in short)} does not fit the model context of {sess.context} tokens "
            f"for {len(short)} of {len(sess.prompts)} prompt(s): they stop when the context is full (as few as "
            f"{room} new tokens); the table shows the budgets in effect")
