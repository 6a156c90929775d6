"""analysis/: tables and figures from records only (never re-measuring), checked against the records."""

import csv
import importlib

import pytest
from test_sweep import sweep_records

from analysis.__main__ import main as analysis_main
from analysis.plots import curve_series
from analysis.report import table_rows, task_rows, to_markdown


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    out = tmp_path_factory.mktemp("rec") / "r.jsonl"
    sweep_records(out, "sweep=gamma", 'sweep.grid=["strategy=speculative,ouroboros","strategy.params.gamma=2,4"]')
    abl = sweep_records(out, "sweep=ablation", "strategy=ouroboros", "strategy.params.gamma=2")
    assert all(r.params["gamma"] == 2 for r in abl[1:])   # the command line reaches every point
    return out


def test_markdown_golden():
    rows = [{"point": "vanilla", "speedup": 1.0}, {"point": "pld", "speedup": None}]
    assert to_markdown(rows) == "| point | speedup |\n|---|---|\n| vanilla | 1.0 |\n| pld | - |\n"


def test_curves_follow_the_records(records):
    from ouroboros.running.sinks import load_records

    recs = load_records(records)
    series = curve_series(recs, "gamma")
    assert set(series) == {"speculative", "ouroboros"}
    spec = {r.params["gamma"]: r.speedup for r in recs if r.strategy == "speculative"}
    assert series["speculative"] == sorted(spec.items())
    assert curve_series(recs, "K") == {}   # no sweep varies K here: no curve


def test_per_task_speedup_matches_the_record_on_one_category(records):
    from ouroboros.running.sinks import load_records

    recs = load_records(records)
    tasks = {row["point"]: row for row in task_rows(recs)}
    for r in recs:
        assert tasks[r.label]["speedup"] == pytest.approx(r.speedup, abs=1e-3)   # a single category
        assert tasks[r.label]["new_tokens"] == r.totals["new_tokens"]


def test_cli_writes_tables_and_figures(records, tmp_path, capsys):
    out = tmp_path / "an"
    assert analysis_main([str(records), "--out", str(out)]) == 0
    for name in ("speedup_vs_gamma", "bars_ablation", "bars_gamma"):
        for fmt in ("png", "svg"):
            assert (out / f"{name}.{fmt}").stat().st_size > 5000, name
    assert (out / "speedup_vs_gamma.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert list((out).glob("pool_*.png"))             # ouroboros records carry pool stats
    rows = list(csv.DictReader(open(out / "table.csv")))
    assert len(rows) == len(table_rows(importlib.import_module("ouroboros.running.sinks").load_records(records)))
    assert (out / "tasks.md").read_text().startswith("| point | category |")
    printed = capsys.readouterr().out
    assert f"written to {out}" in printed and "| vanilla |" not in printed   # where it wrote, not the table


def test_unlike_runs_never_share_a_figure(records):
    """Issue 33: a sampled and a greedy series are two figures; legends never dump a config section."""
    import json

    from analysis.plots import all_figures, close
    from ouroboros.running.record import Record
    from ouroboros.running.sinks import read_records

    recs = read_records(records)
    sampled = [json.loads(json.dumps(r)) for r in recs]
    for r in sampled:
        r["config"]["sampling"] = {"temperature": 0.7, "top_p": 0.8, "top_k": 0, "seed": 0}
        r["config"]["model"]["sim_profiles"] = {"humaneval": "x"}
        r["point_id"] += "-sampled"
    figs = all_figures([Record.from_json(r) for r in recs + sampled])
    want = {"speedup_vs_gamma_greedy", "speedup_vs_gamma_sampled", "bars_gamma_greedy", "bars_gamma_sampled"}
    assert want <= set(figs)
    for name, fig in figs.items():
        texts = [t.get_text() for ax in fig.axes for t in ax.texts + ([ax.title] if ax.title else [])]
        texts += [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        assert not any("{" in t or "sim_profiles" in t for t in texts), name
        if name.startswith(("speedup_vs", "bars")):
            assert any("modelled time" in t for t in texts), name
        close(fig)


def test_cli_error_is_one_line(tmp_path, capsys):
    assert analysis_main([str(tmp_path / "missing.jsonl")]) == 2
    assert capsys.readouterr().err.strip().startswith("error: no records at")


def test_per_task_speedups_never_pair_two_processes():
    """Issue 33: a wall-clock baseline measured again by another process gives an older point no per-task ratio."""
    from analysis.report import same_process
    from ouroboros.running.record import Record

    def timed(procs: dict | None) -> Record:
        return Record(processes=procs)

    base = timed({"a": "p2", "b": "p2"})
    assert same_process(base, timed({"a": "p2", "b": "p2"}), {"a", "b"})
    assert not same_process(base, timed({"a": "p1", "b": "p2"}), {"a", "b"})
    assert same_process(base, timed({"a": "p1", "b": "p2"}), {"b"})
    assert not same_process(base, timed(None), {"a"}) and same_process(timed(None), timed(None), {"a"})


def test_the_same_sweep_simulated_and_on_real_models_never_shares_a_figure(tmp_path):
    """Issue 33: the main job's sweep (compare) simulated for llama70b_7b (modelled clock) and the same sweep on the
    tiny pair on hf (wall clock) in one records file: every figure holds one of the two and names its clock."""
    from analysis.plots import all_figures, close

    out, grid = tmp_path / "r.jsonl", 'sweep.grid=["strategy=pld,suffix"]'
    tiny = ["model=tiny", "model.hidden_size=64", "model.vocab_size=128", "model.eos_id=1", "backend.dtype=float64",
            "dataset.num_prompts=2", "max_new_tokens=4", "logger=quiet"]
    sim = sweep_records(out, "sweep=compare", grid)
    real = sweep_records(out, "sweep=compare", grid, base=tiny)
    assert {r.backend for r in sim} == {"sim"} and {r.backend for r in real} == {"hf"}
    assert {r.sweep for r in sim + real} == {"compare"} and {r.label for r in sim} == {r.label for r in real}
    figs = all_figures(sim + real)
    bars = {n: f for n, f in figs.items() if n.startswith("bars_")}
    assert len(bars) == 2, sorted(figs)
    for name, fig in bars.items():
        texts = " ".join(t.get_text() for ax in fig.axes for t in [*ax.texts, ax.title])
        texts += " ".join(t.get_text() for t in fig.texts)
        assert ("modelled time" in texts) != ("wall" in texts), (name, texts)   # the title names one clock
        from matplotlib.container import BarContainer

        n_bars = sum(len(c) for ax in fig.axes for c in ax.containers if isinstance(c, BarContainer))
        assert n_bars == len(sim), (name, n_bars)                              # one run's points, not both
    for fig in figs.values():
        close(fig)
