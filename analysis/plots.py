"""Figures from records (matplotlib, Agg backend): speedup-vs-parameter curves, per-sweep speedup bars, speedup
and latency under load, and the phrase pool over a run. Each function takes records and returns figures; report.py
saves them, one at a time (`iter_figures`), closing each once saved.

Every title names the clock (modelled / wall); a wall-clock one says how many prompts and tokens a point stands on,
a simulated one where its decisions come from. A simulated point shows its measured error band (error bars, bars'
whiskers; a point whose band was never measured, '?': a hollow marker or a hatched bar, and a legend or title note).

A curve series is the set of records that share everything but the swept parameter (strategy, model, dataset,
backend, hardware, the other params); parameters that vary across series name them in the legend. Knows
nothing of models; never re-measures.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from ouroboros.loop.metrics import pool_rates  # noqa: E402
from ouroboros.paths import slug  # noqa: E402
from ouroboros.running.record import Record  # noqa: E402

# swept parameter -> axis label (paper names); "max_new_tokens" is a run-level key, the rest strategy params
CURVE_PARAMS = {"gamma": "draft length γ", "K": "candidate suffixes K", "W": "lookahead window W",
                "N": "n-gram level N (β)", "max_new_tokens": "generation length l (tokens)"}
MAX_SERIES = 12
MAX_SHADED = 3
MAX_POOL_FIGURES = 8


def _x(rec: Record, param: str) -> Any:
    if param == "max_new_tokens":
        return rec.config["max_new_tokens"]
    return rec.params.get(param)


def _describe(d: dict[str, Any]) -> str:
    """A model or dataset config in a few words: its name and its scalar settings (sections such as a model's
    `profile` or `sim_profiles` are identity, not settings: never dumped into a legend)."""
    name = str(d.get("name") or d.get("kind") or "?")
    rest = ",".join(f"{k}={v}" for k, v in sorted(d.items()) if k not in ("name", "kind", "profile", "path")
                    and v is not None and not isinstance(v, (dict, list)))
    return f"{name}({rest})" if rest else name


def sampling_of(rec: Record) -> str:
    """'greedy' or 'T=0.7 top_p=0.8' (what a record's outputs were drawn with)."""
    sp = rec.config.get("sampling") or {}
    if not sp.get("temperature"):
        return "greedy"
    return " ".join([f"T={sp['temperature']:g}"] + ([f"top_p={sp['top_p']:g}"] if sp.get("top_p", 1) < 1 else [])
                    + ([f"top_k={sp['top_k']}"] if sp.get("top_k") else []))


def comparable(rec: Record) -> tuple[str, ...]:
    """What must be equal for two records' speedups to share a figure: the model pair, the clock (backend), the
    hardware, the dataset and the sampling settings."""
    c = rec.config
    hw = ((c.get("hardware") or {}).get("name") if rec.backend == "sim" else (rec.hardware or {}).get("cpu")
          or "this machine")
    return (rec.model_name, rec.clock, str(hw), _describe(c["dataset"]), sampling_of(rec))


def group_name(key: tuple[str, ...], keys: list[tuple[str, ...]]) -> str:
    """A short figure-name suffix telling `key`'s group from the others: the parts that differ (a dataset by its
    name alone, sampling as 'sampled'), plus a 4-hex digest of the whole key when those do not tell it apart."""
    def short(i: int, v: str) -> str:
        return v.split("(")[0] if i == 3 else ("sampled" if i == 4 and v != "greedy" else v)

    def name(k: tuple[str, ...]) -> str:
        return "_".join(short(i, v) for i, v in enumerate(k) if len({o[i] for o in keys}) > 1)

    mine = name(key)
    if sum(name(k) == mine for k in keys) > 1:
        mine += "_" + hashlib.sha1(repr(key).encode()).hexdigest()[:4]
    return slug(mine)


def _context(rec: Record, param: str, tied: set[str]) -> dict[str, Any]:
    """Everything a series shares (all but `param` and the params `tied` to it, e.g. G = W)."""
    c = rec.config
    ctx = {"strategy": rec.strategy, "model": _describe(c["model"]), "dataset": _describe(c["dataset"]),
           "backend": rec.backend, "hardware": (c.get("hardware") or {}).get("name") if rec.backend == "sim" else None}
    if param != "max_new_tokens":
        ctx["max_new_tokens"] = c["max_new_tokens"]
    if rec.serving:   # served points (serve.concurrency) are their own series
        ctx["concurrency"] = rec.serving["concurrency"]
        ctx["load_aware"] = (c.get("serve") or {}).get("load_aware") or None
    ctx.update({k: v for k, v in rec.params.items() if k != param and k not in tied})
    return ctx


def _varying(ctxs: Sequence[dict[str, Any]]) -> set[str]:
    keys = set().union(*(c.keys() for c in ctxs)) if ctxs else set()
    return {k for k in keys if len({json.dumps(c.get(k), default=str) for c in ctxs}) > 1}


def _curve_records(records: Sequence[Record], param: str) -> dict[str, list[Record]]:
    """`curve_series` with each point's record (one per distinct (x, speedup), sorted by x)."""
    pts = [r for r in records if _x(r, param) is not None and r.speedup is not None
           and r.strategy != (r.config.get("baseline") or "")]
    names = {k for r in pts for k in r.params}
    tied = {k for k in names if k != param and all(r.params.get(k) == _x(r, param) for r in pts)}
    groups: dict[str, list[Record]] = {}
    ctxs: dict[str, dict[str, Any]] = {}
    for r in pts:
        ctx = _context(r, param, tied)
        key = json.dumps(ctx, sort_keys=True, default=str)
        groups.setdefault(key, []).append(r)
        ctxs[key] = ctx
    kept = {k: sorted({(_x(r, param), r.speedup or 0.0): r for r in reversed(rs)}.items(), key=lambda t: t[0])
            for k, rs in groups.items()}
    kept = {k: xs for k, xs in kept.items() if len({x for (x, _), _ in xs}) >= 2}
    drawn = [ctxs[k] for k in kept]
    shared = _varying([{k: v for k, v in c.items() if k in ("model", "dataset", "backend", "hardware",
                                                            "max_new_tokens")} for c in drawn])
    out = {}
    for key, xs in kept.items():
        ctx = ctxs[key]
        own = _varying([c for c in drawn if c["strategy"] == ctx["strategy"]]) | shared
        out[" ".join([str(ctx["strategy"])] + [f"{k}={ctx[k]}" for k in sorted(own - {"strategy"})
                                                if ctx.get(k) is not None])] = [r for _, r in xs]
    return out


def curve_series(records: Sequence[Record], param: str) -> dict[str, list[tuple[Any, float]]]:
    """{series label: [(x, speedup), ...] sorted by x} for series with >= 2 distinct x values. A series' label is
    its strategy plus what tells it apart from the other series of that strategy (and of the other contexts)."""
    return {k: [(_x(r, param), r.speedup or 0.0) for r in rs] for k, rs in _curve_records(records, param).items()}


def _where(records: Sequence[Record]) -> str:
    """"model on hardware" when every record shares them (else empty)."""
    models = {r.model_name for r in records}
    hws = {str((r.config.get("hardware") or {}).get("name")) if r.backend == "sim" else "this machine"
           for r in records}
    return f"\n{models.pop()} on {hws.pop()}" if len(models) == 1 and len(hws) == 1 else ""


def _clock(records: Sequence[Record]) -> str:
    """'modelled' when every record ran on the simulator's clock, else 'wall'."""
    return "modelled" if records and all(r.backend == "sim" for r in records) else "wall"


def _span(values: Sequence[int], unit: str) -> str:
    """'4 tokens', '1 prompt', '2-4 prompts'."""
    lo, hi = min(values), max(values)
    return f"{lo} {unit}" if lo == hi == 1 else f"{lo} {unit}s" if lo == hi else f"{lo}-{hi} {unit}s"


def _support(records: Sequence[Record]) -> str:
    """'; N prompts, M tokens' (per point: a range where they differ) for wall-clock records: what a measured
    figure stands on. Empty for simulated ones."""
    wall = [r for r in records if r.backend != "sim"]
    if not wall:
        return ""
    prompts = [int(r.totals.get("prompts") or len(r.prompts)) for r in wall]
    tokens = [int(r.totals.get("new_tokens") or 0) for r in wall]
    return f"; {_span(prompts, 'prompt')}, {_span(tokens, 'token')} per point"


def _floored(records: Sequence[Record]) -> str:
    """' (at least ...)' where a simulated point's band was widened to its few prompts' real spread, else ''."""
    ns = sorted({f["prompts"] for r in records if (f := ((r.decisions or {}).get("band") or {}).get("prompt_floor"))})
    return f" (at least the real spread of {'/'.join(map(str, ns))} prompt(s))" if ns else ""


def unmeasured(rec: Record, metric: str = "speedup") -> bool:
    """A simulated point whose error band of `metric` was never measured (its band reads '?')."""
    return rec.decisions is not None and rec.band(metric) is None


def _sources(records: Sequence[Record], bars: str = "bars", metric: str = "speedup", missing: str = "hatched",
             of: str = "") -> str:
    """A title line naming where simulated points' decisions come from and what their `bars` are: the 80% measured
    error band of `metric` (`of` names it; its range over the points but the baseline's own) and how a point
    without one is drawn (`missing`)."""
    labels = list(dict.fromkeys((r.decisions or {}).get("label") for r in records if r.decisions))
    if not labels:
        return ""
    widths = sorted({b for r in records if (b := r.band(metric)) is not None
                     and not (metric == "speedup" and r.strategy == r.config.get("baseline"))})
    parts = []
    if any(r.band(metric) is not None for r in records):
        lo, hi = (widths[0], widths[-1]) if widths else (0.0, 0.0)
        parts.append(f"{bars}: {of}80% measured error band"
                     f"{f' (±{lo:.0%}' + ('' if lo == hi else f'-{hi:.0%}') + ')' if widths else ''}"
                     f"{_floored(records)}")
    if any(unmeasured(r, metric) for r in records):
        parts.append(f"{missing}: no measured band (±?)")
    src = labels[0] if len(labels) == 1 else "mixed (" + "; ".join(map(str, labels)) + ")"
    return f"\ndecisions: {src}" + "".join(f"; {p}" for p in parts)


def _dodged(xs: Sequence[Any], i: int, n: int, span: tuple[float, float], log: bool = False) -> list[float]:
    """Series i of n moved a little sideways (at most 3% of the x range `span` across all n), so that equal
    points' error bars stay apart; on a log axis by a factor."""
    lo, hi = span
    width = (math.log2(hi / lo) if log else hi - lo) or 1.0
    step = (i - (n - 1) / 2) * min(0.01, 0.03 / max(n - 1, 1)) * width
    return [x * 2 ** step if log else x + step for x in xs]


def _banded(ax: Any, xs: Sequence[Any], ys: Sequence[float], recs: Sequence[Record], metric: str, axis: str = "y",
            **kw: Any) -> Any:
    """A series with each point's measured error band of `metric` as an error bar along `axis` (relative to the
    point's value, never below 0); a simulated point without a measured band gets a hollow marker. Returns the
    series' line."""
    bands = [r.band(metric) for r in recs]
    vals = ys if axis == "y" else xs
    lo = [min(v * b, v) if b is not None else 0.0 for v, b in zip(vals, bands, strict=True)]
    hi = [v * b if b is not None else 0.0 for v, b in zip(vals, bands, strict=True)]
    err = [lo, hi] if any(b is not None for b in bands) else None
    cont = ax.errorbar(xs, ys, **{f"{axis}err": err}, marker="o", capsize=2.5, elinewidth=0.9, **kw)
    line = cont.lines[0]
    hollow = [(x, y) for x, y, r in zip(xs, ys, recs, strict=True) if unmeasured(r, metric)]
    if hollow:
        ax.plot([x for x, _ in hollow], [y for _, y in hollow], ls="none", marker="o", mfc="white",
                mec=line.get_color(), zorder=line.get_zorder() + 0.1)
    return line


def _hollow_note(ax: Any, recs: Sequence[Record], metric: str) -> None:
    """A legend entry for the hollow markers, when a drawn point has no measured band."""
    if any(unmeasured(r, metric) for r in recs):
        ax.plot([], [], ls="none", marker="o", mfc="white", mec="grey", label="hollow: no measured band (±?)")


def speedup_curve(records: Sequence[Record], param: str) -> Figure | None:
    series = _curve_records(records, param)
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    shade = len(series) <= MAX_SHADED   # more shaded bands than that only hide each other: error bars alone
    drawn = list(series.items())[:MAX_SERIES]
    pts = [r for _, rs in drawn for r in rs]
    every = [float(_x(r, param)) for r in pts]
    dodge = len(drawn) > 1 and any(r.band() is not None for r in pts)   # error bars to keep apart
    for i, (label, rs) in enumerate(drawn):
        xs, ys = [_x(r, param) for r in rs], [r.speedup or 0.0 for r in rs]
        line = _banded(ax, _dodged(xs, i, len(drawn), (min(every), max(every))) if dodge else xs, ys, rs, "speedup",
                       label=label)
        bs = [r.band() for r in rs]
        if shade and any(b is not None for b in bs):   # the measured error band of these simulated points, shaded
            ax.fill_between(xs, [max(0.0, y * (1 - (b or 0.0))) for y, b in zip(ys, bs, strict=True)],
                            [y * (1 + (b or 0.0)) for y, b in zip(ys, bs, strict=True)],
                            where=[b is not None for b in bs], color=line.get_color(), alpha=0.15, lw=0)
    _hollow_note(ax, pts, "speedup")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--", label="baseline (1.0x)")
    ax.set_xlabel(CURVE_PARAMS[param])
    ax.set_ylabel("speedup over vanilla (x)")
    ax.set_title(f"Speedup vs {CURVE_PARAMS[param]} ({_clock(pts)} time{_support(pts)}){_where(pts)}"
                 f"{_sources(pts, 'error bars' + (' and shading' if shade else ''), missing='hollow')}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    if len(series) > MAX_SERIES:
        ax.text(0.01, 0.01, f"{len(series) - MAX_SERIES} more series not drawn", transform=ax.transAxes, fontsize=7)
    return fig


MAX_BARS = 20


def _bar_points(recs: list[Record]) -> tuple[list[Record], str]:
    """The bars a sweep's figure shows and a title line on what it leaves out. A served (load) sweep shows every
    point: its slow points are where speculation stops paying. Another sweep of more than MAX_BARS points keeps
    every point at or below 1.0x (the baselines too) and the slowest speculating one, then the fastest up to
    MAX_BARS, in the sweep's order."""
    if len(recs) <= MAX_BARS or any(r.serving for r in recs):
        return recs, ""
    speed = {id(r): r.speedup or 0.0 for r in recs}
    by_speed = sorted(recs, key=lambda r: speed[id(r)])
    slowest = next((r for r in by_speed if r.strategy != r.config.get("baseline")), by_speed[0])
    keep = {id(r) for r in recs if speed[id(r)] <= 1.0} | {id(slowest), id(by_speed[-1])}
    for r in reversed(by_speed):
        if len(keep) >= MAX_BARS:
            break
        keep.add(id(r))
    left = [speed[id(r)] for r in recs if id(r) not in keep]
    below = sum(speed[id(r)] <= 1.0 for r in recs)
    why = f"every one at or below 1.0x ({below}), " if below else ""
    if not left:
        return recs, ""
    return [r for r in recs if id(r) in keep], (
        f"\n{len(recs) - len(left)} of {len(recs)} points: {why}the slowest speculating one and the fastest; "
        f"left out: {len(left)} at {min(left):.2f}x-{max(left):.2f}x")


def speedup_bars(records: Sequence[Record], title: str) -> Figure | None:
    recs = [r for r in records if r.speedup is not None]
    if len(recs) < 2:
        return None
    served = any(r.serving for r in recs)
    if served:   # grouped by concurrency (in the sweep's order within a group)
        recs = sorted(recs, key=lambda r: (r.serving or {}).get("concurrency", 0))
    recs, note = _bar_points(recs)
    conc = [(r.serving or {}).get("concurrency") for r in recs]
    xs, x = [], 0.0
    for i, c in enumerate(conc):   # a gap between two concurrencies' groups
        x += 0.0 if i == 0 else 1.0 + (0.6 if served and c != conc[i - 1] else 0.0)
        xs.append(x)
    per_bar = 0.55 if len(recs) > MAX_BARS else 0.9
    fig, ax = plt.subplots(figsize=(max(5.0, per_bar * (xs[-1] + 1) + 1.5), 4.2))
    labels = [r.label for r in recs]
    vals = [r.speedup or 0.0 for r in recs]
    bs = [r.band() for r in recs]
    err = [v * b if b is not None else 0.0 for v, b in zip(vals, bs, strict=True)]
    bars = ax.bar(xs, vals, yerr=err if any(err) else None, capsize=3, ecolor="#444444",
                  color=["#999999" if r.strategy == r.config.get("baseline") else "#3b75af" for r in recs])
    for b, v, e, bb, r in zip(bars, vals, err, bs, recs, strict=True):
        unknown = unmeasured(r)   # simulated, error never measured: hatched
        if unknown:
            b.set_hatch("//")
            b.set_alpha(0.6)
        tag = f"{v:.2f}x" + (f"\n±{bb:.0%}" if bb else "\n±?" if unknown else "")
        ax.annotate(tag, (b.get_x() + b.get_width() / 2, v + e), ha="center", va="bottom", fontsize=7)
    top = max(v + e for v, e in zip(vals, err, strict=True))
    ax.set_ylim(0, top * (1.3 if served else 1.15))
    if served:   # each concurrency's group named above it, dotted lines between groups
        for c in dict.fromkeys(conc):
            at = [x for x, cc in zip(xs, conc, strict=True) if cc == c]
            ax.text((at[0] + at[-1]) / 2, top * 1.27, f"C={c}", ha="center", va="top", fontsize=8)
            if at[0] > xs[0]:
                ax.axvline(at[0] - 0.8, color="grey", lw=0.6, ls=":")
    ax.set_xticks(xs, labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speedup over vanilla (x)")
    ax.set_title(f"{title} ({_clock(recs)} time, {sampling_of(recs[0])}{_support(recs)})" + _where(recs)
                 + _sources(recs) + note, fontsize=9)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.grid(axis="y", alpha=0.3)
    return fig


def pool_over_run(rec: Record) -> Figure | None:
    """Phrase-pool size (left axis) and per-prompt hit rates (right axis) over the prompts of one run."""
    stats = [p.get("proposer_stats", {}) for p in rec.prompts]
    if not any("pool_phrases" in s for s in stats):
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    idx = list(range(1, len(stats) + 1))
    ax.plot(idx, [s.get("pool_phrases", 0) for s in stats], color="#3b75af", marker=".", label="pool phrases")
    ax.set_xlabel("prompt (order of the run)")
    ax.set_ylabel("phrases in the pool (end of prompt)")
    ax2 = ax.twinx()
    rates = [pool_rates(s) for s in stats]
    keys = sorted({k for r in rates for k in r if k.endswith("hit_rate")})
    for k, color in zip(keys, ("#d1603d", "#5a9e4b", "#8e6bb8", "#c9a227"), strict=False):
        ax2.plot(idx, [r.get(k, float("nan")) for r in rates], color=color, ls="--", marker="x", label=k)
    ax2.set_ylabel("hit rate (lookups with >= 1 phrase)")
    ax2.set_ylim(0, 1.05)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="lower right")
    ax.set_title(f"Phrase pool over the run: {rec.label}")
    ax.grid(alpha=0.3)
    return fig


def _load_key(rec: Record) -> str:
    """What a load curve shares: strategy + params, load-aware or not, model, dataset, hardware, open-loop rate."""
    c = rec.config
    sv = c.get("serve") or {}
    la = " load-aware" if sv.get("load_aware") and rec.strategy != "vanilla" else ""
    params = ",".join(f"{k}={v}" for k, v in sorted((rec.params or {}).items())
                      if k in ("gamma", "W", "N", "G", "K", "num_pred_tokens"))
    return json.dumps([rec.strategy + (f"({params})" if params else "") + la, _describe(c["model"]),
                       _describe(c["dataset"]), (c.get("hardware") or {}).get("name"), sv.get("rate"),
                       c["max_new_tokens"]], default=str)


def _concurrency(rec: Record) -> int:
    return (rec.serving or {})["concurrency"]


def load_series(records: Sequence[Record]) -> dict[str, list[Record]]:
    """{label: served records sorted by concurrency} for series with >= 2 concurrencies."""
    groups: dict[str, list[Record]] = {}
    for r in records:
        if r.serving:
            groups.setdefault(_load_key(r), []).append(r)
    out = {}
    for key, rs in groups.items():
        rs = sorted({_concurrency(r): r for r in rs}.values(), key=_concurrency)
        if len(rs) >= 2:
            out[json.loads(key)[0]] = rs
    return out


def speedup_vs_concurrency(records: Sequence[Record]) -> Figure | None:
    """Speedup over vanilla at the same load (throughput ratio) against concurrency: where speculation stops
    paying (below the 1.0 line)."""
    series = {k: v for k, v in load_series(records).items() if not k.startswith("vanilla")
              and all(r.speedup is not None for r in v)}
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.set_xscale("log", base=2)
    drawn = list(series.items())[:MAX_SERIES]
    every = [_concurrency(r) for _, rs in drawn for r in rs]
    dodge = any(r.band() is not None for _, rs in drawn for r in rs)   # error bars to keep apart
    for i, (label, rs) in enumerate(drawn):
        xs: list[float] = [_concurrency(r) for r in rs]
        xs = _dodged(xs, i, len(drawn), (min(every), max(every)), log=True) if dodge else xs
        _banded(ax, xs, [r.speedup or 0.0 for r in rs], rs, "speedup", label=label,
                ls="--" if "load-aware" in label else "-")
    flat = [r for _, rs in drawn for r in rs]
    _hollow_note(ax, flat, "speedup")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--", label="vanilla at the same load")
    ax.set_xlabel("concurrency (requests decoding at once)")
    ax.set_ylabel("throughput speedup over vanilla (x)")
    ax.set_title(f"Speculation under load ({_clock(flat)} time{_support(flat)}){_where(flat)}"
                 f"{_sources(flat, 'error bars', missing='hollow')}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


# where a point's label may go, tried in order: (dx, dy) in points, horizontal and vertical alignment
_LABEL_SPOTS = ((4, 4, "left", "bottom"), (4, -4, "left", "top"), (-4, 4, "right", "bottom"),
                (-4, -4, "right", "top"), (0, 8, "center", "bottom"), (0, -8, "center", "top"))


def _label_points(ax: Any, points: Sequence[tuple[float, float, str, Any]],
                  markers: Sequence[tuple[float, float]] = ()) -> int:
    """Label each (x, y, text, color) at the first spot (`_LABEL_SPOTS`) where it overlaps no label placed before
    and no marker (`markers`: every drawn point); a label that repeats one already at the same spot, or fits
    nowhere, is left out. Returns how many were left out. Call it once the axes' limits are final (places are
    measured in pixels)."""
    ax.autoscale_view()
    renderer = ax.figure.canvas.get_renderer()
    r = 4 * ax.figure.dpi / 72   # a marker's half-width (markersize 6 points, plus a margin)
    placed = [Bbox.from_extents(px - r, py - r, px + r, py + r)
              for px, py in (ax.transData.transform(m) for m in markers)]
    seen: set[tuple[str, int, int]] = set()
    skipped = 0
    for x, y, text, color in points:
        px, py = ax.transData.transform((x, y))
        here = (text, round(px / 3), round(py / 3))
        if here in seen:
            continue
        for dx, dy, ha, va in _LABEL_SPOTS:
            note = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va, fontsize=6,
                               color=color)
            box = note.get_window_extent(renderer)
            if not any(box.overlaps(p) for p in placed):
                placed.append(box)
                seen.add(here)
                break
            note.remove()
        else:
            skipped += 1
    return skipped


def latency_throughput(records: Sequence[Record]) -> Figure | None:
    """p50 request latency against system throughput, one curve per strategy (points: concurrency levels; the
    ends of each curve labelled with their concurrency)."""
    series = load_series(records)
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ends, markers = [], []
    drawn = list(series.items())[:MAX_SERIES]
    for label, rs in drawn:
        xs = [r.rate for r in rs]   # served: the throughput
        ys = [(r.serving or {})["latency_s_p50"] for r in rs]
        line = _banded(ax, xs, ys, rs, "tokens_per_s", axis="x", label=label,
                       ls="--" if "load-aware" in label else "-")
        ends += [(xs[i], ys[i], f"C={_concurrency(rs[i])}", line.get_color()) for i in (0, -1)]
        markers += list(zip(xs, ys, strict=True))
    flat = [r for _, rs in drawn for r in rs]
    _hollow_note(ax, flat, "tokens_per_s")
    ax.set_xlabel("throughput (tokens / s)")
    ax.set_ylabel("request latency p50 (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    skipped = _label_points(ax, ends, markers)
    src = _sources(flat, "horizontal bars", metric="tokens_per_s", missing="hollow", of="throughput's ")
    ax.set_title(f"Latency vs throughput ({_clock(flat)} time{_support(flat)}; labels: concurrency at each curve's "
                 f"ends{f', {skipped} left out where others sit' if skipped else ''}){_where(flat)}{src}"
                 f"{'; latency: no band measured' if src else ''}", fontsize=9)
    return fig


def iter_figures(records: Sequence[Record]) -> Iterator[tuple[str, Figure]]:
    """Every figure as (name, figure), one at a time (close each once saved: a report never holds them all open),
    one set per group of comparable records (`comparable`): unlike runs never share a figure; a figure's name ends
    with what sets its group apart when there are several."""
    groups: dict[tuple[str, ...], list[Record]] = {}
    for r in records:
        groups.setdefault(comparable(r), []).append(r)
    keys = list(groups)
    for key, recs in groups.items():
        tag = ("_" + group_name(key, keys)) if len(keys) > 1 else ""
        points = list({r.point_id: r for r in recs}.values())  # curves and pool figures: each point once
        for param in CURVE_PARAMS:
            fig = speedup_curve(points, param)
            if fig is not None:
                yield f"speedup_vs_{param}{tag}", fig
        for name, fn in (("speedup_vs_concurrency", speedup_vs_concurrency), ("latency_vs_throughput",
                                                                              latency_throughput)):
            fig = fn(points)
            if fig is not None:
                yield f"{name}{tag}", fig
        by_sweep: dict[str, list[Record]] = {}
        for r in recs:
            by_sweep.setdefault(r.sweep or "run", []).append(r)
        for name, rs in by_sweep.items():
            fig = speedup_bars(rs, f"Speedup per point: sweep '{name}'")
            if fig is not None:
                yield f"bars_{slug(name)}{tag}", fig
    pools = 0
    for r in {r.point_id: r for r in records}.values():
        if pools >= MAX_POOL_FIGURES:
            break
        fig = pool_over_run(r)
        if fig is not None:
            pools += 1
            yield f"pool_{slug(r.label)}_{r.point_id[:6]}", fig


def all_figures(records: Sequence[Record]) -> dict[str, Figure]:
    """`iter_figures` as {name: figure}: every one open at once (the caller closes them)."""
    return dict(iter_figures(records))


def close(fig: Figure) -> None:
    plt.close(fig)
