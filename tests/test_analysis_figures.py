"""Issue 59 item 23: simulated figures show each point's measured band (error bars; a point without one hollow),
every title names its clock and decisions, a load sweep's bars keep every point, another sweep's keep the slowest,
wall-clock titles say how many prompts and tokens they stand on, and a report holds one figure open at a time.
Records come from tiny sweeps: the simulator (1 prompt x 4 tokens) and the tiny pair on the wall clock."""

import dataclasses

import matplotlib.pyplot as plt
import pytest
from cli_helper import run_module
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

from analysis.plots import all_figures, close, latency_throughput, speedup_curve, speedup_vs_concurrency
from analysis.report import write_report
from ouroboros.running.sinks import load_sweep_records

SIM = ["model=llama70b_7b", "hardware=a800x2", "dataset.num_prompts=1", "dataset.task=none", "max_new_tokens=4",
       "logger=quiet"]


def _sweep(tmp, *args):
    out = tmp / "r.jsonl"
    res = run_module("ouroboros.sweep", *args, f"out={out}", tmp=tmp)
    assert res.code == 0, res.err
    return load_sweep_records(out)


@pytest.fixture(scope="module")
def gamma(tmp_path_factory):
    """30 points: speculative and Ouroboros at 7 gammas and 2 budgets, and a vanilla per budget."""
    return _sweep(tmp_path_factory.mktemp("g"), *SIM, "sweep=gamma",
                  'sweep.grid=["strategy=speculative,ouroboros","strategy.params.gamma=1,2,3,4,6,8,12",'
                  '"max_new_tokens=4,6"]')


@pytest.fixture(scope="module")
def load(tmp_path_factory):
    """A load sweep of 25 points: 5 concurrencies x vanilla, speculative and Ouroboros fixed and load-aware."""
    return _sweep(tmp_path_factory.mktemp("l"), *SIM, "sweep=load", "serve.requests=4",
                  'sweep.grid=["serve.concurrency=1,2,4,16,64","strategy=speculative,ouroboros",'
                  '"serve.load_aware=false,true"]')


def _texts(fig: Figure) -> str:
    return " ".join(t.get_text() for ax in fig.axes for t in [ax.title, *ax.texts]) + " ".join(
        t.get_text() for t in fig.texts)


def _series_bars(fig: Figure) -> dict[str, ErrorbarContainer]:
    return {c.get_label(): c for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer)}


def _bar_extent(c: ErrorbarContainer) -> list[tuple[float, float]]:
    """(low, high) of each of a series' error bars."""
    segs = c.lines[2][0].get_segments()
    return [(min(s[0][1], s[1][1]), max(s[0][1], s[1][1])) if c.has_yerr else (min(s[0][0], s[1][0]),
                                                                                 max(s[0][0], s[1][0])) for s in segs]


@pytest.mark.parametrize("param", ["gamma", "max_new_tokens"])
def test_every_simulated_series_shows_each_points_band(gamma, param):
    """Four series or more (no shading): each still shows every point's measured band, as an error bar of exactly
    speedup x band either side; the title names the clock, the decisions and the bands' range."""
    fig = speedup_curve(gamma, param)
    try:
        bars = _series_bars(fig)
        lines = [ln for ln in fig.axes[0].get_legend().get_texts() if not ln.get_text().startswith("baseline")]
        assert len(lines) >= 4 and {t.get_text() for t in lines} <= set(bars)
        for label, c in bars.items():
            assert c.has_yerr, label
            ys = list(c.lines[0].get_ydata())
            recs = {r.speedup: r for r in gamma if r.speedup in ys and r.strategy == label.split()[0]}
            for y, (lo, hi) in zip(ys, _bar_extent(c), strict=True):
                b = recs[y].band("speedup")
                assert b and hi == pytest.approx(y * (1 + b)) and lo == pytest.approx(y * (1 - b)), (label, y)
        title = fig.axes[0].get_title()
        label = gamma[1].decisions["label"]
        assert "(modelled time)" in title and f"decisions: {label}" in title and "80% measured error band (±" in title
    finally:
        close(fig)


def test_a_point_without_a_measured_band_is_hollow(gamma):
    """A simulated point whose band was never measured ('?') gets a hollow marker and a legend note."""
    i = next(i for i, r in enumerate(gamma) if r.strategy == "ouroboros" and r.params["gamma"] == 4)
    rec = gamma[i]
    band = {k: v for k, v in rec.decisions["band"].items() if k != "speedup"}
    recs = list(gamma)
    recs[i] = dataclasses.replace(rec, decisions={**rec.decisions, "band": band})
    fig = speedup_curve(recs, "gamma")
    try:
        ax = fig.axes[0]
        hollow = [ln for ln in ax.get_lines() if ln.get_markerfacecolor() in ("white", (1.0, 1.0, 1.0, 1.0))
                  and len(ln.get_xdata())]
        assert [list(ln.get_ydata()) for ln in hollow] == [[rec.speedup]]
        assert abs(hollow[0].get_xdata()[0] - 4) < 0.5     # at its gamma (moved aside at most a little)
        assert any("no measured band (±?)" in t.get_text() for t in ax.get_legend().get_texts())
        assert "hollow: no measured band" in ax.get_title()
    finally:
        close(fig)


def test_load_figures_show_bands_and_name_clock_and_decisions(load):
    label = load[0].decisions["label"]
    fig = speedup_vs_concurrency(load)
    try:
        bars = _series_bars(fig)
        assert len(bars) == 4 and all(c.has_yerr for c in bars.values())
        for c in bars.values():
            for y, (lo, hi) in zip(c.lines[0].get_ydata(), _bar_extent(c), strict=True):
                assert hi > y > lo
        assert "(modelled time)" in fig.axes[0].get_title() and f"decisions: {label}" in fig.axes[0].get_title()
    finally:
        close(fig)
    fig = latency_throughput(load)
    try:
        bars = _series_bars(fig)
        assert len(bars) == 5 and all(c.has_xerr for c in bars.values())   # vanilla too: its token/s band
        title = fig.axes[0].get_title()
        assert "(modelled time" in title and f"decisions: {label}" in title and "throughput's 80%" in title
    finally:
        close(fig)


def test_latency_labels_never_overlap(load):
    """Many served points coincide (the batch is full from concurrency 4 on): their labels are not stacked."""
    fig = latency_throughput(load)
    try:
        ax = fig.axes[0]
        fig.canvas.draw()
        boxes = [t.get_window_extent() for t in ax.texts]
        for i, a in enumerate(boxes):
            assert not any(a.overlaps(b) for b in boxes[i + 1:]), ax.texts[i].get_text()
        assert len(boxes) >= 4 and {t.get_text() for t in ax.texts} == {"C=1", "C=64"}   # each curve's ends
    finally:
        close(fig)


def test_load_bars_keep_every_point(load):
    """The load sweep's bars drop no point by speed: the slowest (vanilla at every load, and the slowest
    speculating point) are there, one bar per point."""
    figs = all_figures(load)
    try:
        fig = next(f for n, f in figs.items() if n.startswith("bars_"))
        shown = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        assert sorted(shown) == sorted(r.label for r in load) and len(shown) == 25
        spec = min((r for r in load if r.strategy != "vanilla"), key=lambda r: r.speedup)
        assert spec.label in shown and "left out" not in fig.axes[0].get_title()
    finally:
        for f in figs.values():
            close(f)


def test_other_sweeps_bars_keep_the_slowest_and_say_what_is_left_out(gamma):
    figs = all_figures(gamma)
    try:
        fig = next(f for n, f in figs.items() if n.startswith("bars_"))
        shown = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        assert len(gamma) == 30 and len(shown) == 20
        assert {r.label for r in gamma if r.speedup <= 1.0} <= set(shown)      # the baselines (the slowest)
        slowest = min((r for r in gamma if r.strategy != "vanilla"), key=lambda r: r.speedup)
        assert slowest.label in shown
        fastest = max(gamma, key=lambda r: r.speedup)
        assert fastest.label in shown
        assert "left out: 10 at " in fig.axes[0].get_title()
    finally:
        for f in figs.values():
            close(f)


def test_wall_clock_titles_say_prompts_and_tokens(tmp_path):
    tiny = ["model=tiny", "model.hidden_size=64", "model.vocab_size=128", "model.layers=2", "model.draft_layers=1",
            "backend=hf", "backend.dtype=float64", "dataset.num_prompts=2", "max_new_tokens=4", "logger=quiet"]
    recs = _sweep(tmp_path, *tiny, "sweep=gamma", 'sweep.grid=["strategy=speculative","strategy.params.gamma=1,2"]')
    assert {r.backend for r in recs} == {"hf"}
    n, m = recs[1].totals["prompts"], recs[1].totals["new_tokens"]
    assert all((r.totals["prompts"], r.totals["new_tokens"]) == (n, m) for r in recs)
    figs = all_figures(recs)
    try:
        bars = next(n for n in figs if n.startswith("bars_"))
        assert "speedup_vs_gamma" in figs
        for name in ("speedup_vs_gamma", bars):
            title = figs[name].axes[0].get_title()
            assert "wall time" in title and f"{n} prompts, {m} tokens" in title, (name, title)
    finally:
        for f in figs.values():
            close(f)


def test_a_report_holds_one_figure_open_at_a_time(gamma, load, tmp_path, monkeypatch):
    """Each figure is closed once saved, before the next is drawn: no 'More than 20 figures' warning, none left."""
    open_at_save = []
    save = Figure.savefig

    def spy(self, *a, **k):
        open_at_save.append(len(plt.get_fignums()))
        return save(self, *a, **k)

    monkeypatch.setattr(Figure, "savefig", spy)
    plt.close("all")
    written = write_report(gamma + load, tmp_path / "an", ("png",))
    assert len(written) >= 10 and open_at_save and max(open_at_save) == 1
    assert plt.get_fignums() == []
