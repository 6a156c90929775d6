"""Figures from records (matplotlib, Agg backend): speedup-vs-parameter curves, per-sweep speedup bars, and the
phrase pool over a run. Each function takes records and returns figures; report.py saves them.

A curve series is the set of records that share everything but the swept parameter (strategy, model, dataset,
backend, hardware, the other params); parameters that vary across series name them in the legend. Knows
nothing of models; never re-measures.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from ouroboros.metrics import pool_rates  # noqa: E402
from ouroboros.record import Record  # noqa: E402

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


def curve_series(records: Sequence[Record], param: str) -> dict[str, list[tuple[Any, float]]]:
    """{series label: [(x, speedup), ...] sorted by x} for series with >= 2 distinct x values. A series' label is
    its strategy plus what tells it apart from the other series of that strategy (and of the other contexts)."""
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
    kept = {k: sorted({(_x(r, param), r.speedup or 0.0) for r in rs}, key=lambda t: t[0]) for k, rs in groups.items()}
    kept = {k: xs for k, xs in kept.items() if len({x for x, _ in xs}) >= 2}
    drawn = [ctxs[k] for k in kept]
    shared = _varying([{k: v for k, v in c.items() if k in ("model", "dataset", "backend", "hardware",
                                                            "max_new_tokens")} for c in drawn])
    out = {}
    for key, xs in kept.items():
        ctx = ctxs[key]
        own = _varying([c for c in drawn if c["strategy"] == ctx["strategy"]]) | shared
        out[" ".join([str(ctx["strategy"])] + [f"{k}={ctx[k]}" for k in sorted(own - {"strategy"})
                                                if ctx.get(k) is not None])] = xs
    return out


def _where(records: Sequence[Record]) -> str:
    """"model on hardware" when every record shares them (else empty)."""
    models = {r.model_name for r in records}
    hws = {str((r.config.get("hardware") or {}).get("name")) if r.backend == "sim" else "this machine"
           for r in records}
    return f"\n{models.pop()} on {hws.pop()}" if len(models) == 1 and len(hws) == 1 else ""


def _floored(records: Sequence[Record]) -> str:
    """' (at least ...)' where a simulated point's band was widened to its few prompts' real spread, else ''."""
    ns = sorted({f["prompts"] for r in records if (f := ((r.decisions or {}).get("band") or {}).get("prompt_floor"))})
    return f" (at least the real spread of {'/'.join(map(str, ns))} prompt(s))" if ns else ""


def _sources(records: Sequence[Record]) -> str:
    """A title line naming where simulated points' decisions come from and what their error bars are."""
    labels = list(dict.fromkeys((r.decisions or {}).get("label") for r in records if r.decisions))
    if not labels:
        return ""
    return (f"\ndecisions: {labels[0] if len(labels) == 1 else 'mixed (' + '; '.join(map(str, labels)) + ')'}; "
            f"bars: 80% measured error band{_floored(records)}, hatched: unmeasured")


def speedup_curve(records: Sequence[Record], param: str) -> Figure | None:
    series = curve_series(records, param)
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    bands = {(r.strategy, _x(r, param), r.speedup): r.band() for r in records if _x(r, param) is not None}
    shade = len(series) <= MAX_SHADED   # more shaded bands than that only hide each other: the title gives them
    for label, xs in list(series.items())[:MAX_SERIES]:
        line, = ax.plot([x for x, _ in xs], [y for _, y in xs], marker="o", label=label)
        bs = [b for x, y in xs if (b := bands.get((label.split(" ")[0], x, y))) is not None]
        if shade and len(bs) == len(xs):   # the measured error band of these simulated points, shaded
            ax.fill_between([x for x, _ in xs], [y * (1 - b) for (_, y), b in zip(xs, bs, strict=True)],
                            [y * (1 + b) for (_, y), b in zip(xs, bs, strict=True)], color=line.get_color(),
                            alpha=0.15, lw=0)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--", label="baseline (1.0x)")
    ax.set_xlabel(CURVE_PARAMS[param])
    ax.set_ylabel("speedup over vanilla (x)")
    drawn = [r for r in records if _x(r, param) is not None]
    clocks = {r.backend for r in drawn}
    src = _sources(drawn).split("; bars:")[0]
    widths = sorted({b for r in drawn if (b := r.band()) is not None})
    if src and widths:
        lo, hi = widths[0], widths[-1]
        src += ("; shaded: 80% measured error band" if shade else f"; every point ±{lo:.0%}" if lo == hi
                else f"; points ±{lo:.0%}-{hi:.0%}")
        src += _floored(drawn)
    ax.set_title(f"Speedup vs {CURVE_PARAMS[param]} ({'modelled' if clocks == {'sim'} else 'wall'} time)"
                 f"{_where(drawn)}{src}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    if len(series) > MAX_SERIES:
        ax.text(0.01, 0.01, f"{len(series) - MAX_SERIES} more series not drawn", transform=ax.transAxes, fontsize=7)
    return fig


MAX_BARS = 20


def speedup_bars(records: Sequence[Record], title: str) -> Figure | None:
    recs = [r for r in records if r.speedup is not None]
    if len(recs) < 2:
        return None
    left = 0
    if len(recs) > MAX_BARS:   # a large sweep: its fastest points, in their order, and how many more there are
        top = {id(r) for r in sorted(recs, key=lambda r: -(r.speedup or 0.0))[:MAX_BARS]}
        left, recs = len(recs) - MAX_BARS, [r for r in recs if id(r) in top]
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(recs) + 1.5), 4.2))
    labels = [r.label for r in recs]
    vals = [r.speedup or 0.0 for r in recs]
    bs = [r.band() for r in recs]
    err = [v * b if b is not None else 0.0 for v, b in zip(vals, bs, strict=True)]
    bars = ax.bar(range(len(recs)), vals, yerr=err if any(err) else None, capsize=3, ecolor="#444444",
                  color=["#999999" if r.strategy == r.config.get("baseline") else "#3b75af" for r in recs])
    for b, v, e, bb, r in zip(bars, vals, err, bs, recs, strict=True):
        unknown = r.decisions and bb is None   # simulated, error never measured: hatched
        if unknown:
            b.set_hatch("//")
            b.set_alpha(0.6)
        tag = f"{v:.2f}x" + (f"\n±{bb:.0%}" if bb else "\n±?" if unknown else "")
        ax.annotate(tag, (b.get_x() + b.get_width() / 2, v + e), ha="center", va="bottom", fontsize=7)
    ax.set_ylim(0, max(v + e for v, e in zip(vals, err, strict=True)) * 1.15)
    ax.set_xticks(range(len(recs)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speedup over vanilla (x)")
    clock = recs[0].clock
    ax.set_title(f"{title} ({clock} time, {sampling_of(recs[0])})" + _where(recs) + _sources(recs)
                 + (f"\nthe {MAX_BARS} fastest of {MAX_BARS + left} points" if left else ""), fontsize=9)
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
    for label, rs in list(series.items())[:MAX_SERIES]:
        ax.plot([_concurrency(r) for r in rs], [r.speedup or 0.0 for r in rs], marker="o", label=label,
                ls="--" if "load-aware" in label else "-")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--", label="vanilla at the same load")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency (requests decoding at once)")
    ax.set_ylabel("throughput speedup over vanilla (x)")
    flat = [r for rs in series.values() for r in rs]
    clock = "modelled" if {r.backend for r in flat} == {"sim"} else "wall"
    ax.set_title(f"Speculation under load ({clock} time){_where(flat)}{_sources(flat).split('; bars:')[0]}",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def latency_throughput(records: Sequence[Record]) -> Figure | None:
    """p50 request latency against system throughput, one curve per strategy (points: concurrency levels)."""
    series = load_series(records)
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, rs in list(series.items())[:MAX_SERIES]:
        xs = [r.rate for r in rs]   # served: the throughput
        ys = [(r.serving or {})["latency_s_p50"] for r in rs]
        ax.plot(xs, ys, marker="o", label=label, ls="--" if "load-aware" in label else "-")
        for x, y, r in zip(xs, ys, rs, strict=True):
            ax.annotate(str(_concurrency(r)), (x, y), fontsize=6, xytext=(2, 2),
                        textcoords="offset points")
    ax.set_xlabel("throughput (tokens / s)")
    ax.set_ylabel("request latency p50 (s)")
    flat = [r for rs in series.values() for r in rs]
    ax.set_title(f"Latency vs throughput (labels: concurrency){_where(flat)}{_sources(flat).split('; bars:')[0]}",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")[:60]


def all_figures(records: Sequence[Record]) -> dict[str, Figure]:
    """Every figure, one set per group of comparable records (`comparable`): unlike runs never share a figure;
    a figure's name ends with what sets its group apart when there are several."""
    figs: dict[str, Figure] = {}
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
                figs[f"speedup_vs_{param}{tag}"] = fig
        for name, fn in (("speedup_vs_concurrency", speedup_vs_concurrency), ("latency_vs_throughput",
                                                                              latency_throughput)):
            fig = fn(points)
            if fig is not None:
                figs[f"{name}{tag}"] = fig
        by_sweep: dict[str, list[Record]] = {}
        for r in recs:
            by_sweep.setdefault(r.sweep or "run", []).append(r)
        for name, rs in by_sweep.items():
            fig = speedup_bars(rs, f"Speedup per point: sweep '{name}'")
            if fig is not None:
                figs[f"bars_{slug(name)}{tag}"] = fig
    points = list({r.point_id: r for r in records}.values())
    for r in points:
        if sum(k.startswith("pool_") for k in figs) >= MAX_POOL_FIGURES:
            break
        fig = pool_over_run(r)
        if fig is not None:
            figs[f"pool_{slug(r.label)}_{r.point_id[:6]}"] = fig
    return figs


def close(fig: Figure) -> None:
    plt.close(fig)
