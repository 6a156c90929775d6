"""A session: a loaded backend pair (hf: transformers models; sim: the simulator), its prompt set, the model
context they share and what the clock measures (this machine, or the simulated hardware profile).

`open_session(run)` loads it; the executor keeps one per (models, backend, hardware, dataset). Also the facts a
record states about where it was measured (`machine_info`, `versions`). Knows nothing of points, records or the
command line.
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

from ouroboros.backends import registry
from ouroboros.backends.base import Backend, OuroborosError
from ouroboros.config import RunConfig
from ouroboros.datasets import Prompt, fit_context, load_prompts
from ouroboros.strategies import needs_stand_in


@dataclass
class Session:
    backend: str                     # "hf" | "sim"
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
    """What makes two runs share a loaded pair: model, backend settings, simulated hardware, seed; a simulated REST
    point on the stand-in gets a pair of its own (its target may know the stand-in's text: simulators/stand_in.py)."""
    sim = [run.hardware, run.sim] + (["rest stand-in"] if stand_in(run) else []) if run.backend_kind == "sim" else None
    return json.dumps([run.model, dataclasses.asdict(run.backend), run.backend_kind, sim, run.seed], sort_keys=True,
                      default=str)


def stand_in(run: RunConfig) -> bool:
    """A simulated REST point with no datastore: it retrieves from the simulator's stand-in (registry part
    `rest_stand_in`); the record keeps its params as given and says so in `decisions`."""
    return run.backend_kind == "sim" and needs_stand_in(run.strategy.name, run.strategy.params)


def proposer_params(run: RunConfig) -> dict[str, Any]:
    """The strategy's params as its proposer gets them: the stand-in's file as a REST point's datastore, if it runs
    on the stand-in."""
    params = dict(run.strategy.params)
    if stand_in(run):
        params["datastore"] = registry.part("sim", "rest_stand_in")(run.sim, run.model).path
    return params


def load_backends(run: RunConfig) -> tuple[Backend, Backend | None, Any, tuple[int, ...], Any]:
    """(target, draft, tokenizer, eos_ids, sim pair or None) for the run's backend."""
    if run.backend_kind == "sim":
        pair = registry.part("sim", "pair")(run.model, run.hardware or {}, run.sim, seed=run.seed,
                                            rest_stand_in=stand_in(run))
        return pair.target, pair.draft, pair.tokenizer, tuple(pair.eos_ids), pair
    import torch

    from ouroboros.backends.hf import HFBackend
    from ouroboros.models import load_pair

    if run.backend.threads:
        torch.set_num_threads(run.backend.threads)
    if run.model.get("kind") != "tiny" and run.logger.console:   # real weights: converting and loading take minutes
        what = run.model["target"] if isinstance(run.model.get("target"), str) else run.model.get("kind")
        print(f"loading {what} ({run.backend.dtype} on {run.backend.device}) ...", file=sys.stderr, flush=True)
    loaded = load_pair(run.model, dtype=run.backend.dtype, device=run.backend.device)
    target = HFBackend(loaded.target, name="target")
    draft = HFBackend(loaded.draft, name="draft") if loaded.draft is not None else None
    return target, draft, loaded.tokenizer, tuple(loaded.eos_ids), None


def session_prompts(run: RunConfig, tokenizer: Any, vocab_size: int, sim_pair: Any) -> list[Prompt]:
    """The dataset's prompts; on sim with the `synthetic` dataset, the simulator's embedded prompts instead
    (random ids mean nothing to a surrogate LM; its prompts come from the surrogate's corpus)."""
    if sim_pair is not None and run.dataset.get("kind") == "synthetic":
        return sim_pair.default_prompts(int(run.dataset.get("num_prompts", 8)), run.seed)
    return load_prompts(run.dataset, tokenizer, vocab_size, run.seed)


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
    target, draft, tokenizer, eos_ids, sim_pair = load_backends(run)
    prompts = session_prompts(run, tokenizer, target.vocab_size, sim_pair)
    context = min(b.max_context for b in (target, draft) if b is not None)
    prompts, skipped = fit_context(prompts, context, bool(run.dataset.get("skip_too_long")))
    if skipped:
        print(f"warning: skipped {len(skipped)} prompt(s) longer than the model context of {context} tokens: "
              f"{', '.join(skipped)}", file=sys.stderr)
    if not prompts:
        raise OuroborosError("the dataset gave no prompts")
    notes = []
    if sim_pair is not None and sim_pair.by_category:   # sim.by_category: each category's profile decides its prompts
        counts = sim_pair.route(prompts)
        rest = len(prompts) - sum(counts.values())
        notes.append("decisions per prompt category: " + ", ".join(f"{n} decides {k}" for n, k in sorted(
            counts.items())) + f", {run.sim.get('profile') or 'the run options'} {rest} (sim.by_category)")
    if run.backend_kind == "sim":   # the profile as simulated: sim.placement / sim.devices override its own
        hardware = {**(run.hardware or {}), **{k: run.sim[k] for k in ("placement", "devices") if run.sim.get(k)}}
    else:
        hardware = machine_info()
    margin = None
    if run.backend_kind == "hf":
        from ouroboros.backends.hf import HFBackend

        assert isinstance(target, HFBackend)
        margin = target.top2_margin
    return Session(run.backend_kind, target, draft, eos_ids, prompts, hardware, tokenizer, margin, context, notes)


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

