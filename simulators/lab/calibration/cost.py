"""`python -m simulators calibrate clock --model qwen_coder`: time a real `hf` backend on this machine over a grid of
k (new tokens per forward) and ctx (cached tokens), fit the cost model (`cost_model.fit`) for the target and
the draft, print the fit error per point, and write a hardware profile (default conf/hardware/cpu_local.yaml)
whose `costs:` section holds the fitted models by model name (make_pair picks them up).

Forwards are timed through the backend's own score() (chain drafts: the loop's common case; `--tree` times
tree-masked forwards instead), the median of `--repeats` runs after a warm-up (`--stat min`: the fastest), with
`torch.set_num_threads`. The median, because a decode's wall time is the sum of its forwards' typical times: fitted
to the fastest of 3, this CPU's in-loop forwards ran 10-15% slower than modelled (`python -m simulators check clock`).
Then the LM head's cost per logits row (`measure_head`): a long forward timed scored (logits at every row) and as a
prefill (last row only), so a modelled prefill is charged one row, as the real one computes.

`--weights random` times random-init stock models of the pair's `profile:` shapes (`ModelProfile.hf_config`: exactly
the real parameter count) instead of loading weights: what a forward costs does not depend on the weights' values, so
a pair whose weights are not at hand (Yi-34B/6B, Llama-2-70B/7B) can be measured on the machine it would run on:

    python -m simulators calibrate clock --model yi34b_6b --weights random --device cuda --dtype float16 \
      --attention eager --ks 1,2,4,8,16,32,64,96,128,160,192,256 --ctxs 128,1024 --out conf/hardware/h200_local.yaml

`--device` picks the device (cpu, cuda, cuda:N); the profile's spec fields are then measured there too.

`--records R.jsonl` (repeatable) fits the TARGET's cost model to the loop's own forwards instead: every step of a real
sweep's records is one target forward (k = the tokens it fed, ctx = the prompt plus the tokens committed before it,
seconds = its verify time), grouped by k and ctx (128-token bins) and taken as the groups' medians, each
weighted in the fit by its steps. On a 2-core
Zen 4 the loop's four-token target forwards took 277-308 ms against 245-264 ms timed in isolation, its one-token ones
286-301 against 280-287 ms (docs/results.md): a difference in shape that no timing of isolated forwards can see.
Where the records hold draft forwards (speculative, cascade, Ouroboros) in at least as many (k, ctx) groups as the
fit needs, the DRAFT's model is refitted the same way, roughly: a step's draft time over its draft forwards at k =
its draft tokens spread evenly over them (the proposer's own host time included, as the clock charges none beside
a draft model's forwards); otherwise the draft keeps its isolated fit and a line says so. Both LM-head rows stay
the profile's; nothing is loaded or timed. Knows nothing of strategies.

A shared machine changes speed over minutes: on a 2-core cloud Xeon, vanilla's one-token forwards ran at 177-287 ms
across the rounds of one afternoon's recordings. An interleaved sweep decodes each prompt with every point in turn
(a round), so a round's steps share one state; `--records` scales each round's steps by the median of its one-token
forwards against the median over rounds before grouping (a line gives the spread), so forwards of different widths
recorded in different states do not bend the fitted shape. `--as-measured` fits the steps unscaled.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import yaml

from ouroboros.backends.base import WallClock
from ouroboros.errors import OuroborosError
from ouroboros.loop.draft import Draft
from ouroboros.paths import check_writable
from simulators.architectures import conf_root, load_conf
from simulators.cost_model import MIN_FIT_POINTS, CostModel, FitPoint, FitReport, fit


def time_forward(backend, k: int, repeats: int, tree: bool, rng: random.Random, stat: str = "median") -> float:
    """`stat` (median or min) of `repeats` timings of one forward of k tokens (1 pending + k - 1 draft nodes) over
    the backend's cached tokens; every forward is undone (commit nothing, roll back), so the cache is as it was."""
    v = backend.vocab_size
    times = []
    for _ in range(repeats + 1):
        toks = [rng.randrange(v) for _ in range(k - 1)]
        if tree and k > 2:  # two branches of about equal depth
            d = Draft()
            half = (k - 1) // 2
            d.add_path(toks[:half], -1, merge=False)
            d.add_path(toks[half:], -1, merge=False)
        else:
            d = Draft.chain(toks)
        t0 = backend.clock.now()  # wall clock (synchronises CUDA when the model is on a GPU)
        out = backend.score(d)
        times.append(backend.clock.now() - t0)
        backend.commit([], [out.preds[0]])
        backend.rollback(1)
    return pick(times[1:], stat)  # the first run is a warm-up


def pick(times: list[float], stat: str) -> float:
    """The median (typical forward) or the min (fastest: what the machine can do when nothing else runs)."""
    if stat == "min":
        return min(times)
    if stat == "median":
        return statistics.median(times)
    raise OuroborosError(f"unknown timing statistic {stat!r}: median or min")


def measure(backend, ks: list[int], ctxs: list[int], repeats: int, tree: bool, seed: int = 0, stat: str = "median",
            log=print) -> list[FitPoint]:
    rng = random.Random(seed)
    pts = []
    v = backend.vocab_size
    for ctx in ctxs:
        backend.prefill([rng.randrange(v) for _ in range(ctx + 1)])  # ctx cached + 1 pending, once per ctx
        for k in ks:
            if ctx + k + 1 >= backend.max_context:
                continue
            s = time_forward(backend, k, repeats, tree, rng, stat)
            pts.append(FitPoint(k, ctx, s))
            log(f"  k={k:<4} ctx={ctx:<5} {s * 1e3:9.2f} ms")
    return pts


def measure_batch(backend, batches: list[int], ks: list[int], ctxs: list[int], repeats: int, seed: int = 0,
                  stat: str = "median", log=print) -> list[FitPoint]:
    """Batched forwards (`backends.hf.score_batch`): B rows, each ctx cached tokens + 1 pending + k - 1 chain nodes,
    in ONE forward; `stat` of `repeats` after a warm-up. Every forward is undone per row (cache as it was)."""
    from ouroboros.backends.hf import HFBackend, score_batch

    rng = random.Random(seed + 2)
    v = backend.vocab_size
    pts = []
    for b in batches:
        if b < 2:
            continue
        for ctx in ctxs:
            rows = [HFBackend(backend.model, backend.max_context, backend.name) for _ in range(b)]
            for r in rows:
                r.prefill([rng.randrange(v) for _ in range(ctx + 1)])
            for k in ks:
                if ctx + k + 1 >= backend.max_context:
                    continue
                times = []
                for _ in range(repeats + 1):
                    drafts = [Draft.chain([rng.randrange(v) for _ in range(k - 1)]) for _ in rows]
                    t0 = backend.clock.now()
                    out = score_batch(rows, drafts, [False] * b)
                    times.append(backend.clock.now() - t0)
                    for r, o in zip(rows, out, strict=True):
                        r.commit([], [o.preds[0]])
                        r.rollback(1)
                s = pick(times[1:], stat)
                pts.append(FitPoint(k, ctx, s, batch=b))
                log(f"  B={b:<3} k={k:<4} ctx={ctx:<5} {s * 1e3:9.2f} ms")
    return pts


def measure_head(backend, ks: list[int], repeats: int, seed: int = 0, stat: str = "median", log=print) -> float:
    """Seconds per LM-head row: a forward of k tokens at ctx 0 timed scored (logits at all k rows, as `measure`
    times forwards) and as a prefill (logits at the last row only), `stat` of `repeats` each after a warm-up; the
    difference over k - 1 rows, averaged over the two largest ks >= 8 (0 when there are none)."""
    rng = random.Random(seed + 1)
    v = backend.vocab_size
    big = sorted(k for k in ks if k >= 8 and k + 2 < backend.max_context)[-2:]
    rows = []
    for k in big:
        one = []
        for _ in range(repeats + 1):
            toks = [rng.randrange(v) for _ in range(k + 1)]
            t0 = backend.clock.now()
            backend.prefill(toks)  # k tokens forwarded, logits kept at the last one
            one.append(backend.clock.now() - t0)
        backend.prefill([rng.randrange(v)])  # nothing cached, 1 pending
        s_full, s_one = time_forward(backend, k, repeats, False, rng, stat), pick(one[1:], stat)
        rows.append(max(s_full - s_one, 0.0) / (k - 1))
        log(f"  k={k:<4} ctx=0     all logits {s_full * 1e3:9.2f} ms  last row only {s_one * 1e3:9.2f} ms")
    return sum(rows) / len(rows) if rows else 0.0


def report(name: str, pts: list[FitPoint], cm: CostModel, rep: FitReport) -> str:
    lines = [f"{name}: fitted {cm}",
             f"{name}: fit error mean {rep.mean_abs_rel_err:.1%}, max {rep.max_abs_rel_err:.1%} over {len(pts)} points"]
    for p, e in zip(pts, rep.rel_errs, strict=True):
        lines.append(f"  B={p.batch:<3} k={p.k:<4} ctx={p.ctx:<5} measured {p.seconds * 1e3:9.2f} ms  fitted "
                     f"{cm.batch_forward_s([(p.k, p.ctx, None)] * p.batch) * 1e3:9.2f} ms  ({e:+.1%})")
    return "\n".join(lines)


def machine_figures(device: str = "cpu") -> dict[str, float]:
    """Rough peak figures of the device for the profile's spec fields: memory, copy bandwidth and matmul rate (fp32
    on a CPU; fp16 on a GPU, whose tensor cores the 16-bit forwards use)."""
    import torch

    gpu = device.startswith("cuda")
    dev = torch.device(device)
    now = WallClock(cuda=gpu).now
    n, dt = (256 if gpu else 16) * 1024 * 1024, (torch.float16 if gpu else torch.float32)
    a = torch.ones(n, dtype=dt, device=dev)  # 512 MB on a GPU, 64 MB on a CPU
    b = torch.empty_like(a)
    b.copy_(a)
    t0 = now()
    for _ in range(5):
        b.copy_(a)
    bw = 5 * 2 * a.numel() * a.element_size() / (now() - t0)
    side = 8192 if gpu else 1024
    m = torch.randn(side, side, device=dev).to(dt)
    m @ m
    t0 = now()
    for _ in range(5):
        m @ m
    fl = 5 * 2 * side**3 / (now() - t0)
    mem = (torch.cuda.get_device_properties(dev).total_memory if gpu
           else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return {"mem_gb": round(mem / 1e9, 1), "mem_bw_gb_s": round(bw / 1e9, 1), "tflops": round(fl / 1e12, 4)}


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(torch.device(device))
    return platform.processor() or platform.machine()


RECORD_CTX_BIN = 128   # --records: steps grouped by k and ctx // this
RECORD_MIN_STEPS = 3   # --records: a (k, ctx) group with fewer steps gives no point


def recorded_steps(paths: list[str], why: str) -> Iterator[tuple[str, int, dict[str, Any], tuple[str, str]]]:
    """Every timed step of real sweeps' records as (its point's label, ctx = the prompt plus the tokens committed
    before it, the step, its round = (file, prompt id)), each (point, prompt) once; a missing file or simulated
    points are one line (`why`: what needs real records). A round: an interleaved sweep decodes one prompt with every
    point in turn, so a round's steps ran minutes apart at most, in one state of the machine."""
    from ouroboros.running.sinks import read_lines

    for path in paths:
        if not os.path.isfile(path):
            raise OuroborosError(f"--records {path}: no such file")
    for path in paths:
        lines = read_lines(path)
        sim = sorted({str(r.get("point_id")) for r in lines if r.get("backend") == "sim"})
        if sim:
            raise OuroborosError(f"--records {path}: holds simulated points ({sim[0]}, ...); {why} a real backend's "
                                 "records only")
        label = {str(r["point_id"]): str(r.get("label") or r.get("strategy")) for r in lines if "point_id" in r}
        prompts = [(str(r["of_point"]), r["prompt"]) for r in lines if r.get("kind") == "prompt_result"]
        prompts += [(str(r["point_id"]), pr) for r in lines if "point_id" in r for pr in r.get("prompts") or []]
        seen: set[tuple[str, str]] = set()
        for point, pr in prompts:
            key = (point, str(pr.get("prompt_id")))
            if key in seen or not pr.get("steps"):
                continue
            seen.add(key)
            done = int(pr.get("prompt_len") or 0)
            for st in pr["steps"]:
                yield label.get(point, point), done, st, (path, key[1])
                done += int(st.get("new_tokens") or 0)


def round_scales(paths: list[str]) -> tuple[dict[tuple[str, str], float], str]:
    """Each round's factor to one machine state (module doc): its one-token target forwards' median (vanilla's
    steps, and any other k = 1 step) against the median over rounds, and a line saying how far the rounds spread.
    Rounds with fewer than RECORD_MIN_STEPS one-token forwards keep factor 1 and are counted in the line."""
    ones: dict[tuple[str, str], list[float]] = {}
    rounds: set[tuple[str, str]] = set()
    for _, _, s, rnd in recorded_steps(paths, "the loop's forwards are timed on"):
        rounds.add(rnd)
        if int(s.get("target_tokens") or 0) == 1 and float(s.get("verify_s") or 0.0) > 0:
            ones.setdefault(rnd, []).append(float(s["verify_s"]))
    ref = {r: statistics.median(v) for r, v in ones.items() if len(v) >= RECORD_MIN_STEPS}
    if not ref:
        return {}, "machine state: no round has one-token forwards; the steps are fitted as measured"
    mid = statistics.median(ref.values())
    lo, hi = min(ref.values()), max(ref.values())
    left = len(rounds) - len(ref)
    line = (f"machine state: {len(ref)} rounds (file, prompt) of one-token forwards at {lo * 1e3:.0f}-{hi * 1e3:.0f} "
            f"ms (median {mid * 1e3:.0f}); each round's steps scaled to the median"
            + (f"; {left} round(s) without them kept as measured" if left else ""))
    return {r: mid / v for r, v in ref.items()}, line


def record_points(paths: list[str], side: str = "target",
                  scales: dict[tuple[str, str], float] | None = None) -> tuple[list[FitPoint], int]:
    """The in-loop forwards of real sweeps' records as fit points (module doc): the median seconds per forward of
    each (k, ctx bin) group of at least RECORD_MIN_STEPS steps, and the steps read. `side` "target": a step's one
    verify forward (k = its target tokens); "draft": its draft forwards, rough (k = the step's draft tokens spread
    evenly over them, seconds = its draft time over their count; steps without draft forwards are skipped).
    `scales` (round_scales): each step's seconds times its round's factor (missing: 1)."""
    groups: dict[tuple[int, int], list[float]] = {}
    steps = 0
    for _, done, s, rnd in recorded_steps(paths, "the loop's forwards are timed on"):
        if side == "target":
            k, sec = int(s.get("target_tokens") or 0), float(s.get("verify_s") or 0.0)
        else:
            n, t = int(s.get("draft_forwards") or 0), int(s.get("draft_tokens") or 0)
            if n < 1 or t < 1:
                continue
            k, sec = max(1, round(t / n)), float(s.get("draft_s") or 0.0) / n
        if k >= 1 and sec > 0:
            groups.setdefault((k, done // RECORD_CTX_BIN), []).append(sec * (scales or {}).get(rnd, 1.0))
            steps += 1
    if not steps and side == "target":
        raise OuroborosError(f"--records {', '.join(paths)}: no timed steps (records of a real sweep keep each step's "
                             "target_tokens and verify_s)")
    pts = [FitPoint(k, b * RECORD_CTX_BIN + RECORD_CTX_BIN // 2, statistics.median(v), weight=len(v))
           for (k, b), v in sorted(groups.items()) if len(v) >= RECORD_MIN_STEPS]
    return pts, steps


def fit_records(a) -> int:
    """`--records`: the target's cost model fitted to the loop's forwards, and the draft's where the records hold
    enough draft forwards, written into the hardware profile (module doc)."""
    model = load_conf("model", a.model)
    prof = model.get("profile") or {}
    given = a.names.split(",") if a.names else []
    name = given[0] if given else (prof.get("target") or {}).get("name")
    dname = given[1] if len(given) > 1 else (None if given else (prof.get("draft") or {}).get("name"))
    if not name:
        raise OuroborosError(f"model {a.model!r} has no profile: section; pass --names target[,draft]")
    if not os.path.exists(a.out):
        raise OuroborosError(f"--records refits the pair in an existing profile: no {a.out} (run `python -m "
                             "simulators calibrate clock` first: the LM-head rows come from it)")
    check_writable(a.out, "--out")   # rewritten at the end: a read-only one fails here, before the fit
    with open(a.out, encoding="utf-8") as f:
        doc = yaml.safe_load(f) or {}
    costs = doc.get("costs") or {}
    if costs.get(name) is None:
        raise OuroborosError(f"--records: {a.out} has no cost model for {name} to take its LM-head row from")
    scales, state = round_scales(a.records) if getattr(a, "same_state", True) else ({}, "")
    if state:
        print(state)
    pts, steps = record_points(a.records, scales=scales)
    if len(pts) < MIN_FIT_POINTS:
        raise OuroborosError(f"--records: {len(pts)} (k, ctx) groups of >= {RECORD_MIN_STEPS} steps; the fit needs "
                             f">= {MIN_FIT_POINTS} (record strategies of several widths: sweep=compare)")
    dpts, dsteps = record_points(a.records, "draft", scales) if dname else ([], 0)
    refit = {name: (pts, steps)}
    if dname and costs.get(dname) is not None and len(dpts) >= MIN_FIT_POINTS:
        refit[dname] = (dpts, dsteps)
    for nm, (p, n) in refit.items():
        cm, rep = fit(p, name=nm)
        cm = replace(cm, head_s_per_row=float(costs[nm].get("head_s_per_row") or 0.0))
        print(f"{nm}: {n} timed steps in {len(a.records)} records file(s) -> {len(p)} (k, ctx) points"
              + (" (rough: a step's draft tokens spread evenly over its draft forwards)" if nm == dname else ""))
        print(report(nm, p, cm, rep))
        costs[nm] = cost_entry(cm)
        which = "draft forwards" if nm == dname else "forwards"
        doc["source"] = (str(doc.get("source") or "") + f"; {nm} refitted by calibrate clock --records to the loop's "
                         f"{which} ({n} steps, {len(p)} points; its LM-head row kept)")
    if dname and dname not in refit:
        print(f"{dname}: {dsteps} steps with draft forwards -> {len(dpts)} (k, ctx) points of >= {RECORD_MIN_STEPS} "
              f"steps; its isolated fit stays (a refit needs >= {MIN_FIT_POINTS}: record a draft-model strategy of "
              "several draft widths, e.g. speculative, cascade, ouroboros)")
    doc["costs"] = costs
    if getattr(a, "hardware_name", None):
        doc["name"] = a.hardware_name
    dump_profile(a.out, doc)
    print(f"profile written to {a.out}")
    return 0


def cost_entry(cm: CostModel) -> dict[str, Any]:
    """A fitted cost model as a profile's `costs:` entry (6 significant digits, no name: the key is the name)."""
    d = cm.to_dict()
    d.pop("name")
    return {k: (float(f"{v:.6g}") if isinstance(v, float) else v) for k, v in d.items()}


def dump_profile(path: str, doc: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("# Written by `python -m simulators calibrate clock`: the local device, with cost models fitted to "
                "measured\n# forwards (costs: by model name). Spec fields: rough measurements (copy bandwidth, matmul "
                "rate).\n")
        yaml.safe_dump(doc, f, sort_keys=False)


def write_profile(path: str, name: str, costs: dict[str, CostModel], threads: int, note: str, device: str = "cpu",
                  attention: str = "fused") -> None:
    doc: dict[str, Any] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f) or {}
    figs = machine_figures(device)
    where = f"{device_name(device)}, {device}" + ("" if device.startswith("cuda") else f", {threads} threads")
    doc.update({"name": name, "devices": 1, "placement": "single", "runtime_gb": 1.0, "tile": 1, **figs,
                "attention": attention,
                "source": f"measured on this machine ({where}) by python -m simulators calibrate clock; {note}"})
    doc["costs"] = {**(doc.get("costs") or {}), **{n: cost_entry(cm) for n, cm in costs.items()}}
    dump_profile(path, doc)


def load_backends(model: dict[str, Any], dtype: str, device: str = "cpu"):
    from ouroboros.backends.hf import HFBackend
    from ouroboros.backends.models import load_pair

    pair = load_pair(model, dtype=dtype, device=device)
    out = {"target": HFBackend(pair.target, name="target")}
    if pair.draft is not None:
        out["draft"] = HFBackend(pair.draft, name="draft")
    return out


def free_bytes(device: str) -> int:
    """Memory free on the device now (a GPU's free memory; a CPU's available RAM)."""
    if device.startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    with open("/proc/meminfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def random_backends(model: dict[str, Any], dtype: str, device: str, attention: str | None = None, who: str = "model"):
    """Random-init stock models of the pair's `profile:` shapes on `device` (no weights loaded). Refused with one
    line, before anything is built, when their weights would not fit in the device's free memory."""
    import torch
    from transformers import AutoModelForCausalLM

    from ouroboros.backends.hf import HFBackend
    from ouroboros.backends.models import check_device, parse_dtype
    from simulators.architectures import PairProfile

    pair = PairProfile.from_model_cfg(model)
    check_device(device)
    if device == "auto":
        raise OuroborosError("--weights random times one device: --device cpu, cuda or cuda:N")
    tdt = parse_dtype(dtype)
    need = (pair.target.params + pair.draft.params) * torch.finfo(tdt).bits // 8
    have = free_bytes(device)
    if need > 0.9 * have:
        raise OuroborosError(f"{who}: random {pair.target.name} + {pair.draft.name} weights need {need / 1e9:.3g} GB "
                             f"in {dtype}; {device} has {have / 1e9:.3g} GB free")
    out = {}
    for side, prof in (("target", pair.target), ("draft", pair.draft)):
        torch.manual_seed(0)
        with torch.device(device):
            m = AutoModelForCausalLM.from_config(prof.hf_config(), dtype=tdt,
                                                 **({"attn_implementation": attention} if attention else {}))
        out[side] = HFBackend(m.eval(), name=side)
    return out


def add_args(ap) -> None:
    ap.add_argument("--model", default="qwen_coder", help="conf/model/<name>.yaml (needs a profile: section "
                                                          "naming the models, unless --names is given)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a model loading option as the runs to be modelled set it (repeatable), e.g. "
                         "bf16_upcast_rows=0 for `model.bf16_upcast_rows=0`: the forwards timed are then theirs")
    ap.add_argument("--names", default=None, help="target[,draft] names to store the fits under")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ks", default="1,2,4,8,12,16,24,32,48,64,96,128")
    ap.add_argument("--ctxs", default="32,256,768")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--stat", choices=["median", "min"], default="median",
                    help="per point: the median of the repeats (typical in-loop time) or the fastest")
    ap.add_argument("--tree", action="store_true", help="time tree-masked forwards instead of chains")
    ap.add_argument("--batches", default="1", help="also time batched forwards of B rows (e.g. 1,2,4,8): the batched "
                                                   "cost model (ouroboros/serving/batch.py) is fitted on all points")
    ap.add_argument("--batch-ks", default="1,2,3,5,8", help="k per row of the batched points")
    ap.add_argument("--batch-ctxs", default="128,384", help="ctx per row of the batched points")
    ap.add_argument("--weights", choices=["real", "random"], default="real",
                    help="real: load the pair's weights; random: random-init models of its profile: shapes (no "
                         "download; a forward costs the same)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--attention", choices=["eager", "sdpa"], default=None,
                    help="--weights random: transformers' attention implementation (default: transformers' own)")
    ap.add_argument("--out", default=str(conf_root() / "hardware" / "cpu_local.yaml"))
    ap.add_argument("--hardware-name", default=None,
                    help="the profile's name (default cpu_local; with --records, the profile's own unless given)")
    ap.add_argument("--records", action="append", default=[], metavar="R.jsonl",
                    help="refit the target's model in --out to the loop's own forwards in a real sweep's records "
                         "(repeatable; nothing is timed; module doc)")
    ap.add_argument("--as-measured", dest="same_state", action="store_false",
                    help="--records: fit the steps as measured (default: each prompt round scaled to one machine "
                         "state by its one-token forwards; module doc)")


def main(a) -> int:
    if getattr(a, "records", None):
        return fit_records(a)
    import torch

    if a.threads < 1:
        raise OuroborosError(f"--threads must be >= 1, got {a.threads}")
    torch.set_num_threads(a.threads)
    if a.attention and a.weights != "random":
        raise OuroborosError("--attention is for --weights random (real models keep the attention they load with)")
    model = load_conf("model", a.model)
    for kv in getattr(a, "set", None) or []:
        key, eq, val = kv.partition("=")
        if not eq or not key or key in ("kind", "profile", "sim_profiles") or key not in model:
            raise OuroborosError(f"--set {kv!r}: KEY=VALUE with KEY a loading option of conf/model/{a.model}.yaml "
                                 f"({', '.join(k for k in model if k not in ('kind', 'profile', 'sim_profiles'))})")
        model[key] = yaml.safe_load(val)
    if a.names:
        names = a.names.split(",")
    else:
        prof = model.get("profile") or {}
        if not prof:
            raise OuroborosError(f"model {a.model!r} has no profile: section; pass --names target[,draft]")
        names = [prof["target"]["name"], prof["draft"]["name"]]
    if a.weights == "random" and not model.get("profile"):
        raise OuroborosError(f"--weights random builds the models from a profile: section; model {a.model!r} has none")
    if a.weights == "real" and model.get("kind") == "profile":
        raise OuroborosError(f"model {a.model!r} is a simulator profile (no weights to load): use --weights random")
    try:
        ks = [int(x) for x in a.ks.split(",")]
        ctxs = [int(x) for x in a.ctxs.split(",")]
        batches = [int(x) for x in a.batches.split(",")]
        bks = [int(x) for x in a.batch_ks.split(",")]
        bctxs = [int(x) for x in a.batch_ctxs.split(",")]
    except ValueError as e:
        raise OuroborosError(f"--ks, --ctxs, --batches, --batch-ks and --batch-ctxs take comma-separated integers "
                             f"({e})") from None
    if min(ks + bks) < 1 or min(ctxs + bctxs) < 0 or a.repeats < 1 or min(batches) < 1:
        raise OuroborosError("calibration needs k >= 1, ctx >= 0, batches >= 1 and repeats >= 1")
    n_points = len(set(ks)) * len(set(ctxs)) + sum(b > 1 for b in set(batches)) * len(set(bks)) * len(set(bctxs))
    if n_points < MIN_FIT_POINTS:
        raise OuroborosError(f"--ks x --ctxs (+ batched points) give {n_points} points; the cost model's fit needs "
                             f">= {MIN_FIT_POINTS}")
    check_writable(a.out, "--out")   # before any model loads or forward is timed
    if a.weights == "random":
        backends = random_backends(model, a.dtype, a.device, a.attention, who=f"model {a.model!r}")
    else:
        backends = load_backends(model, a.dtype, a.device)
    costs = {}
    for (side, be), nm in zip(backends.items(), names, strict=False):
        print(f"timing {side} ({nm}), {a.dtype}, {a.weights} weights on {a.device}"
              + ("" if a.device.startswith("cuda") else f", {a.threads} threads"))
        pts = measure(be, ks, ctxs, a.repeats, a.tree, stat=a.stat)
        pts += measure_batch(be, batches, bks, bctxs, a.repeats, stat=a.stat)
        cm, rep = fit(pts, name=nm)
        cm = replace(cm, head_s_per_row=measure_head(be, ks, a.repeats, stat=a.stat))
        print(report(nm, pts, cm, rep))
        print(f"{nm}: LM head {cm.head_s_per_row * 1e3:.3f} ms per logits row (a prefill keeps one row)")
        costs[nm] = cm
    write_profile(a.out, a.hardware_name or "cpu_local", costs, a.threads,
                  f"{a.dtype}, {a.weights} weights" + (f", {a.attention} attention" if a.attention else "")
                  + "".join(f", model.{kv}" for kv in getattr(a, "set", None) or [])
                  + f", {'tree' if a.tree else 'chain'} forwards, ks {a.ks}, ctxs {a.ctxs}, "
                  + (f"batches {a.batches} (ks {a.batch_ks}, ctxs {a.batch_ctxs}), " if max(batches) > 1 else "")
                  + f"{a.stat} of {a.repeats}", device=a.device,
                  attention="eager" if a.attention == "eager" else "fused")
    print(f"profile written to {a.out}")
    return 0
