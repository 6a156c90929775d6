"""The simulator's side of the backend boundary: `SIM`, the `sim` backend kind (ouroboros/backends/base.py
`BackendKind`). pyproject.toml declares it as the entry point `sim` of the group `ouroboros.backends`, where
ouroboros/backends/registry.py finds it; no module of ouroboros imports the simulator or names its modules.

Each question the core asks of a simulated run is answered here by the simulator's own functions: the pair and its
load-time checks (pair.py `make_pair`, `pair_setup`, `check_source`, `check_serving_fit`), the calibration profile,
notes and decisions block (trust.py), REST's stand-in datastore (stand_in.py) and the serving engine (serving.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ouroboros.backends.base import Backend, BackendKind, OpenPair
from ouroboros.errors import OuroborosError
from ouroboros.strategies import get_spec, needs_stand_in
from simulators.pair import check_serving_fit, check_source, make_pair, pair_setup
from simulators.serving import SimEngine
from simulators.stand_in import rest_stand_in
from simulators.trust import record_decisions, source_notes, with_default_profile

REAL_SETTINGS = ("backend.dtype", "backend.device", "backend.threads")   # how real models run: not simulated


def on_stand_in(run: Any) -> bool:
    """A REST run naming no datastore: it retrieves from the simulator's stand-in."""
    return needs_stand_in(run.strategy.name, run.strategy.params)


class SimKind(BackendKind):
    """backend=sim: a modelled clock on the `hardware` profile; token decisions set by the `sim` options."""

    name = "sim"
    simulated = True
    batched_prefill = True
    stand_in = True
    config_groups = ("hardware", "sim")
    model_kinds = ("sim", "profile")   # model kinds that only exist as simulator profiles
    model_noun = "simulator profile"

    def claims(self, model: dict[str, Any]) -> bool:
        """A model that says `backend: sim`, a simulator profile, or a profile-only pair (no weights to load)."""
        return (model.get("backend") == self.name or model.get("kind") in self.model_kinds
                or ("kind" not in model and "profile" in model))

    def setup(self, run: Any) -> None:
        """What the simulator would refuse at load time, checked now (cheap: no token source is built): its options,
        the pair's profile and whether a calibration profile belongs to it, the hardware and placement, whether the
        pair fits the memory, its cost models (pair.py `pair_setup`, which make_pair runs too); REST on the stand-in
        only where its ids are the surrogate's."""
        if not run.hardware:
            raise OuroborosError("backend=sim needs a hardware profile (e.g. hardware=a800x2)")
        pair_setup(run.model, run.hardware or {}, run.sim)
        if on_stand_in(run) and run.sim.get("tokens", "surrogate") not in ("surrogate", "iid"):
            raise OuroborosError(f"rest with sim.tokens={run.sim['tokens']} needs strategy.params.datastore=PATH in "
                                 "the ids its tokens are decided in: the simulator's stand-in is in the surrogate's")

    def check_sampling(self, run: Any) -> None:
        if run.sim.get("tokens", "surrogate") != "proxy":
            raise OuroborosError("sampling needs real next-token distributions: use backend=hf, or backend=sim with "
                                 "sim.tokens=proxy (surrogate, iid and replay token sources are deterministic)")

    def check_serve(self, run: Any) -> None:
        if run.sim.get("tokens") == "proxy":
            raise OuroborosError("serve.concurrency on the simulator needs sim.tokens=surrogate, iid or replay")

    def check_strategy(self, run: Any) -> None:
        """The token source can decide this strategy (a trace of outputs only replays context-only ones)."""
        check_source(run.sim, run.strategy.name)

    def check_serving(self, run: Any, session: Any, budgets: list[int]) -> None:
        """The weights + the KV caches of the point's `concurrency` largest requests must fit."""
        sizes = sorted((len(p.ids) + b for p, b in zip(session.prompts, budgets, strict=True)), reverse=True)
        n = run.serve.requests or len(sizes)
        per_round = sizes * (-(-n // len(sizes)))   # requests cycle through the prompts
        c = run.serve.concurrency
        kv_tokens = sum(sorted(per_round[:n], reverse=True)[:c])
        check_serving_fit(run.model, run.hardware or {}, run.sim, kv_tokens, c,
                          bool(get_spec(run.strategy.name).needs_draft_model))

    def default_profile(self, run: Any, typed: set[str]) -> Any:
        """The pair's calibration profile for the dataset's task, unless sim= was typed (trust.py)."""
        sim = with_default_profile(run.sim, run.model, run.dataset, typed)
        if sim is run.sim:
            return run
        run = dataclasses.replace(run, sim=sim)
        pair_setup(run.model, run.hardware or {}, run.sim)
        return run

    def notes(self, run: Any, typed: set[str]) -> list[str]:
        """The default hardware, the decisions' source (trust.py `source_notes`), REST's stand-in; a real model's
        setting typed for a simulated run is refused."""
        out = []
        if "hardware" not in typed and run.hardware:
            hw = run.hardware
            placement = run.sim.get("placement") or hw.get("placement")
            devices = run.sim.get("devices") or hw.get("devices")
            out.append(f"simulating the default hardware={hw.get('name')} ({devices} device(s), placement "
                       f"{placement}); pick one with hardware=<a100|a800x2|h100|h200>")
        if typed & set(REAL_SETTINGS):
            real = sorted(typed & set(REAL_SETTINGS))
            raise OuroborosError(f"{', '.join(real)} set(s) how real models run (backend=hf); the simulator's clock "
                                 f"takes the weights' dtype from sim.dtype (now {run.sim.get('dtype')}) and its "
                                 "devices from hardware= / sim.devices")
        out += source_notes(run.sim, run.model, run.dataset, typed, run.hardware, run.max_new_tokens)
        if on_stand_in(run):
            out.append(rest_stand_in(run.sim, run.model).note(run.sim))
        return out

    def open_pair(self, run: Any, stand_in: bool = False) -> OpenPair:
        pair = make_pair(run.model, run.hardware or {}, run.sim, seed=run.seed, rest_stand_in=stand_in,
                         budget=run.max_new_tokens)

        def route(prompts: list[Any]) -> list[str]:
            """sim.by_category: each category's profile decides its prompts."""
            if not pair.by_category:
                return []
            counts = pair.route(prompts)
            rest = len(prompts) - sum(counts.values())
            return ["decisions per prompt category: " + ", ".join(f"{n} decides {k}" for n, k in sorted(
                counts.items())) + f", {run.sim.get('profile') or 'the run options'} {rest} (sim.by_category)"]

        return OpenPair(pair.target, pair.draft, pair.tokenizer, tuple(pair.eos_ids),
                        synthetic_prompts=pair.default_prompts, route=route)

    def stand_in_datastore(self, run: Any) -> str:
        return rest_stand_in(run.sim, run.model).path

    def hardware(self, run: Any) -> dict[str, Any]:
        """The profile as simulated: sim.placement / sim.devices override its own."""
        return {**(run.hardware or {}), **{k: run.sim[k] for k in ("placement", "devices") if run.sim.get(k)}}

    def decisions(self, run: Any, prompts: int | None, budget: int | None = None) -> dict[str, Any]:
        """Where the tokens come from and the strategy's measured error band (on a run of `prompts` prompts: at
        least how far that many real prompts stray from their task's; `budget`: the new tokens in effect, which
        the off-fit check compares with the profile's); a REST point on the stand-in says so."""
        out = record_decisions(run.sim, run.strategy.name, run.dataset, run.hardware, prompts,
                               budget or run.max_new_tokens)
        if on_stand_in(run):
            out["rest_datastore"] = rest_stand_in(run.sim, run.model).record(run.sim)
        return dict(out)

    def engine(self, backend: Backend, prefill: str) -> SimEngine:
        return SimEngine.for_backend(backend, prefill)


SIM = SimKind()
