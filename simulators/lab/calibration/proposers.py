"""`python -m simulators calibrate proposers --records R.jsonl --hardware cpu_local`: the proposers' host time per
decode step, fitted to a real run's recorded steps and written into the hardware profile of the machine that ran
them (`proposer_costs:`, simulators/host.py), where the simulated clock charges it per step.

Each finished real point (`ouroboros.sweep ... out=R.jsonl` on an hf backend; a point still running has no record
yet, so its prompt lines are not used) of a strategy that runs no draft model gives its steps (the last prompt line
of each of its prompts): per step the draft's nodes n, `draft_s` (the proposer's `propose`) and `other_s` (commit
and `observe`). Per (pair, strategy), each of the two is fitted by least squares as a + b x n (a, b >= 0; b = 0
when every step has the same n, as vanilla's). A step whose host time exceeds `--drop-above` x the strategy's
median is dropped first: a pause of the machine (another process, the OS), not the strategy's work; the report
counts them and their share of the host time. The fit error is reported per prompt (fitted vs measured host time
summed over the prompt's steps: what a simulated prompt's seconds see) and by draft size.

Strategies with a draft model are not fitted: their `draft_s` holds the draft's forwards, whose modelled time is
less certain than the Python around them, so that Python cannot be separated honestly; the simulator charges them
no host time. The pair is the record's `config.model.profile.target` name (the simulated pair's target must have
that name to be charged); the CPU is the one the records name (`hardware.cpu`, from the measuring machine's
/proc/cpuinfo). A refit replaces the pair's whole entry; the profile's other lines (comments included) are kept.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ouroboros.errors import OuroborosError
from ouroboros.paths import check_writable
from simulators.architectures import check_name, conf_root, load_conf
from simulators.hardware import Hardware
from simulators.host import FIT, SECTION, ProposerCost
from simulators.lab.calibration.measured import repo_relative
from simulators.sim_profiles import git_commit

BINS = ((0, 0), (1, 4), (5, 16), (17, 64), (65, None))   # draft sizes the report compares measured and fitted by


@dataclass(frozen=True)
class Step:
    prompt: str          # the point and prompt it belongs to
    nodes: int
    draft_s: float
    other_s: float

    @property
    def host_s(self) -> float:
        return self.draft_s + self.other_s


@dataclass
class Fitted:
    cost: ProposerCost
    kept: list[Step]
    dropped: int = 0
    dropped_share: float = 0.0           # of the host time of all steps
    prompt_errs: list[float] = field(default_factory=list)

    def report(self, label: str) -> list[str]:
        c, errs = self.cost, self.prompt_errs
        out = [f"{label}: {len(self.kept)} steps ({self.dropped} dropped as pauses, {self.dropped_share:.1%} of the "
               f"host time): draft_s {c.draft_s * 1e3:.4f} ms + {c.draft_s_per_node * 1e3:.4f} ms/node, other_s "
               f"{c.other_s * 1e3:.4f} ms + {c.other_s_per_node * 1e3:.4f} ms/node; per-prompt error mean "
               f"{statistics.fmean(errs):.1%}, max {max(errs):.1%} over {len(errs)} prompts",
               f"  {'nodes':<8}{'steps':>7}{'measured ms':>13}{'fitted ms':>11}"]
        for lo, hi in BINS:
            sel = [s for s in self.kept if s.nodes >= lo and (hi is None or s.nodes <= hi)]
            if sel:
                span = f"{lo}" if hi == lo else f"{lo}+" if hi is None else f"{lo}-{hi}"
                out.append(f"  {span:<8}{len(sel):>7}{statistics.fmean(s.host_s for s in sel) * 1e3:>13.4f}"
                           f"{statistics.fmean(c.step_s(s.nodes) for s in sel) * 1e3:>11.4f}")
        return out


def fit_line(xs: list[int], ys: list[float]) -> tuple[float, float]:
    """Least-squares (a, b) of y = a + b x with a, b >= 0 (b = 0 when x never varies)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx > 0 else 0.0
    a = my - b * mx
    if b < 0:
        return max(my, 0.0), 0.0
    if a < 0:   # through the origin
        sxx0 = sum(x * x for x in xs)
        return 0.0, (sum(x * y for x, y in zip(xs, ys, strict=True)) / sxx0 if sxx0 > 0 else 0.0)
    return a, b


def fit_steps(steps: list[Step], drop_above: float) -> Fitted:
    """One strategy's cost from its steps (module doc)."""
    med = statistics.median(s.host_s for s in steps)
    kept = [s for s in steps if med <= 0 or s.host_s <= drop_above * med]
    total = sum(s.host_s for s in steps)
    dropped = total - sum(s.host_s for s in kept)
    xs = [s.nodes for s in kept]
    a_d, b_d = fit_line(xs, [s.draft_s for s in kept])
    a_o, b_o = fit_line(xs, [s.other_s for s in kept])
    prompts: dict[str, list[Step]] = defaultdict(list)
    for s in kept:
        prompts[s.prompt].append(s)
    cost = ProposerCost(a_d, b_d, a_o, b_o)
    errs = []
    for ps in prompts.values():
        real = sum(s.host_s for s in ps)
        errs.append(abs(sum(cost.step_s(s.nodes) for s in ps) - real) / real if real > 0 else 0.0)
    cost = ProposerCost(a_d, b_d, a_o, b_o, steps=len(kept), prompt_err=statistics.fmean(errs))
    return Fitted(cost, kept, len(steps) - len(kept), dropped / total if total > 0 else 0.0, errs)


@dataclass
class RecordSteps:
    steps: dict[tuple[str, str], list[Step]] = field(default_factory=dict)   # (pair, strategy) -> steps
    points: int = 0
    skipped: dict[str, int] = field(default_factory=dict)                    # why -> points
    unfinished: int = 0                                                       # prompt lines of points with no record
    with_forwards: int = 0                                                    # steps that ran a draft model anyway
    cpus: set[str] = field(default_factory=set)
    threads: set[int] = field(default_factory=set)
    recorded_with: set[str] = field(default_factory=set)                      # the records' versions.git


def lines_of(path: str) -> Iterable[dict[str, Any]]:
    with open(path, encoding="utf-8", errors="replace") as f:
        for ln in f:
            try:
                obj = json.loads(ln)
            except ValueError:
                continue   # a torn last line (a run still writing) or a damaged one
            if isinstance(obj, dict):
                yield obj


def read_steps(path: str) -> RecordSteps:
    """The steps of every finished real point of a strategy without a draft model, by (pair, strategy)."""
    from ouroboros.strategies import REGISTRY, is_peer

    prompts: dict[str, dict[str, dict[str, Any]]] = {}   # point id -> prompt id -> its last prompt line
    records: dict[str, dict[str, Any]] = {}               # point id -> its last record
    for obj in lines_of(path):
        if obj.get("kind") == "prompt_result" and isinstance(obj.get("prompt"), dict):
            prompts.setdefault(str(obj.get("of_point")), {})[str(obj["prompt"].get("prompt_id"))] = obj["prompt"]
        elif "point_id" in obj:
            records[str(obj["point_id"])] = obj
    out = RecordSteps(unfinished=sum(len(v) for k, v in prompts.items() if k not in records))
    for pid, rec in records.items():
        name = str(rec.get("strategy"))
        target = (((rec.get("config") or {}).get("model") or {}).get("profile") or {}).get("target") or {}
        why = ("simulated" if rec.get("backend") == "sim" else
               "transformers' own generate (not simulated)" if is_peer(name) else
               "unknown strategy" if name not in REGISTRY else
               "runs a draft model (not separable from its forwards)" if REGISTRY[name].needs_draft_model else
               "its model has no profile: section naming the pair's target" if not target.get("name") else None)
        if why is not None:
            out.skipped[f"{name}: {why}"] = out.skipped.get(f"{name}: {why}", 0) + 1
            continue
        out.points += 1
        hw, ver = rec.get("hardware") or {}, rec.get("versions") or {}
        out.cpus.add(str(hw.get("cpu") or "unknown CPU"))
        if hw.get("torch_threads"):
            out.threads.add(int(hw["torch_threads"]))
        if ver.get("git"):
            out.recorded_with.add(str(ver["git"]))
        mine = out.steps.setdefault((str(target["name"]), name), [])
        for prompt_id, p in prompts.get(pid, {}).items():
            for s in p.get("steps") or []:
                if s.get("draft_forwards", 0):
                    out.with_forwards += 1
                    continue
                mine.append(Step(f"{pid}/{prompt_id}", int(s["n_nodes"]), float(s["draft_s"]), float(s["other_s"])))
    return out


def replace_block(text: str, key: str, block: str) -> str:
    """`text` (a YAML file) with its top-level `key:` block (up to the next top-level line) replaced by `block`, or
    `block` appended; every other line, comments included, kept."""
    lines, out, skipping = text.splitlines(), [], False
    for ln in lines:
        top = bool(ln) and not ln[0].isspace() and not ln.startswith("#")
        if top:
            skipping = ln.split(":", 1)[0].strip() == key
        if not skipping:
            out.append(ln)
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out) + "\n" + block


def add_args(ap) -> None:
    ap.add_argument("--records", required=True, help="a records JSONL of real runs (ouroboros.sweep ... out=PATH)")
    ap.add_argument("--hardware", default="cpu_local", help="conf/hardware/<name>.yaml: the profile of the machine "
                                                            "that ran them (default: this machine's, calibrate clock)")
    ap.add_argument("--out", default=None, help="where the profile is written (default: conf/hardware/<name>.yaml)")
    ap.add_argument("--drop-above", type=float, default=20.0,
                    help="drop steps whose host time exceeds this many times the strategy's median (pauses)")
    ap.add_argument("--min-steps", type=int, default=50, help="fewest steps a strategy is fitted on")


def main(a) -> int:
    if not os.path.isfile(a.records):
        raise OuroborosError(f"--records {a.records!r}: no such file")
    check_name(a.hardware, "--hardware")   # the default --out is conf/hardware/<hardware>.yaml
    try:
        profile = load_conf("hardware", a.hardware)
    except OuroborosError as e:
        raise OuroborosError(f"{e} (this machine's: python -m simulators calibrate clock)") from None
    Hardware.from_dict(profile)
    src = conf_root() / "hardware" / f"{a.hardware}.yaml"
    out = Path(a.out) if a.out else src
    if not out.parent.is_dir() or not os.access(out.parent, os.W_OK):
        raise OuroborosError(f"--out {str(out)!r}: its folder does not exist or cannot be written")
    check_writable(out, "--out")   # a folder, a device or a read-only file
    if not (math.isfinite(a.drop_above) and a.drop_above > 1):
        raise OuroborosError(f"--drop-above must be > 1, got {a.drop_above}")
    if a.min_steps < 2:
        raise OuroborosError(f"--min-steps must be >= 2, got {a.min_steps}")

    rs = read_steps(a.records)
    print(f"records {a.records}: {rs.points} finished real point(s) of strategies without a draft model"
          + (f"; {rs.unfinished} prompt line(s) of unfinished points not used" if rs.unfinished else ""))
    for why, n in sorted(rs.skipped.items()):
        print(f"  skipped {n} point(s) of {why}")
    if rs.with_forwards:
        print(f"  skipped {rs.with_forwards} step(s) that ran draft forwards")
    if len(rs.cpus) > 1:
        raise OuroborosError(f"--records {a.records!r} were measured on several CPUs ({', '.join(sorted(rs.cpus))}): "
                             "give one machine's records")
    enough = {k: v for k, v in rs.steps.items() if len(v) >= a.min_steps}
    for (pair, name), steps in sorted(rs.steps.items()):
        if (pair, name) not in enough:
            print(f"  {pair} {name}: {len(steps)} step(s), fewer than --min-steps {a.min_steps}: not fitted")
    if not enough:
        raise OuroborosError(f"--records {a.records!r}: no strategy without a draft model has >= {a.min_steps} "
                             "recorded steps in a finished real point")

    cpu = next(iter(rs.cpus))
    command = " ".join(["python -m simulators calibrate proposers", "--records", repo_relative(a.records),
                        "--hardware", a.hardware] + (["--out", repo_relative(str(out))] if a.out else [])
                       + (["--drop-above", f"{a.drop_above:g}"] if a.drop_above != 20.0 else [])
                       + (["--min-steps", str(a.min_steps)] if a.min_steps != 50 else []))
    section = dict(profile.get(SECTION) or {})
    for pair in sorted({p for p, _ in enough}):
        entry: dict[str, Any] = {FIT: {
            "what": "host seconds per decode step outside the target's forward: draft_s (propose) and other_s (commit "
                    "and observe) of a real run's steps, each fitted as a + b x draft nodes",
            "command": command, "records": repo_relative(a.records), "cpu": cpu,
            "threads": sorted(rs.threads), "recorded_with": sorted(rs.recorded_with), "commit": git_commit(),
            "drop_above": a.drop_above}}
        for name in sorted(n for p, n in enough if p == pair):
            fitted = fit_steps(enough[(pair, name)], a.drop_above)
            print("\n".join(fitted.report(f"{pair} {name}")))
            entry[name] = fitted.cost.to_dict()
        section[pair] = entry
    block = yaml.safe_dump({SECTION: section}, sort_keys=False, width=110).replace(
        f"{SECTION}:", f"{SECTION}:   # python -m simulators calibrate proposers (simulators/host.py)", 1)
    text = replace_block(src.read_text(encoding="utf-8"), SECTION, block)
    Hardware.from_dict(yaml.safe_load(text))   # what is written loads
    out.write_text(text, encoding="utf-8")
    print(f"measured on {cpu}; profile written to {out}")
    return 0
