"""Structured configs: one dataclass per component, the root schema registered with Hydra's ConfigStore, and
`validate()`, which turns a composed config into a checked, plain `RunConfig` before any model loads.

Components (Hydra groups under conf/):
- model     a pair spec; its fields depend on its `kind` (tiny, hf, gguf, sim profiles, ...): a free-form dict
            whose keys Hydra still guards (a typo'd field is "not in struct").
- strategy  `StrategyConfig(name, params)`; params are checked against the strategy's own dataclass in the
            registry (ouroboros.strategies), whose __post_init__ rejects impossible values in one line.
- dataset   a prompt-set spec (free-form per `kind`, like model).
- backend   `BackendConfig`: hf (real models, wall clock) or sim (simulator, modelled clock); auto picks sim
            for simulated model profiles and hf otherwise.
- hardware  the profile the simulator charges time for (free-form, owned by simulators/); unused by hf.
- sim       simulator options (token source, surrogate knobs, placement; owned by simulators/).
- logger    `LoggerConfig`: console progress, per-step records, the wandb mirror.
- sweep     `SweepConfig`: a grid (Hydra sweep overrides, as after -m) and/or explicit points (the ablation).

Entry points (run, sweep, tune) are the only modules that see a DictConfig; they call `validate` and hand
library code plain dataclasses and dicts. This module knows nothing of models, decoding or sinks.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from ouroboros.backends import registry
from ouroboros.backends.base import BackendKind
from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from ouroboros.loop.sampling import SamplingConfig
from ouroboros.paths import check_writable
from ouroboros.prompts.datasets import load_records
from ouroboros.serving.load import check_load_aware, check_prefill, check_rate, check_shared_pool
from ouroboros.strategies import (
    NeedsDatastore,
    check_files,
    get_spec,
    is_peer,
    needs_stand_in,
)

# conf/config.yaml puts runs/conf (your own presets, e.g. the tuner's) on Hydra's search path; where you run without
# one, Hydra's "path=runs/conf is not available" warning says nothing you need to act on
warnings.filterwarnings("ignore", message=r"provider=hydra\.searchpath in main, path=runs/conf is not available")

CONF_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
_NOISE = ("full_key:", "object_type=", "reference_type=", "Set the environment variable HYDRA_FULL_ERROR",
          "Config search path")   # dropped from one_line, with the indented lines under them
WANDB_MODES = ("offline", "online", "disabled")


@dataclass
class StrategyConfig:
    name: str = MISSING                                  # registry name
    params: dict[str, Any] = field(default_factory=dict)  # fields of the strategy's config dataclass


@dataclass
class BackendConfig:
    kind: str = "auto"          # hf | sim | auto (sim for simulated model profiles, hf otherwise)
    dtype: str = "float32"      # hf: weights / activations dtype
    device: str = "cpu"         # hf: cpu | cuda | cuda:N | auto (accelerate device_map across GPUs)
    threads: int = 0            # hf: torch intra-op threads; 0 = torch's default


@dataclass
class WandbConfig:
    mode: str = "offline"       # offline (no network, no account) | online | disabled (tests)
    project: str = "ouroboros"
    entity: str | None = None
    dir: str = "runs"           # runs land in <dir>/wandb/offline-run-*
    tags: list[str] = field(default_factory=list)


@dataclass
class LoggerConfig:
    console: bool = True        # one summary line per point (and the progress bars, when `progress`)
    progress: bool = True       # progress bars over points and prompts, drawn only when stderr is a terminal
    step_records: bool = False  # per-step records (StepRecord) inside each JSONL record
    wandb: WandbConfig = field(default_factory=WandbConfig)


@dataclass
class SweepPoint:
    label: str = ""                                       # display name (defaults to the overrides)
    overrides: list[str] = field(default_factory=list)    # Hydra overrides, e.g. ["strategy=ouroboros"]


@dataclass
class SweepConfig:
    name: str = "single"
    grid: list[str] = field(default_factory=list)   # Hydra sweep overrides ("key=a,b,c"): cartesian product
    points: list[SweepPoint] = field(default_factory=list)    # explicit points, crossed with the grid
    base: list[str] = field(default_factory=list)  # overrides every point starts from (a typed key wins)
    resume: bool = True         # skip points already in the record file (measured by the same code)
    resume_any_code: bool = False   # ... whatever code measured them (ouroboros.running.store)


@dataclass
class ServeConfig:
    """Serving under load (ouroboros/serving/batch.py). concurrency 0: the paper's setting, one prompt at a time, each
    alone. concurrency C >= 1: continuous batching, up to C requests decode at once, one batched forward per model
    per step; a new request starts when one finishes (closed loop) or, with `rate`, at Poisson arrival times
    (open loop, backend=sim only)."""

    concurrency: int = 0
    rate: float | None = None     # open loop: requests per second (simulated clock)
    requests: int = 0             # requests served, cycling through the prompts (0: one per prompt)
    load_aware: bool = False      # cap each step's draft depth by expected tokens per batched second (sim only)
    max_draft: int = 16           # the deepest draft load-aware may choose
    shared_pool: bool = False     # Ouroboros: one phrase pool for all concurrent requests (history at serving scale)
    prefill: str | None = None    # batched: a joining prompt rides in the next batched forward (chunked prefill,
    #                               as serving engines do; sim only) | separate: its own forward | null: batched on
    #                               sim, separate on hf (where it is the only mode)
    seed: int = 0                 # arrival times


@dataclass
class TuneConfig:
    """`python -m ouroboros.tune`: the paper's heuristic (Algorithm 1): one parameter at a time, in this order,
    each at the best values found so far. A stage is a Hydra sweep override; stages naming a parameter the
    strategy lacks are skipped."""

    stages: list[str] = field(default_factory=lambda: [
        "strategy.params.gamma=2,3,4,5,6,8,10,12",   # gamma first, at fixed others
        "strategy.params.W=8,12,16,20,24",           # then the window W
        "strategy.params.N=3,4,5,6,7",               # then beta (the level N: phrases of N-1 tokens)
        "strategy.params.K=1,2,3,4,5",               # and K
    ])
    tie: dict[str, str] = field(default_factory=lambda: {"G": "W"})  # G follows W when they start equal
    metric: str = "tokens_per_s"   # a key of RunResult.totals() (higher is better)
    out: str = "runs/conf/strategy/tuned/${strategy.name}.yaml"  # the chosen settings: strategy=tuned/<name> selects
    #                                                                them (runs/conf is on Hydra's search path)


@dataclass
class RunConfig:
    """The root: what one point needs. `validate` returns it with checked fields."""

    model: dict[str, Any] = field(default_factory=dict)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    dataset: dict[str, Any] = field(default_factory=dict)
    backend: BackendConfig = field(default_factory=BackendConfig)
    hardware: dict[str, Any] | None = None
    sim: dict[str, Any] = field(default_factory=dict)  # simulator options (conf/sim/; simulators.pair.SIM_DEFAULTS)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    tune: TuneConfig = field(default_factory=TuneConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)
    # Decoding: temperature 0 = greedy (default); > 0 = exact sampling (ouroboros/loop/sampling.py)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = 64
    seed: int = 0
    warmup: bool = True         # one short untimed decode per strategy before the clock runs
    interleave: bool | None = None   # points sharing prompts decode them prompt by prompt in turn (null: on real
    #                                    backends, where background load must hit every point alike; off on sim)
    baseline: str | None = "vanilla"   # strategy whose time the speedup divides (null: no speedups)
    out: str | None = "runs/records.jsonl"  # the JSONL record file (null: no records)

    @property
    def kind(self) -> BackendKind:
        """The backend kind the run is on (ouroboros/backends/registry.py; auto: the plugin that claims the model,
        else hf); an unknown `backend.kind` is one line."""
        return registry.get(self.backend.kind, self.model)

    @property
    def backend_kind(self) -> str:
        return self.kind.name


def register() -> None:
    """Register the root schema; conf/config.yaml names it first in its defaults list."""
    ConfigStore.instance().store(name="ouroboros_schema", node=RunConfig)


register()


def one_line(e: BaseException) -> str:
    """An exception's message and its causes', as one line (Hydra's and OmegaConf's span several): an indented
    list after a line ending in ':' (Hydra's available options) is joined with commas; key/type dumps and Hydra's
    search path are dropped.
    Golden: "In 'config': Could not find 'strategy/x'\n\nAvailable options in 'strategy':\n\tpld\n\trest"
    -> "In 'config': Could not find 'strategy/x'; Available options in 'strategy': pld, rest"."""
    parts: list[str] = []
    cur: BaseException | None = e
    while cur is not None:
        items: list[str] | None = None
        skipping = False
        for raw in str(cur).splitlines():
            line = raw.strip().rstrip(".")
            indented = raw[:1] in ("\t", " ")
            if not line or (skipping and indented):
                continue
            skipping = line.startswith(_NOISE)
            if skipping:
                continue
            if items is not None and indented:
                items.append(line)
                continue
            if items:
                parts[-1] += " " + ", ".join(items)
            items = [] if line.endswith(":") else None
            if line not in parts:
                parts.append(line)
        if items:
            parts[-1] += " " + ", ".join(items)
        cur = cur.__cause__
    return "; ".join(parts) or type(e).__name__


def check_overrides(overrides: list[str]) -> None:
    """Compose the root config with `overrides` as Hydra will; an override it cannot compose (an unknown group
    option, a typo'd key, a value of the wrong type) raises OuroborosError with Hydra's message on one line."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if GlobalHydra.instance().is_initialized():   # inside a Hydra app already: it composes (and reports) itself
        return
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            compose(config_name="config", overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as e:
        raise OuroborosError(one_line(e)) from None


def to_run_config(cfg: DictConfig | dict) -> RunConfig:
    """Composed config -> RunConfig (a typed copy; drops the `hydra` node). A key the schema does not know (added
    with `+key=...`) or a value of the wrong type raises OuroborosError in one line."""
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(cfg, dict):
        cfg = OmegaConf.create(cfg)
    try:
        node = OmegaConf.merge(OmegaConf.structured(RunConfig), {k: v for k, v in cfg.items() if k != "hydra"})
    except OmegaConfBaseException as e:
        raise OuroborosError(one_line(e)) from None
    run = OmegaConf.to_object(node)
    assert isinstance(run, RunConfig)
    return run


def validate(cfg: DictConfig | dict | RunConfig, serving: bool = True) -> RunConfig:
    """Check one point; raises OuroborosError with one line saying why. Loads no model. serving=False: skip the
    serve.* checks (a sweep's base config, whose points set serve.concurrency; each point is checked in full)."""
    run = cfg if isinstance(cfg, RunConfig) else to_run_config(cfg)
    check_range("max_new_tokens", run.max_new_tokens, lo=1)
    check_range("seed", run.seed, lo=0)
    spec = get_spec(run.strategy.name)
    check_files(run.strategy.name, run.strategy.params)
    if is_peer(run.strategy.name) and not run.kind.runs_peers:
        raise OuroborosError(f"strategy '{run.strategy.name}' is a peer (another engine's own decoding: "
                             "transformers' generate or vLLM): it runs on real models (backend=hf), not on the "
                             "simulator")
    if run.baseline is not None:
        get_spec(run.baseline)
    if "kind" not in run.model and "profile" not in run.model:
        raise OuroborosError("model config has neither 'kind' nor 'profile' (pick one with model=<name>)")
    if "kind" not in run.dataset:
        raise OuroborosError("dataset config has no 'kind' (pick one with dataset=<name>)")
    load_records(run.dataset, run.seed)   # files read and parsed, ids and limit checked (no tokenizer needed)
    if run.model.get("kind") == "tiny" and run.dataset["kind"] != "synthetic" and run.kind.model_tokenizer:
        raise OuroborosError(f"dataset {run.dataset['kind']!r} needs a tokenizer; the tiny random model has none "
                             "(use dataset=synthetic)")
    SamplingConfig(**dataclasses.asdict(run.sampling))  # range checks (one line each)
    if not run.sampling.greedy:
        run.kind.check_sampling(run)
    kind = run.kind   # an unknown backend: one line
    if needs_stand_in(run.strategy.name, run.strategy.params) and not kind.stand_in:
        raise NeedsDatastore()
    owner = registry.owner(run.model)
    if owner is not None and owner is not kind:
        raise OuroborosError(f"model kind {run.model['kind']!r} is a {owner.model_noun}: use backend={owner.name}")
    kind.setup(run)   # what loading would refuse (sim: the hardware, the pair's profile and fit; hf: device, threads)
    from ouroboros.backends.models import parse_dtype

    parse_dtype(run.backend.dtype)   # a typo is refused on every backend, not only where it loads weights
    if spec.needs_draft_model and "draft" in run.model and run.model["draft"] is None:
        raise OuroborosError(f"strategy '{run.strategy.name}' needs a draft model, but model.draft is null")
    if run.logger.wandb.mode not in WANDB_MODES:
        raise OuroborosError(f"logger.wandb.mode must be one of {', '.join(WANDB_MODES)}, got "
                             f"{run.logger.wandb.mode!r}")
    if serving:
        check_serve(run)
    if run.out is not None and not str(run.out).strip():
        raise OuroborosError("out= is empty: give the records file's path, or out=null to write no records")
    check_outputs(run)
    return run


def check_serve(run: RunConfig) -> None:
    """The serve.* settings (the checks `serve()` itself runs are ouroboros/serving/load.py's, shared)."""
    sv = run.serve
    check_range("serve.concurrency", sv.concurrency, lo=0, note=" (0: one request at a time, alone)")
    check_range("serve.requests", sv.requests, lo=0, note=" (0: one per prompt)")
    check_range("serve.max_draft", sv.max_draft, lo=1)
    check_prefill(sv.prefill)
    if sv.concurrency == 0:
        if sv.rate is not None or sv.load_aware or sv.requests or sv.shared_pool:
            raise OuroborosError("serve.rate, serve.requests, serve.load_aware and serve.shared_pool need "
                                 "serve.concurrency >= 1")
        return
    check_rate(sv.rate)
    if not run.sampling.greedy:
        raise OuroborosError("serve.concurrency runs greedy decoding only (sampling.temperature=0)")
    kind = run.kind
    if is_peer(run.strategy.name):
        check_served_peer(run)
        return
    check_load_aware(sv.load_aware, kind.simulated)
    if sv.prefill == "batched" and not kind.batched_prefill:
        raise OuroborosError(f"serve.prefill=batched is simulated only: on {kind.name} each prefill is its own "
                             "forward (serve.prefill=separate)")
    check_shared_pool(sv.shared_pool, run.strategy.name, run.strategy.params)
    kind.check_serve(run)


def check_served_peer(run: RunConfig) -> None:
    """A peer under load: only an engine with its own batching (vLLM) serves; it waits for open-loop arrivals in
    real time and schedules its own prefill."""
    from ouroboros.running.peer_configs import PEERS

    name, sv = run.strategy.name, run.serve
    if PEERS[name].engine != "vllm":
        raise OuroborosError(f"strategy '{name}' is a peer that decodes one request at a time (transformers' "
                             "generate): it cannot serve under load (serve.concurrency); the vLLM peers can")
    if sv.load_aware or sv.shared_pool:
        raise OuroborosError(f"serve.load_aware and serve.shared_pool are our batching's; '{name}' batches in vLLM")
    if sv.prefill is not None:
        raise OuroborosError(f"serve.prefill is our batching's; '{name}' schedules its own prefill (vLLM's)")


def check_outputs(run: RunConfig, extra: list[tuple[str, str]] | None = None) -> None:
    """The record file and the wandb folder can be written (proved by creating them; nothing is left behind); the
    record file is a records file or new (not a device, a saved document, a dataset); no two files the run writes
    (out, the strategy's *_save files, `extra`: e.g. tune.out) are one file, nor inside the wandb folder's."""
    from ouroboros.paths import check_distinct, check_regular, inside, same_file
    from ouroboros.running.sinks import check_records_file

    if run.out:
        check_regular(run.out, "out", " (out=null: no records file)")
        check_writable(run.out, "out")
        check_records_file(run.out, "out")
    saves = [(f"strategy.params.{k}", v) for k, v in (run.strategy.params or {}).items()
             if k.endswith("_save") and isinstance(v, str) and v]
    outputs = [("out", run.out or ""), *saves, *(extra or [])]
    check_distinct(outputs)
    if run.logger.wandb.mode != "disabled":
        check_writable(os.path.join(run.logger.wandb.dir, "wandb", ".ouroboros-check"), "logger.wandb.dir")
        wandb_dir = run.logger.wandb.dir
        for what, path in outputs:
            if path and (same_file(path, wandb_dir) or inside(path, os.path.join(wandb_dir, "wandb"))):
                raise OuroborosError(f"{what} {path!r} is in the wandb folder (logger.wandb.dir={wandb_dir!r}), "
                                     "which wandb writes: pick a path outside it")


# ----------------------------------------------------------------------------------------------- precedence
# One rule, applied by every entry point: a value typed on the command line (or set by a sweep point) beats every
# preset and default; where something else must decide, the run says so in one line before it starts
# (`explicit_notices`). `apply_explicit` is where a typed value would otherwise lose silently:
# - `max_new_tokens=N` typed: every prompt's budget is N, also on datasets with per-task budgets (HumanEval 512,
#   ...), unless `dataset.max_new_tokens` is typed too (the dataset's own key wins; a notice says so).
def override_key(override: str) -> str:
    """'+strategy.params.K=3' -> 'strategy.params.K'."""
    return override.split("=", 1)[0].lstrip("+~")


def apply_explicit(run: RunConfig, overrides: list[str]) -> RunConfig:
    keys = {override_key(o) for o in overrides}
    if "max_new_tokens" in keys and "dataset.max_new_tokens" not in keys and run.dataset.get("kind") != "synthetic":
        run = dataclasses.replace(run, dataset={**run.dataset, "max_new_tokens": run.max_new_tokens})
    return run.kind.default_profile(run, keys)   # sim: the pair's calibration profile for the dataset's task


def explicit_notices(run: RunConfig, overrides: list[str]) -> list[str]:
    """One line per setting that decides the numbers although the command line did not pick it."""
    keys = {override_key(o) for o in overrides}
    out = []
    if {"max_new_tokens", "dataset.max_new_tokens"} <= keys and run.dataset.get("max_new_tokens") != run.max_new_tokens:
        out.append(f"dataset.max_new_tokens={run.dataset.get('max_new_tokens')} is the budget (the dataset's own "
                   f"key wins over max_new_tokens={run.max_new_tokens})")
    return out + run.kind.notes(run, keys)   # sim: the default hardware, the decisions' source, REST's stand-in
