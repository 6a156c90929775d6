"""Hardware profiles: what one machine (one or more identical devices) can do per second, and how a model is
placed on it. Built from the plain dict of a `conf/hardware/<name>.yaml` file.

Units: bytes/s and FLOP/s per device (peak, from spec sheets), efficiency factors in [0, 1] (the fraction
of peak a batch-1 forward reaches), seconds for overheads. Every profile names its source. A profile measured on a
machine may also hold fitted cost models (`costs:`) and the proposers' host time per step (`proposer_costs:`,
simulators/host.py), each with its provenance.

This module knows nothing of models, tokens or strategies.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from ouroboros.strategies import check_type
from simulators.host import parse_costs

PLACEMENTS = ("single", "pipeline", "tensor")
ATTENTION = ("fused", "eager")
ROOFLINE_P_MAX = 64.0               # roofline_p's range is [0, this] (0 = the sharp roofline; cost_model's doc)


@dataclass(frozen=True)
class Hardware:
    name: str
    devices: int                    # identical devices the pair is spread over
    mem_gb: float                   # memory per device, GB (1e9 bytes)
    mem_bw_gb_s: float              # peak memory bandwidth per device, GB/s
    tflops: float                   # peak dense 16-bit TFLOP/s per device
    bw_eff: float = 0.8             # achieved fraction of mem_bw at batch 1
    flop_eff: float = 0.6           # achieved fraction of tflops on skinny matmuls
    tile: int = 16                  # k is rounded up to a multiple of this (tensor-core / blocking tile)
    roofline_p: float = 0.0         # 0: the sharp roofline max(weights, FLOPs); p > 0: smooth (cost_model doc)
    forward_overhead_s: float = 0.0  # fixed cost per forward (framework, launch, host<->device sync)
    layer_overhead_s: float = 0.0   # per decoder layer per forward (kernel launches in eager mode)
    link_gb_s: float = 0.0          # device-to-device bandwidth (NVLink), GB/s
    link_latency_s: float = 0.0     # per transfer / all-reduce
    placement: str = "single"       # single | pipeline (device_map="auto") | tensor (tensor parallel)
    attention: str = "fused"        # fused (flash / SDPA: FLOPs only) | eager (scores materialised; cost_model)
    runtime_gb: float = 1.5         # memory per device taken by the runtime (CUDA context, allocator, activations)
    source: str = ""
    costs: dict[str, dict[str, Any]] | None = None  # fitted cost models by model name (simulators calibrate clock)
    # host seconds per decode step by target model name and strategy (simulators calibrate proposers; host.py)
    proposer_costs: dict[str, dict[str, Any]] | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Hardware:
        d = dict(d)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise OuroborosError(f"hardware profile has no field {unknown[0]!r}; fields: {', '.join(sorted(known))}")
        if "name" not in d:
            raise OuroborosError("hardware profile needs a name")
        for f in fields(cls):  # numbers where numbers belong, before anything compares them
            if f.type in ("int", "float") and f.name in d:
                try:
                    check_type(d[f.name], int if f.type == "int" else float)
                except TypeError as e:
                    raise OuroborosError(f"hardware {d.get('name')!r}: {f.name} must be {e}, "
                                         f"got {d[f.name]!r}") from None
        try:
            hw = cls(**d)
        except TypeError as e:
            raise OuroborosError(f"hardware profile {d.get('name')!r}: {e}") from None
        hw.check()
        return hw

    def check(self) -> None:
        n = self.name
        if self.placement not in PLACEMENTS:
            raise OuroborosError(f"hardware {n!r}: placement must be one of {', '.join(PLACEMENTS)}, "
                                 f"got {self.placement!r}")
        if self.attention not in ATTENTION:
            raise OuroborosError(f"hardware {n!r}: attention must be one of {', '.join(ATTENTION)}, "
                                 f"got {self.attention!r}")
        check_range(f"hardware {n!r}: devices", self.devices, lo=1)
        if self.placement == "single" and self.devices != 1:
            raise OuroborosError(f"hardware {n!r}: placement 'single' needs devices=1, got {self.devices} (several "
                                 "devices take sim.placement=pipeline or tensor)")
        for f in ("mem_gb", "mem_bw_gb_s", "tflops"):
            check_range(f"hardware {n!r}: {f}", getattr(self, f), lo=0, lo_open=True)
        for f in ("bw_eff", "flop_eff"):
            check_range(f"hardware {n!r}: {f}", getattr(self, f), lo=0, hi=1, lo_open=True)
        for f in ("forward_overhead_s", "layer_overhead_s", "link_gb_s", "link_latency_s", "runtime_gb"):
            check_range(f"hardware {n!r}: {f}", getattr(self, f), lo=0)
        check_range(f"hardware {n!r}: tile", self.tile, lo=1)
        check_range(f"hardware {n!r}: roofline_p", self.roofline_p, lo=0, hi=ROOFLINE_P_MAX,
                    note=" (0 = the sharp roofline)")
        if self.placement != "single" and self.devices > 1 and self.link_gb_s <= 0:
            raise OuroborosError(f"hardware {n!r}: {self.placement} placement over {self.devices} devices "
                                 "needs link_gb_s > 0")
        parse_costs(n, self.proposer_costs)

    @property
    def usable_bytes(self) -> float:
        return self.devices * (self.mem_gb - self.runtime_gb) * 1e9

    def with_placement(self, placement: str | None, devices: int | None = None) -> Hardware:
        """The same machine with another placement (e.g. tensor instead of pipeline); checked."""
        from dataclasses import replace

        hw = replace(self, placement=placement or self.placement, devices=devices or self.devices)
        hw.check()
        return hw
