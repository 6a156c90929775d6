"""Issue 60, item 5: a rank a user cannot misread. Ranks are computed within one baseline's points; a point without a
measured band is not ranked above or below anything; '=' marks exactly the points whose band overlaps another's;
bands are clipped at what the figure can take (eta >= 1); the legend says what the column means; a calibration
profile run off the hardware, budget or task it was fitted on says so (a note before the run, `off_fit` in each
record's decisions, the table's decisions line)."""

from pathlib import Path

import pytest
from cli_helper import run_module
from hydra import compose, initialize_config_dir

from ouroboros.config import apply_explicit, explicit_notices, validate
from ouroboros.running import sinks
from ouroboros.running.record import Record
from ouroboros.running.sinks import read_records, summary_line
from ouroboros.running.table import format_table, speedup_ranks

ROOT = Path(__file__).resolve().parents[1]
CONF = str(ROOT / "conf")
SAMPLE = ROOT / "tests/fixtures/specbench_sample.jsonl"
GSM8K = ["model=yi34b_6b", "dataset=specbench", f"dataset.path={SAMPLE}", "dataset.categories=[math_reasoning]"]


def rec(label: str, speedup: float | None, band: float | None, baseline: str = "v", eta: float = 2.0,
        eta_band: float | None = 0.1, sim: bool = True) -> Record:
    """A table row: a simulated point with a measured speedup band (None: '?'), or a wall-clock one (sim=False)."""
    return Record.from_json({
        "label": label, "strategy": label.split()[0], "point_id": label, "baseline_id": baseline,
        "backend": "sim" if sim else "hf", "hardware": {"name": "a800x2", "devices": 2, "placement": "pipeline"},
        "max_new_tokens": 8, "speedup": speedup, "speedup_specbench": speedup,
        "totals": {"new_tokens": 8, "elapsed_s": 1.0, "tokens_per_s": 8.0, "block_efficiency": eta,
                   "accepted_length": eta - 1, "match_per_forward": 0.0},
        **({"decisions": {"kind": "prior", "label": "prior", "fitted_to": "not calibrated",
                          "band": {"speedup": band, "block_efficiency": eta_band, "commit": "abc1234",
                                   "measured_by": "python -m simulators calibrate bands (held out)"}}}
           if sim else {})})


def vanilla(baseline: str = "v", sim: bool = True) -> Record:
    return rec(f"vanilla [{baseline}]", 1.0, 0.0, baseline, eta=1.0, eta_band=0.0, sim=sim)


def rows(table: str) -> dict[str, list[str]]:
    """The main table's rows (between its header and the speedup legend), by point name, split on spaces."""
    lines = table.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("point "))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("speedup: "))
    return {ln.split()[0] + (" " + ln.split()[1] if ln.split()[1].startswith("[") else ""): ln.split()
            for ln in lines[start + 2:end]}


def composed(*overrides: str) -> tuple[dict, list[str]]:
    ovr = ["backend=sim", *overrides]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        run = apply_explicit(validate(compose("config", overrides=ovr)), ovr)
    return run, explicit_notices(run, ovr)


# ----------------------------------------------------------------------------------------------- ranks
def test_a_banded_baseline_is_not_ranked_first_above_points_without_a_band():
    """model=qwen_coder backend=sim on a800x2: only vanilla's speedup has a band (±0%), every other speedup is '?'.
    Vanilla was ranked 1 ('vanilla is fastest'); now nothing is ranked and the table has no rank column."""
    recs = [vanilla(), rec("pld", 1.6, None), rec("speculative", 2.1, None), rec("lookahead", 1.4, None)]
    assert speedup_ranks(recs) == ["-", "?", "?", "?"]
    table = format_table(recs)
    assert "rank" not in table
    # with a second group that does compare, the column shows: vanilla of the first group is still not ranked
    more = [*recs, vanilla("w"), rec("speculative [w]", 2.0, 0.1, "w"), rec("ouroboros [w]", 3.0, 0.1, "w")]
    assert speedup_ranks(more)[:4] == ["-", "?", "?", "?"] and speedup_ranks(more)[4:] == ["3", "2", "1"]
    table = format_table(more)
    assert rows(table)["vanilla [v]"][-1] == "-" and "no other point of its baseline to rank against" in table
    assert "?: no measured band: not ranked, nor counted above or below any point" in table


def test_equals_marks_exactly_the_points_whose_band_overlaps_another():
    """The main job: Ouroboros' band (2.86x ±73%: 0.77-4.95x) reaches below 1.00x, so vanilla ties with it ('=');
    speculative and lookahead overlap each other. A point whose band overlaps none shows no '=' even where its rank
    number is another's too."""
    recs = [vanilla(), rec("speculative", 2.11, 0.24), rec("pld", 1.59, None), rec("lookahead", 1.39, 0.28),
            rec("ouroboros", 2.86, 0.73)]
    assert speedup_ranks(recs) == ["=3", "=1", "?", "=1", "=1"]
    disjoint = [vanilla(), rec("speculative", 3.0, 0.1), rec("lookahead", 1.5, 0.1)]
    assert speedup_ranks(disjoint) == ["3", "1", "2"]
    table = format_table(recs)
    legend = next(ln for ln in table.splitlines() if ln.startswith("rank"))
    assert "1 + how many points have their whole speedup band" in legend and "above this point's whole band" in legend
    assert "'=': another point's band overlaps this one's (a tie, not an order)" in legend
    assert "where bands overlap" not in table   # the old legend, which the ranks did not follow


def test_ranks_and_ties_are_per_baseline_group():
    """sweep=load: each concurrency has its own vanilla. Vanilla is 2nd at each, alone: no '=' (the old table
    marked a rank number shared anywhere in the table, so every vanilla read '=2')."""
    recs = [vanilla("c1"), rec("speculative [c1]", 1.76, 0.24, "c1"),
            vanilla("c2"), rec("speculative [c2]", 1.72, 0.24, "c2")]
    assert speedup_ranks(recs) == ["2", "1", "2", "1"]
    # a point of another group never counts above or below: a fast c2 point leaves c1's ranks as they were
    assert speedup_ranks([*recs, rec("ouroboros [c2]", 9.0, 0.1, "c2")])[:2] == ["2", "1"]


def test_a_load_sweep_ties_vanilla_only_where_a_band_of_its_concurrency_reaches_it(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.sweep", "model=llama70b_7b", "hardware=h100", "sweep=load", "serve.requests=2",
                     "max_new_tokens=4", "logger=quiet", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    recs = [Record.from_json(r) for r in read_records(out)]
    table = rows(res.out)
    groups = {r.baseline_id for r in recs}
    assert len(groups) == 7   # one per concurrency
    for base in groups:
        mine = [r for r in recs if r.baseline_id == base]
        van = next(r for r in mine if r.strategy == "vanilla")
        others = [sinks.band_span(r, "speedup") for r in mine if r is not van]
        reached = any(s is not None and s[0] <= 1.0 for s in others)
        above = sum(s is not None and s[0] > 1.0 for s in others)
        assert table[van.label][-1] == ("=" if reached else "") + str(1 + above), (van.label, table[van.label])


def test_wall_clock_points_rank_by_speedup_without_ties_and_the_legend_says_so():
    recs = [vanilla(sim=False), rec("pld", 1.4, None, sim=False), rec("lookahead", 1.4, None, sim=False),
            rec("speculative", 2.0, None, sim=False)]
    assert speedup_ranks(recs) == ["4", "2", "2", "1"]
    table = format_table(recs)
    assert rows(table)["vanilla [v]"][-1] == "4" and "±" not in table
    assert "by measured speedup (wall clock: no band): 1 + how many wall-clock points have a higher speedup" in table
    sims = format_table([vanilla(), rec("speculative", 2.0, 0.1)])
    assert "wall-clock" not in sims   # said only where the table holds wall-clock points


# ----------------------------------------------------------------------------------------------- clipped bands
def test_an_eta_band_below_one_is_clipped_there():
    """eta 4.06 ±101% reached -0.04: eta cannot go below 1. The ± stays the measured error, marked '*', with the
    footnote; the console line shows the clipped range."""
    spec = rec("speculative", 2.11, 0.24, eta=4.06, eta_band=1.01)
    assert sinks.band_span(spec, "block_efficiency") == pytest.approx((1.0, 4.06 * 2.01, True))
    assert sinks.band_span(spec, "speedup") == pytest.approx((2.11 * 0.76, 2.11 * 1.24, False))
    table = format_table([vanilla(), spec])
    assert rows(table)["speculative"][8] == "±101%*"
    assert "*: clipped at eta 1: eta cannot be lower, so that band runs from 1.00 to eta x (1 + ±)" in table
    head = next(ln for ln in table.splitlines() if ln.startswith("point"))
    row = next(ln for ln in table.splitlines() if ln.startswith("speculative"))
    assert row.index("±101%*") + len("±101%*") == head.rindex("±") + 1   # the column widened: nothing runs together
    assert "eta 4.06 ±101% (1.00-8.16, clipped at eta 1)" in summary_line(spec)
    unclipped = format_table([vanilla(), rec("speculative", 2.11, 0.24, eta=4.06, eta_band=0.5)])
    assert "*" not in unclipped and "*: clipped" not in unclipped


def test_a_speedup_band_below_zero_is_clipped_at_zero_for_the_rank():
    """2.0x ±150% would reach -1.0x; clipped at 0 it still reaches vanilla's 1.00x (a tie)."""
    wide = rec("ouroboros", 2.0, 1.5)
    assert sinks.band_span(wide, "speedup") == pytest.approx((0.0, 5.0, True))
    table = format_table([vanilla(), wide])
    assert rows(table)["ouroboros"][5] == "±150%*" and "*: clipped at speedup 0" in table
    assert speedup_ranks([vanilla(), wide]) == ["=1", "=1"]


# ----------------------------------------------------------------------------------------------- off its fit
def test_a_profile_run_off_its_fitted_hardware_and_budget_says_so(tmp_path):
    """yi34b_6b_gsm8k was fitted on a800x2 (2 devices, pipeline) at 256 new tokens: a run on a100 x2 at 4 tokens
    gets a note before it runs, `off_fit` in each record's decisions and the table's decisions line."""
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", *GSM8K, "hardware=a100", "sim.devices=2", "sim.placement=pipeline",
                     "dataset.limit=1", "max_new_tokens=4", "logger=quiet", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    [note] = [ln for ln in res.err.splitlines() if "outside its fit" in ln]
    assert note == ("note: decisions: outside its fit: profile yi34b_6b_gsm8k was fitted on a800x2 (2 devices, "
                    "pipeline), 256 new tokens; this run is a100 (2 devices, pipeline), 4 new tokens: its bands were "
                    "measured at the fitted setting and may not hold here")
    want = {"hardware": {"fitted": "a800x2 (2 devices, pipeline)", "run": "a100 (2 devices, pipeline)"},
            "max_new_tokens": {"fitted": 256, "run": 4}}
    recs = read_records(out)
    assert [r["decisions"]["off_fit"] for r in recs] == [want, want]
    assert ("band measured at a800x2 (2 devices, pipeline), 256 new tokens, not at this run's a100 (2 devices, "
            "pipeline), 4 new tokens") in res.out


@pytest.mark.parametrize("extra, fitted, run", [
    (("hardware=a800x2", "sim.placement=tensor"), "a800x2 (2 devices, pipeline)", "a800x2 (2 devices, tensor)"),
    (("hardware=h100", "sim.devices=2", "sim.placement=pipeline"), "a800x2 (2 devices, pipeline)",
     "h100 (2 devices, pipeline)"),
    (("hardware=a800x2", "max_new_tokens=512"), "256 new tokens", "512 new tokens"),
    (("hardware=a800x2", "sim=yi34b_6b_humaneval"), "humaneval, 512 new tokens", "gsm8k, 256 new tokens"),
])
def test_each_mismatch_is_named(extra, fitted, run):
    _, notes = composed(*GSM8K, *extra)
    [note] = [n for n in notes if "outside its fit" in n]
    assert f"was fitted on {fitted}; this run is {run}:" in note


@pytest.mark.parametrize("extra", [
    ("hardware=a800x2",),                          # the category's own budget: GSM8K's 256, as fitted
    ("hardware=a800x2", "max_new_tokens=256"),
    ("hardware=a800x2", "sim.devices=2", "sim.placement=pipeline"),
])
def test_no_note_where_the_run_matches_the_fit(extra):
    run, notes = composed(*GSM8K, *extra)
    assert run.sim["profile"] == "yi34b_6b_gsm8k"
    assert not [n for n in notes if "outside its fit" in n], notes


def test_no_note_for_the_prior_or_a_matching_humaneval_run(tmp_path):
    _, notes = composed("model=llama70b_7b", "hardware=a800x2")
    assert not [n for n in notes if "outside its fit" in n]
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", "model=yi34b_6b", "dataset=humaneval", "hardware=a800x2", "dataset.limit=1",
                     "strategy=pld", "logger=quiet", f"out={out}", tmp=tmp_path)   # HumanEval's 512, as fitted
    assert res.code == 0, res.err[-2000:]
    assert "outside its fit" not in res.err and "band measured at" not in res.out
    assert all("off_fit" not in r["decisions"] for r in read_records(out))
