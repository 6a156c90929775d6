"""What the user typed wins (issue 19): an explicit command-line value beats dataset budgets, sweep presets and
strategy presets; where something else decides, one `note:` line says so before the run; tables and records state
the budget, the hardware and placement, and the params that shape their numbers."""

from pathlib import Path

from cli_helper import run_module
from hydra import compose, initialize_config_dir

from analysis.report import table_rows
from ouroboros.config import apply_explicit, validate
from ouroboros.running.sinks import load_records, read_records
from ouroboros.running.table import format_table
from ouroboros.sweep import plan

CONF = str(Path(__file__).resolve().parents[1] / "conf")
SIM = ["model=llama70b_7b", "dataset.num_prompts=1", "max_new_tokens=8", "logger=quiet"]
HUMANEVAL = ["model=qwen_coder", "backend=sim", "sim=default", "hardware=h100", "dataset=humaneval",  # the prior:
             "dataset.ids=[HumanEval/0]",                                 # its profile needs the fetched tokenizer
             "logger=quiet", "strategy=pld"]


def planned(*overrides: str) -> tuple[list, list[str]]:
    ovr = list(overrides)
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=ovr, return_hydra_config=True)
        notes: list[str] = []
        points = plan(ovr, dict(cfg.hydra.runtime.choices), validate(cfg).sweep, notes)
        return points, [n for n in notes if not n.startswith("decisions:")]   # tests/test_sim_trust.py has those


def other_notes(err: str) -> list[str]:
    """stderr's lines but the decisions' source and the proposers' host time (tests/test_sim_trust.py and
    tests/test_sim_host.py check those)."""
    return [ln for ln in err.strip().splitlines()
            if not ln.startswith(("note: decisions:", "note: proposer host time:"))]


def test_typed_max_new_tokens_beats_the_datasets_budget(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", *HUMANEVAL, "max_new_tokens=16", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    recs = read_records(out)
    assert [r["max_new_tokens"] for r in recs] == [16, 16]
    assert all(p["new_tokens"] <= 16 for r in recs for p in r["prompts"])
    assert "new tokens per prompt: 16" in res.out
    assert not [ln for ln in other_notes(res.err) if ln.startswith("note:")]


def test_the_datasets_own_key_wins_and_says_so(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", *HUMANEVAL, "max_new_tokens=16", "dataset.max_new_tokens=8", f"out={out}",
                     tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    assert [r["max_new_tokens"] for r in read_records(out)] == [8, 8]
    assert other_notes(res.err) == [
        "note: dataset.max_new_tokens=8 is the budget (the dataset's own key wins over max_new_tokens=16)"]


def test_untyped_budget_stays_the_datasets():
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        run = validate(compose("config", overrides=HUMANEVAL))
    assert apply_explicit(run, HUMANEVAL).dataset["max_new_tokens"] is None    # HumanEval's 512 then applies
    assert apply_explicit(run, [*HUMANEVAL, "max_new_tokens=64"]).dataset["max_new_tokens"] == 64


def test_ablation_keeps_the_typed_preset_and_params():
    points, notes = planned(*SIM, "model=yi34b_6b", "hardware=a800x2", "strategy=ouroboros_humaneval",
                            "strategy.params.K=2", "sweep=ablation")
    ours = [p for p in points if p.run.strategy.name == "ouroboros"]
    assert len(ours) == 5
    assert all(p.run.strategy.params["gamma"] == 12 and p.run.strategy.params["K"] == 2 for p in ours)
    assert [p.run.strategy.params["lengthening"] for p in ours] == [False, False, True, True, True]   # the preset's
    assert notes == []


def test_a_preset_that_overrides_a_typed_value_says_so():
    points, notes = planned(*SIM, "hardware=a800x2", "strategy.params.gamma=12", 'sweep.grid=["strategy=speculative",'
                            '"strategy.params.gamma=2,4"]', "sweep=gamma")
    assert [p.run.strategy.params.get("gamma") for p in points[1:]] == [2, 4]
    assert notes == ["sweep gamma sets strategy.params.gamma at its points: the command line's "
                     "strategy.params.gamma=12 is not used"]
    assert [p.label for p in points] == ["vanilla", "speculative gamma=2", "speculative gamma=4"]  # 4 is the default


def test_compare_keeps_typed_params_where_the_strategy_has_them():
    points, _ = planned(*SIM, "hardware=a800x2", "strategy.params.gamma=6", "sweep=compare")
    gammas = {p.run.strategy.name: p.run.strategy.params.get("gamma") for p in points}
    assert gammas == {"vanilla": None, "speculative": 6, "pld": None, "lookahead": None, "cascade": 6,
                      "ouroboros": 6, "rest": None, "suffix": None, "recycling": None}


def test_default_hardware_is_noted_typed_is_not():
    _, notes = planned(*SIM, "sweep=single")
    assert notes == ["simulating the default hardware=a800x2 (2 device(s), placement pipeline); pick one with "
                     "hardware=<a100|a800x2|h100|h200>"]
    assert planned(*SIM, "sweep=single", "hardware=a800x2")[1] == []


def test_table_header_states_budget_hardware_placement_and_shared_params(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", *SIM, "hardware=h200", "sim.devices=2", "sim.placement=tensor",
                     "strategy.params.gamma=6", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    recs = read_records(out)
    assert recs[1]["hardware"]["placement"] == "tensor" and recs[1]["hardware"]["devices"] == 2
    head = format_table(load_records(out)).splitlines()[:2]
    assert head == ["new tokens per prompt: 8; hardware: h200 (2 device(s), tensor; modelled clock)",
                    "speculative at every point: gamma=6"]


def test_analysis_table_names_budget_and_hardware(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", *SIM, "hardware=h100", "sim.devices=2",
                     "sim.placement=tensor", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    rows = table_rows(load_records(out))
    assert [(r["hardware"], r["max_new_tokens"]) for r in rows] == [("h100 tensor x2", "8")] * 2


def test_a_typed_peer_param_stays_on_a_peer_point():
    """A sweep point that picks a peer keeps the command line's params of that peer (as it does a strategy's)."""
    from ouroboros.sweep import merge_overrides

    kept, replaced = merge_overrides(["strategy.params.num_assistant_tokens=3", "strategy.params.gamma=4"],
                                     ["strategy=hf_assisted"], {"strategy": "speculative"})
    assert "strategy.params.num_assistant_tokens=3" in kept and "strategy.params.gamma=4" not in kept
    assert replaced == []
