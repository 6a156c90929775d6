"""`check decisions` / `calibrate decisions` machinery on a tiny recorded pair (fp32, no download): the real
side's statistics come from replaying its traces (same outputs), the statistics are the metrics' definitions,
fit and evaluation prompts never overlap, the fit moves the surrogate toward the real statistics, and the profile
it writes composes and is refused for another pair."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from ouroboros.errors import OuroborosError
from simulators.__main__ import main as sim_main
from simulators.architectures import conf_root, load_conf
from simulators.lab.calibration import prior
from simulators.lab.decisions import check, fit
from simulators.lab.decisions import stats as decisions
from simulators.pair import make_pair
from simulators.replay import trace_name


def mapper(tok, specials_eos=False):
    return lambda t: 1 + t % (tok.vocab_size - 1)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("rec") / "a"
    sim_main(["check", "clock", "--model", "kind=tiny", "--dataset", "kind=synthetic", "num_prompts=4", "--limit", "4",
              "--strategies", "vanilla,speculative:gamma=3", "--max-new-tokens", "12", "--dtype", "float32",
              "--sim-model", "qwen_coder", "--hardware", "h100", "--dir", str(d)])
    return d.parent


def test_real_side_is_the_replayed_recording(recorded):
    real = decisions.load_real(str(recorded))
    assert set(real) == {"vanilla", "speculative:gamma=3"}
    sps = real["speculative:gamma=3"]
    assert len(sps.results) == 4 and all(r.new_tokens == 12 for r in sps.results)
    st = decisions.stats(sps.results)
    steps = sum(len(r.steps) for r in sps.results)
    assert st["eta"] == pytest.approx(48 / steps)
    assert st["match"] >= st["A"] and st["eta"] == pytest.approx(1 + st["A"])
    assert st["c"] == pytest.approx(1.0, abs=0.35)  # greedy SpS: one token per draft forward (+ pending feeds)
    # the clock's inputs besides eta: gamma=3 SpS runs about 3 draft forwards and a 4-token target forward a step
    drafts = sum(s.draft_forwards for r in sps.results for s in r.steps)
    assert st["dfw"] == pytest.approx(drafts / steps) and 2 <= st["dfw"] <= 4
    assert st["width"] == pytest.approx(sum(s.target_tokens for r in sps.results for s in r.steps) / steps)
    van = decisions.stats(real["vanilla"].results)
    assert van["eta"] == 1.0 and van["width"] == 1.0 and "dfw" not in van
    # the text shares are shown beside them (compare), never fitted (not in stats, which the fit scores)
    assert "repeat" not in st and "self8" not in st
    shares = decisions.text_stats(sps.results)
    assert shares["repeat"] == decisions.repeat_share([r.output for r in sps.results])
    assert shares["self8"] == decisions.self_repeat([r.output for r in sps.results])
    assert "prompt8" not in shares
    with_prompts = decisions.text_stats(sps.results, sps.prompts)
    assert with_prompts["prompt8"] == decisions.prompt_share(sps.prompts, [r.output for r in sps.results])
    assert shares["cross4"] == decisions.cross_share([r.output for r in sps.results])


def test_golden_cross_share():
    # the second output's 4-grams: (1 2 3 4) was in the first, (2 3 4 9) was not -> 1 of 2; the first has no earlier
    # output -> 1 of 3 in all
    assert decisions.cross_share([[1, 2, 3, 4], [1, 2, 3, 4, 9]]) == pytest.approx(1 / 3)
    # pooled seeds: each chunk is its own run, so the second chunk's copy of the first chunk's text does not count
    outs = [[1, 2, 3, 4], [5, 6, 7, 8], [1, 2, 3, 4], [5, 6, 7, 8]]
    assert decisions.cross_share(outs) == pytest.approx(0.5) and decisions.cross_share(outs, chunk=2) == 0.0
    assert decisions.cross_share([[1, 2]]) == 0.0   # no 4-gram at all


def test_fit_and_evaluation_prompts_never_overlap():
    for n in (2, 5, 10):
        fit, ev = decisions.split(n)
        assert not set(fit) & set(ev) and sorted(fit + ev) == list(range(n)) and ev


def test_fit_moves_the_surrogate_toward_the_real_statistics(recorded, tmp_path):
    real = decisions.load_real(str(recorded))
    before = decisions.compare(real, {}, mapper, "fit")
    opts = fit.fit_profile(real, mapper, out=lambda *_: None, rounds=1)
    after = decisions.compare(real, opts, mapper, "fit")

    def err(rows):
        row = next(r for r in rows if r["run"] == "speculative:gamma=3")
        return abs(row["sim"]["eta"] / row["real"]["eta"] - 1)

    assert err(after) < err(before)
    sc = decisions.score(after)
    assert 0 <= sc["ok"] <= sc["all"] and len(sc["misses"]) == sc["all"] - sc["ok"]
    text = decisions.table(after)
    assert "speculative:gamma=3 [2 prompts, real/sim]: eta" in text
    only = fit.fit_profile(real, mapper, opts, out=lambda *_: None, rounds=1, knobs=("p_top", "alpha_easy"))
    assert {k for k in only if only[k] != opts.get(k)} <= {"p_top", "alpha_easy"}   # --knobs: the rest stay


def test_calibrate_writes_a_profile_for_its_pair(recorded, tmp_path, monkeypatch):
    monkeypatch.setattr(fit, "id_mapper", lambda *a, **k: mapper)
    a = SimpleNamespace(dir=str(recorded), records=None, dataset=None, model="qwen_coder", name="qwen_coder_test",
                        task="synthetic",
                        tokenizer=None, out_dir=str(tmp_path), corpus=None, start=None, rounds=1, near=0,
                        jobs=1, knobs=None)
    assert fit.main(a) == 0
    prof = yaml.safe_load((tmp_path / "qwen_coder_test.yaml").read_text())
    assert prof["pair"] == "qwen_coder" and prof["fit"]["inputs"]["prompts"] == 4
    assert prof["corpus"] in ("pycode", "prose")  # the text kind is one of the fitted knobs
    assert 0 <= prof["alpha_easy"] <= 1
    prof.pop("defaults")
    with pytest.raises(OuroborosError, match="fitted for pair 'qwen_coder', not for model 'yi34b_6b'"):
        make_pair(load_conf("model", "yi34b_6b"), load_conf("hardware", "a800x2"), prof)


def test_a_refit_keeps_the_start_profiles_text_rules(recorded, tmp_path, monkeypatch):
    """sim.loop_guard, sim.self_guard and sim.copy_from are rules of the surrogate, not searched knobs: a fit from a
    profile that has them runs with them and writes them (a profile refitted without them would silently write
    looping, self-copying text again)."""
    seen = {}
    rules = {"loop_guard": True, "self_guard": True, "copy_from": "prompt"}

    def fake_fit(real, mapper_, base, **_):
        seen.update(base=dict(base))
        return dict(base)

    import simulators.sim_profiles as sim_profiles

    stored = sim_profiles.load_profile

    def with_rules(name):   # a start profile that has the rules (the committed chat profile has the loop guard)
        return {**stored(name), **rules} if name == "qwen_coder_humaneval_chat" else stored(name)

    monkeypatch.setattr(fit, "id_mapper", lambda *a, **k: mapper)
    monkeypatch.setattr(fit, "fit_profile", fake_fit)
    monkeypatch.setattr(sim_profiles, "load_profile", with_rules)
    a = SimpleNamespace(dir=str(recorded), records=None, dataset=None, model="qwen_coder", name="qwen_coder_test",
                        task="synthetic", tokenizer=None, out_dir=str(tmp_path), corpus=None,
                        start="qwen_coder_humaneval_chat", rounds=1, near=1, jobs=1, knobs="p_copy")
    assert yaml.safe_load((conf_root() / "sim" / "qwen_coder_humaneval_chat.yaml").read_text())["loop_guard"] is True
    assert fit.main(a) == 0
    assert {k: seen["base"][k] for k in rules} == rules
    written = yaml.safe_load((tmp_path / "qwen_coder_test.yaml").read_text())
    assert {k: written[k] for k in rules} == rules
    assert fit.main(SimpleNamespace(**{**vars(a), "start": "qwen_coder_humaneval"})) == 0   # fitted before them: off
    written = yaml.safe_load((tmp_path / "qwen_coder_test.yaml").read_text())
    assert not any(k in seen["base"] or k in written for k in rules)


def test_calibrate_can_start_from_a_profile(recorded, tmp_path, monkeypatch):
    """--start PROFILE seeds the search with that profile's knobs (its corpus too), --rounds sets the passes; a bad
    --rounds or an unknown profile is refused before any recording is read."""
    seen = {}

    def fake_fit(real, mapper_, base, rounds=3, near=0, knobs=None, **_):
        seen.update(base=dict(base), rounds=rounds, near=near, knobs=knobs)
        return dict(base)

    monkeypatch.setattr(fit, "id_mapper", lambda *a, **k: mapper)
    monkeypatch.setattr(fit, "fit_profile", fake_fit)
    a = SimpleNamespace(dir=str(recorded), records=None, dataset=None, model="qwen_coder", name="qwen_coder_test",
                        task="synthetic",
                        tokenizer=None, out_dir=str(tmp_path), corpus=None, start="qwen_coder_humaneval", rounds=1,
                        near=1, jobs=1, knobs=None)
    assert fit.main(a) == 0
    start = yaml.safe_load((conf_root() / "sim" / "qwen_coder_humaneval.yaml").read_text())
    assert seen["rounds"] == 1 and seen["near"] == 1 and seen["base"]["corpus"] == start["corpus"]
    assert seen["base"]["p_copy"] == start["p_copy"] and seen["base"]["alpha_easy"] == start["alpha_easy"]
    prof = yaml.safe_load((tmp_path / "qwen_coder_test.yaml").read_text())
    assert "--start qwen_coder_humaneval --rounds 1 --near 1" in prof["fit"]["command"]
    assert prof["fit"]["start"] == {"profile": "qwen_coder_humaneval", "command": start["fit"]["command"],
                                    "commit": start["fit"]["commit"]}
    assert fit.main(SimpleNamespace(**{**vars(a), "knobs": "recall, recall_min"})) == 0
    prof = yaml.safe_load((tmp_path / "qwen_coder_test.yaml").read_text())
    assert seen["knobs"] == ("recall", "recall_min") and prof["fit"]["command"].endswith("--knobs recall,recall_min")
    assert "search of recall, recall_min (1 round, from qwen_coder_humaneval; the other knobs as it has them" in \
        prof["fit"]["method"]
    for bad, msg in (({"rounds": 0}, "--rounds must be >= 1, got 0"), ({"near": -1}, "--near must be >= 0, got -1"),
                     ({"jobs": 0}, "--jobs must be >= 1, got 0"),
                     ({"knobs": "recall,nope"}, "--knobs: nope not a fitted knob"), ({"knobs": ","}, "--knobs: ','"),
                     ({"start": "nope"}, "unknown sim profile 'nope'")):
        with pytest.raises(OuroborosError, match=msg):
            fit.main(SimpleNamespace(**{**vars(a), "dir": str(tmp_path / "none"), **bad}))


TINY = ["model=tiny", "model.hidden_size=64", "model.vocab_size=128", "model.eos_id=1", "backend.dtype=float64",
        "backend=hf", "dataset=synthetic", "dataset.num_prompts=4", "max_new_tokens=12", "logger=quiet"]


def tiny_prompts(dataset, seed):
    from ouroboros.prompts.datasets import load_prompts

    return load_prompts(dataset, None, 128, seed)


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    from hydra import compose, initialize_config_dir

    from ouroboros.config import validate
    from ouroboros.running.executor import make_executor
    from ouroboros.sweep import plan, run_points

    out = tmp_path_factory.mktemp("sweep") / "records.jsonl"
    ovr = [*TINY, 'sweep.grid=["strategy=pld,speculative"]', f"out={out}"]
    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[1] / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=ovr, return_hydra_config=True)
        run = validate(cfg)
        points = plan(ovr, dict(cfg.hydra.runtime.choices), run.sweep)
        recs = run_points(points, make_executor(run, resume=run.sweep.resume, sweep=run.sweep.name))
    assert [r.strategy for r in recs] == ["vanilla", "pld", "speculative"]
    return out


def test_a_real_sweeps_records_are_the_real_side(swept):
    """`--records`: a real sweep's points (not vanilla, not the hf peers) with their recorded steps, per prompt in the
    sweep's order; the same statistics as the sweep's own totals, and no trace needed."""
    import json

    real = decisions.load_sweep(str(swept), model="tiny", dataset="synthetic", prompts=tiny_prompts)
    assert set(real) == {"pld", "speculative"}
    recs = {r["label"]: r for r in map(json.loads, swept.read_text().splitlines()) if r.get("kind") != "prompt_result"}
    for label, run in real.items():
        assert [r.prompt_id for r in run.results] == [p["prompt_id"] for p in recs[label]["prompts"]]
        assert decisions.stats(run.results)["eta"] == pytest.approx(recs[label]["totals"]["block_efficiency"])
        assert [len(p) for p in run.prompts] == [p["prompt_len"] for p in recs[label]["prompts"]]
        assert run.warmup == 0 and run.groups == [0] * 4   # warmed up on a throw-away proposer: nothing to replay
    rows = decisions.compare(real, {}, mapper, "eval")    # the sim side runs on them as on recorded runs
    assert {r["run"] for r in rows} == {"pld", "speculative"} and all(r["prompts"] == 2 for r in rows)
    old = swept.parent / "schema1.jsonl"    # a record of schema 1 warmed up on its measured proposer: replayed
    rows1 = [json.dumps({**r, "schema": 1}) + "\n" for r in map(json.loads, swept.read_text().splitlines())]
    old.write_text("".join(rows1))
    assert {r.warmup for r in decisions.load_sweep(str(old), model="tiny", dataset="synthetic",
                                                   prompts=tiny_prompts).values()} == {8}


def test_calibrate_and_check_read_a_sweeps_records(swept, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(decisions, "same_pair", lambda *a: True)   # the tiny pair's records stand in for qwen_coder's
    monkeypatch.setattr(fit, "id_mapper", lambda *a, **k: mapper)
    monkeypatch.setattr(decisions, "real_prompts", lambda *a, **k: tiny_prompts)
    a = SimpleNamespace(dir=None, records=str(swept), dataset=None, model="qwen_coder", name="qwen_coder_test",
                        task="synthetic", tokenizer=None, out_dir=str(tmp_path), corpus=None, start=None, rounds=1,
                        near=0, jobs=1, knobs="p_top")
    assert fit.main(a) == 0
    prof = yaml.safe_load((tmp_path / "qwen_coder_test.yaml").read_text())
    assert prof["fit"]["inputs"]["recorded_runs"] == ["pld", "speculative"] and prof["fit"]["inputs"]["prompts"] == 4
    assert prof["fit"]["inputs"]["fit_prompt_ids"] == ["synthetic-0", "synthetic-2"]   # the even positions it fitted
    assert prof["fit"]["inputs"]["categories"] == ["synthetic"]
    assert "real greedy sweep" in prof["fit"]["inputs_source"]
    assert "--records <sweep records> --dataset synthetic" in prof["fit"]["command"]
    assert fit.main(SimpleNamespace(**{**vars(a), "runs": "speculative", "name": "qwen_coder_test2"})) == 0
    prof2 = yaml.safe_load((tmp_path / "qwen_coder_test2.yaml").read_text())
    assert prof2["fit"]["inputs"]["recorded_runs"] == ["speculative"]
    assert "--runs speculative" in prof2["fit"]["command"]
    for bad, msg in (({"dir": "x"}, "exactly one of --dir"), ({"records": None}, "exactly one of --dir"),
                     ({"records": str(tmp_path / "none.jsonl")}, "no such file"),
                     ({"dataset": "humaneval"}, "no finished real greedy point of a simulated strategy on dataset"),
                     ({"runs": "lookahead"}, "--runs: lookahead not among the recorded runs' strategies")):
        with pytest.raises(OuroborosError, match=msg):
            fit.main(SimpleNamespace(**{**vars(a), **bad}))
    monkeypatch.setattr(check, "id_mapper", lambda *a, **k: mapper)
    capsys.readouterr()
    assert check.main(SimpleNamespace(model="qwen_coder", dataset="synthetic", max_new_tokens=12, dir=None,
                                      records=str(swept), sim=None, tokenizer=None)) == 0
    out = capsys.readouterr().out
    assert "pld [2 prompts, real/sim]: eta" in out and "speculative [2 prompts, real/sim]: eta" in out
    assert check.main(SimpleNamespace(model="qwen_coder", dataset="synthetic", max_new_tokens=12, dir=None,
                                      records=str(swept), sim=None, tokenizer=None, prompts="all")) == 0
    out = capsys.readouterr().out   # records of prompts no profile saw: every one is held out
    assert "every prompt, sim=default" in out and "pld [4 prompts, real/sim]: eta" in out
    assert "prompt-sampling reference" not in out
    with pytest.raises(OuroborosError, match="not both"):
        check.main(SimpleNamespace(model="qwen_coder", dataset="synthetic", max_new_tokens=12, dir="x",
                                   records=str(swept), sim=None, tokenizer=None))
    with pytest.raises(OuroborosError, match="names no sim_category_profiles for synthetic"):
        check.main(SimpleNamespace(model="qwen_coder", dataset="synthetic", max_new_tokens=12, dir=None,
                                   records=str(swept), sim=None, tokenizer=None, by_category=True))


def sweep_into(out: Path, extra: list[str]) -> None:
    from hydra import compose, initialize_config_dir

    from ouroboros.config import validate
    from ouroboros.running.executor import make_executor
    from ouroboros.sweep import plan, run_points

    ovr = [*TINY, 'sweep.grid=["strategy=pld,speculative"]', f"out={out}", *extra]
    with initialize_config_dir(config_dir=str(Path(__file__).resolve().parents[1] / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=ovr, return_hydra_config=True)
        run = validate(cfg)
        run_points(plan(ovr, dict(cfg.hydra.runtime.choices), run.sweep),
                   make_executor(run, resume=run.sweep.resume, sweep=run.sweep.name))


def test_sweeps_of_one_point_on_other_prompts_are_one_run_in_groups(swept, tmp_path):
    """A second sweep of the same strategies on other prompts (e.g. dataset.ids) joins each run as its own group: its
    own proposer and warm-up, as that process had, so fit (even) and held-out (odd) positions span both prompt sets."""
    out = tmp_path / "records.jsonl"
    out.write_text(swept.read_text())
    sweep_into(out, ["dataset.num_prompts=2", "dataset.prompt_len=40"])    # two other prompts
    real = decisions.load_sweep(str(out), model="tiny", dataset="synthetic", prompts=tiny_prompts)
    assert set(real) == {"pld", "speculative"}
    for run in real.values():
        assert [len(p) for p in run.prompts] == [48] * 4 + [40] * 2
        assert run.groups == [0, 0, 0, 0, 1, 1]
    sweep_into(out, ["max_new_tokens=10", "dataset.num_prompts=1"])
    with pytest.raises(OuroborosError, match="measured at 12 and 10 new tokens"):
        decisions.load_sweep(str(out), model="tiny", dataset="synthetic", prompts=tiny_prompts)


def test_records_of_another_pair_are_refused(swept):
    with pytest.raises(OuroborosError, match="ran the 'tiny' pair, not --model qwen_coder"):
        decisions.load_sweep(str(swept), model="qwen_coder", dataset="synthetic", prompts=tiny_prompts)


def test_a_context_answered_two_ways_is_reported_not_fatal(recorded, tmp_path):
    """bf16 near-ties: the real draft can answer one context two ways (forwards of different shapes); the trace keeps
    one answer, so the replay asks contexts never recorded. Outputs still equal the recording's: the run loads, and
    the contexts it missed are reported per prompt (a different output is still an error)."""
    import json
    import shutil

    d = tmp_path / "rec" / "a"
    shutil.copytree(recorded / "a", d)
    path = d / trace_name("speculative:gamma=3")
    doc = json.loads(path.read_text())
    entries = doc["models"]["draft"]["entries"]
    for e in entries[len(entries) // 3: len(entries) // 3 + 3]:  # the draft answers a few contexts the other way
        e[2] = (e[2] + 1) % doc["models"]["draft"]["vocab_size"]
    path.write_text(json.dumps(doc))
    real = decisions.load_real(str(d.parent))
    sps = real["speculative:gamma=3"]
    assert sps.unrecorded and all(n > 0 for n in sps.unrecorded.values())
    assert not real["vanilla"].unrecorded
    (note,) = decisions.unrecorded_notes(real)
    assert note.startswith("note: speculative:gamma=3: ") and "bf16 near-tie recorded with one answer only" in note


def test_no_recording_is_one_line(tmp_path):
    with pytest.raises(OuroborosError, match="no recorded runs under"):
        decisions.load_real(str(tmp_path))


def test_rest_options_get_surrogate_ids(tmp_path):
    """REST's datastore holds the real tokenizer's ids: the simulated side maps them as it maps the prompts (inline
    corpus, or a datastore file rebuilt once in surrogate ids, separators kept); other strategies' options pass."""
    from ouroboros.strategies.datastore import SEP, Datastore

    def shift(t):
        return t + 100

    run = decisions.RealRun("rest", "rest", {"corpus": [1, 2, 3], "depth": 4}, 8)
    assert decisions.mapped_params(run, shift) == {"corpus": [101, 102, 103], "depth": 4}
    path = tmp_path / "ds.npz"
    Datastore.build([[1, 2], [3]]).save(str(path))
    run = decisions.RealRun("rest", "rest", {"datastore": str(path)}, 8)
    out = decisions.mapped_params(run, shift)["datastore"]
    assert out != str(path) and Datastore.load(out).tokens.tolist() == [101, 102, SEP, 103]
    assert decisions.mapped_params(run, shift)["datastore"] == out  # built once
    sps = decisions.RealRun("speculative:gamma=3", "speculative", {"gamma": 3}, 8)
    assert decisions.mapped_params(sps, shift) == {"gamma": 3}


def test_datastore_text_the_surrogate_cannot_write_breaks_its_documents(tmp_path):
    """A real datastore token with no surrogate piece (IdMap.piece: None) becomes a document break in the mapped
    datastore, not a hashed stand-in that would match a piece the surrogate writes; prompts keep the stand-in."""
    from ouroboros.strategies.datastore import SEP, Datastore

    class Tok:
        def surrogate_id(self, t):
            return 7 if t == 3 else t + 100

        def piece_id(self, t):
            return None if t == 3 else t + 100

    idmap = decisions.IdMap(Tok())
    assert idmap(3) == 7 and idmap.piece(3) is None and idmap(1) == idmap.piece(1) == 101
    path = tmp_path / "ds.npz"
    Datastore.build([[1, 3, 2], [4]]).save(str(path))
    out = decisions.mapped_params(decisions.RealRun("rest", "rest", {"datastore": str(path)}, 8), idmap)["datastore"]
    assert Datastore.load(out).tokens.tolist() == [101, SEP, 102, SEP, 104]
    inline = decisions.RealRun("rest", "rest", {"corpus": [1, 3, 2]}, 8)
    assert decisions.mapped_params(inline, idmap)["corpus"] == [101, 7, 102]


def test_rest_runs_on_the_simulated_side(recorded):
    """A REST run (no real recording here: the tiny pair's speculative prompts stand in) decodes on the surrogate with
    its corpus mapped, and its statistics carry the datastore hit rate."""
    sps = decisions.load_real(str(recorded))["speculative:gamma=3"]
    corpus = [t for p in sps.prompts for t in p]
    rest = decisions.RealRun("rest", "rest", {"corpus": corpus}, sps.budget, sps.results, sps.prompts, sps.groups)
    st = decisions.stats(decisions.sim_pooled(rest, [0, 1], {}, mapper, seeds=2))
    assert st["eta"] >= 1.0 and 0 <= st["hit:pool"] <= 1


def test_recall_knows_the_datastore_rest_verifies(recorded, tmp_path, monkeypatch):
    """sim.recall on the simulated side of a REST run: the target's memory (sim.recall_text) is that run's datastore,
    mapped to surrogate ids; other runs, and REST at recall 0, get none."""
    from ouroboros.strategies.datastore import Datastore

    sps = decisions.load_real(str(recorded))["speculative:gamma=3"]
    path = tmp_path / "ds.npz"
    Datastore.build([list(p) for p in sps.prompts]).save(str(path))
    rest = decisions.RealRun("rest", "rest", {"datastore": str(path)}, sps.budget, sps.results, sps.prompts, sps.groups)
    seen: list[dict] = []
    real_make = decisions.make_pair

    def spy(model, hw, opts, seed=0):
        seen.append(dict(opts))
        return real_make(model, hw, opts, seed=seed)

    monkeypatch.setattr(decisions, "make_pair", spy)
    decisions.sim_results(rest, [0], {"recall": 1.0, "recall_min": 2}, mapper)
    mapped = decisions.mapped_params(rest, mapper(make_pair(load_conf("model", "qwen_coder"),
                                                            load_conf("hardware", "h100"), {}).tokenizer))
    assert seen[-1]["recall_text"] == mapped["datastore"] != str(path)
    seen.clear()
    decisions.sim_results(rest, [0], {"recall": 0.0}, mapper)
    decisions.sim_results(sps, [0], {"recall": 1.0}, mapper)
    assert not any(o.get("recall_text") for o in seen)


def test_prompt_sampling_reference_compares_the_two_real_prompt_sets(recorded):
    """The reference `validate decisions` prints beside its score: the fit prompts' real statistics in the
    simulator's place, so it is exact when both prompt sets are the same and counts the cells the two sets differ on."""
    real = decisions.load_real(str(recorded))
    rows = check.sampling_rows(real)
    sps = real["speculative:gamma=3"]
    row = next(r for r in rows if r["run"] == "speculative:gamma=3")
    assert row["real"] == decisions.stats([sps.results[i] for i in (1, 3)])
    assert row["sim"] == decisions.stats([sps.results[i] for i in (0, 2)])
    same = [{**r, "sim": r["real"]} for r in rows]
    sc = decisions.score(same)
    assert sc["ok"] == sc["all"] > 0


def test_coupled_knobs_are_searched_jointly(recorded, monkeypatch):
    """local_frac does nothing at local_ctx 1 here and local_ctx nothing at local_frac 0: a one-knob search from
    (0, 1) stays put; the joint step finds the minimum at (0.3, 2). local_ctx and local_novel are listed once at
    local_frac 0."""
    grid = fit.joint_grid(("local_frac", "local_ctx"), dict(fit.FIT_GRID))
    assert (0.0, 1) in grid and (0.0, 2) not in grid and (0.3, 2) in grid and len(grid) == len(set(grid))
    grid3 = fit.joint_grid(fit.FIT_JOINT[0], dict(fit.FIT_GRID))
    assert [g for g in grid3 if g[0] == 0.0] == [(0.0, 1, False)] and (0.3, 2, True) in grid3

    def fake_error(real, fit_real, opts, mapper_, seeds):
        lf, lc = opts.get("local_frac", 0.0), opts.get("local_ctx", 1)
        return 0.0 if (lf, lc) == (0.3, 2) else 1.0 if lf == 0 or lc == 1 else 2.0

    monkeypatch.setattr(fit, "fit_error", fake_error)
    lines: list[str] = []
    opts = fit.fit_profile(decisions.load_real(str(recorded)), mapper, out=lines.append, rounds=1)
    assert (opts["local_frac"], opts["local_ctx"]) == (0.3, 2)
    assert "fit local_frac + local_ctx + local_novel = 0.3 + 2 + False (error 0.0000)" in lines


def test_text_prior_is_fitted_on_some_tasks_and_checked_on_a_held_out_one(recorded, tmp_path, monkeypatch):
    """`calibrate prior`: one set of text knobs for every task, fitted on the tasks left in; --holdout scores the
    task left out (its held-out prompts) under the prior and under the current defaults. Bad inputs are one line
    each, before any recording is read."""
    root = tmp_path / "dec"
    root.mkdir()
    for task in ("humaneval", "mtbench"):
        (root / f"qwen_coder-{task}-12").symlink_to(recorded, target_is_directory=True)
    monkeypatch.setattr(prior, "id_mapper", lambda *a, **k: mapper)
    a = SimpleNamespace(model="qwen_coder", tasks="humaneval,mtbench", root=str(root), max_new_tokens=12,
                        holdout="mtbench", tokenizer=None, rounds=1, jobs=1)
    lines: list[str] = []
    res = prior.main(a, out=lines.append)
    grids = dict(fit.FIT_GRID)
    assert set(res["prior"]) == {*prior.PRIOR_KNOBS, "pieces", "surprise_copy"}
    assert res["prior"]["pieces"] == "bpe" and res["prior"]["surprise_copy"] == 1.0  # fixed, not searched
    assert all(res["prior"][k] in grids[k] for k in prior.PRIOR_KNOBS)
    held = res["tasks"]["mtbench"]
    assert 0 <= held["score_prior"] <= held["cells"] and 0 <= held["score_defaults"] <= held["cells"]
    assert "score_prior" not in res["tasks"]["humaneval"]  # fitted on, so not a transfer check
    assert any(line.startswith("mtbench: fit-prompt error") and "held-out task" in line for line in lines)
    assert "fitting" in lines[0] and "on the fit prompts of humaneval (" in lines[0]  # mtbench was left out
    shown = next(line for line in lines if line.startswith("prior (conf/sim/default.yaml"))
    assert all(f"{k}: {v}" in shown for k, v in res["prior"].items())
    for bad, msg in (({"tasks": "humaneval,nope"}, "no decision profile for nope"),
                     ({"holdout": "gsm8k"}, "--holdout must be one of --tasks"),
                     ({"root": str(tmp_path / "none"), "holdout": None}, "no recorded runs of humaneval"),
                     ({"rounds": 0}, "--rounds must be >= 1"), ({"jobs": 0}, "--jobs must be >= 1")):
        with pytest.raises(OuroborosError, match=msg):
            prior.main(SimpleNamespace(**{**vars(a), **bad}), out=lines.append)


def test_bands_from_a_sweeps_records_score_each_sweeps_held_out_prompts(swept, tmp_path, monkeypatch):
    """`calibrate bands --records TASK=FILE:PROFILE`: one profile_recorded cell per strategy and sweep of a point,
    from that sweep's odd-position prompts where the profile lists no fit prompts (it was fitted on the even ones),
    and from every prompt it does not list where it lists them (a fresh file's every prompt)."""
    from simulators import sim_profiles
    from simulators.lab.calibration import bands

    out = tmp_path / "records.jsonl"
    out.write_text(swept.read_text())
    sweep_into(out, ["dataset.num_prompts=2", "dataset.prompt_len=40"])
    prof = {**sim_profiles.load_profile("qwen_coder_mtbench"), "fit": {"inputs": {"fit_prompts": "even positions"}}}
    monkeypatch.setattr(sim_profiles, "load_profile", lambda name: dict(prof))
    monkeypatch.setattr(decisions, "id_mapper", lambda *a, **k: mapper)
    monkeypatch.setattr(decisions, "real_prompts", lambda *a, **k: tiny_prompts)
    monkeypatch.setattr(decisions, "same_pair", lambda *a: True)   # the tiny pair's records stand in for qwen_coder's
    lines: list[str] = []
    cells = bands.records_cells([f"synthetic={out}:p"], lines.append)
    assert sorted((c["strategy"], tuple(c["prompts"])) for c in cells) == [
        (s, ids) for s in ("pld", "speculative") for ids in (("synthetic-1",), ("synthetic-1", "synthetic-3"))]
    assert all(c["source"] == "profile_recorded" and c["metric"] == "block_efficiency" for c in cells)
    assert len(lines) == 4 and "eta real" in lines[0]
    prof["fit"] = {"inputs": {"fit_prompts": "even positions", "fit_prompt_ids": ["synthetic-3"]}}
    cells = bands.records_cells([f"synthetic={out}:p"], lines.append)   # a prompt a profile lists is never a cell's
    assert sorted((c["strategy"], tuple(c["prompts"])) for c in cells) == [
        (s, ids) for s in ("pld", "speculative")
        for ids in (("synthetic-0", "synthetic-1"), ("synthetic-0", "synthetic-1", "synthetic-2"))]
    prof["fit"] = {"inputs": {"fit_prompts": "all"}}
    with pytest.raises(OuroborosError, match="no prompt of the file is known to be held out"):
        bands.records_cells([f"synthetic={out}:p"], lines.append)
    with pytest.raises(OuroborosError, match="TASK=FILE:PROFILE"):
        bands.records_cells(["synthetic"], lines.append)


def test_a_runs_outputs_replay_prompt_lookup_exactly_and_refuse_a_draft_model(swept, tmp_path):
    """`simulators trace`: the vanilla point's outputs as a trace. Prompt lookup's drafts depend on the context
    only, so its replay makes the real pld point's decisions forward for forward (the same steps per prompt and
    the same outputs); speculative would read filler answers for its draft model and is refused in one line."""
    import json

    from ouroboros.loop.decode import decode
    from ouroboros.strategies import build_proposer
    from simulators import replay
    from simulators.lab import trace_outputs
    from simulators.pair import check_source

    doc = trace_outputs.outputs_trace(str(swept), "vanilla", "synthetic", "tiny", prompts=tiny_prompts)
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(doc))
    assert doc["meta"]["source"] == "outputs" and replay.outputs_only(str(path))
    recs = {r["label"]: r for r in map(json.loads, swept.read_text().splitlines()) if r.get("kind") != "prompt_result"}
    lines = [r["prompt"] for r in map(json.loads, swept.read_text().splitlines()) if r.get("kind") == "prompt_result"
             and r["of_point"] == recs["pld"]["point_id"]]
    sim = {"tokens": "replay", "trace": str(path)}
    pair = make_pair(dict(load_conf("model", "qwen_coder")), dict(load_conf("hardware", "h100")), sim)
    prop = build_proposer("pld", {}, pair.target)
    assert [p["id"] for p in doc["prompts"]] == [ln["prompt_id"] for ln in lines]
    for p, real in zip(doc["prompts"], lines, strict=True):
        res = decode(pair.target, prop, p["ids"], 12, tuple(doc["eos_ids"]), prompt_id=p["id"])
        assert res.output == real["output"] and len(res.steps) == len(real["steps"])
    check_source(sim, "pld")
    check_source(sim, "suffix")
    with pytest.raises(OuroborosError, match="holds only a real run's outputs: strategy 'speculative'"):
        check_source(sim, "speculative")
    with pytest.raises(OuroborosError, match="no finished real greedy point 'nope'"):
        trace_outputs.outputs_trace(str(swept), "nope", "synthetic", "tiny", prompts=tiny_prompts)
    one = [doc["prompts"][1]["id"]]
    kept = trace_outputs.outputs_trace(str(swept), "vanilla", "synthetic", "tiny", prompts=tiny_prompts, ids=one)
    assert [p["id"] for p in kept["prompts"]] == one
    with pytest.raises(OuroborosError, match="no finished output for prompt.s. zz"):
        trace_outputs.outputs_trace(str(swept), "vanilla", "synthetic", "tiny", prompts=tiny_prompts, ids=[*one, "zz"])


def test_trace_bad_input_is_one_line_and_writes_nothing(swept, tmp_path, capsys):
    out = tmp_path / "t.json"
    assert sim_main(["trace", "--records", str(tmp_path / "none.jsonl"), "--out", str(out)]) == 2
    assert sim_main(["trace", "--records", str(swept), "--point", "nope", "--model", "tiny", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("error: ") for e in err) and "no such file" in err[0]
    assert "no finished real greedy point 'nope'" in err[1] and not out.exists()


def test_repeat_share_counts_the_tokens_of_a_third_back_to_back_copy():
    """check decisions' `repeat`: 1 2 1 2 | 1 2 -> the last two tokens start and continue a third copy of "1 2"."""
    from simulators.lab.decisions.stats import repeat_share

    assert repeat_share([[1, 2, 1, 2, 1, 2]]) == 2 / 6
    assert repeat_share([[1, 2, 3, 1, 2, 3, 4, 5]]) == 0.0       # a span twice is not a loop
    assert repeat_share([[7, 7, 7, 7], [1, 2, 3, 4]]) == 2 / 8    # "7" a third and a fourth time
    assert repeat_share([]) == 0.0


def test_self_repeat_counts_the_n_grams_an_output_wrote_before():
    from simulators.lab.decisions.stats import self_repeat

    assert self_repeat([[1, 2, 3, 1, 2, 3]], n=3) == 1 / 4      # (1,2,3) again; (2,3,1), (3,1,2) are new
    assert self_repeat([[1, 2, 3], [1, 2, 3]], n=3) == 0.0     # per output: another output's n-grams do not count
    assert self_repeat([[1, 2]], n=3) == 0.0


def test_prompt_share_counts_the_output_n_grams_its_own_prompt_holds():
    from simulators.lab.decisions.stats import prompt_share

    assert prompt_share([[1, 2, 3, 4]], [[2, 3, 4, 9]], n=3) == 1 / 2          # (2,3,4) in the prompt; (3,4,9) not
    assert prompt_share([[1, 2, 3], [7, 8, 9]], [[7, 8, 9], [1, 2, 3]], n=3) == 0.0   # another prompt's do not count
    assert prompt_share([[1, 2, 3]], [[1, 2]], n=3) == 0.0
    with pytest.raises(ValueError):
        prompt_share([[1]], [[1], [2]], n=3)


def test_check_decisions_picks_the_pairs_profile_for_the_task():
    """Without --sim, `check decisions` compares the profile a simulated run of the pair on that dataset picks (one
    `note:` line names it), so `--by-category` on MT-Bench routes from a profile its category profiles share
    their text options with; `--sim default` still checks the prior, and a task the pair has no profile for too."""
    from simulators.architectures import load_conf
    from simulators.pair import category_options, sim_options
    from simulators.sim_profiles import load_profile
    from simulators.trust import category_profiles

    lines: list[str] = []
    assert check.pick_profile("qwen_coder", "mtbench", None, out=lines.append) == "qwen_coder_mtbench_chat"
    assert lines == ["note: --sim qwen_coder_mtbench_chat: conf/model/qwen_coder.yaml's profile for mtbench "
                     "(--sim default: the prior)"]
    he = load_conf("dataset", "humaneval")   # how a sweep with dataset=humaneval renders its prompts
    fmt = {"chat": he["chat"], "template": he["template"]}
    assert check.pick_profile("qwen_coder", "humaneval", None, fmt, out=lines.append) == "qwen_coder_humaneval_chat"
    assert check.pick_profile("qwen_coder", "mtbench", "default", out=lines.append) == "default"
    assert check.pick_profile("qwen_coder", "synthetic", None, out=lines.append) is None
    assert len(lines) == 2
    assert check.pick_profile("qwen_coder", "humaneval", None, {"chat": "auto", "template": "{prompt}"},
                              out=lines.append) == "qwen_coder_humaneval"   # bare prompts: the profile fitted on them
    routes = category_profiles(load_conf("model", "qwen_coder"), {"kind": "mtbench"})
    picked = {k: v for k, v in load_profile("qwen_coder_mtbench_chat").items() if k != "fit"}
    assert set(category_options(sim_options({**picked, "profile": "qwen_coder_mtbench_chat",
                                             "by_category": routes}))) == set(routes)
    with pytest.raises(OuroborosError, match="reads prompt ids otherwise"):   # what a prior base ran into
        category_options(sim_options({"by_category": routes}))
    with pytest.raises(OuroborosError, match="unknown model profile"):
        check.pick_profile("no_such_pair", "mtbench", None)


def test_check_decisions_sets_each_eta_error_against_the_prompt_floor():
    """`floor_lines`: an eta error within how far that many real prompts of the task stray (the committed prompt
    floor) is listed as not told apart from prompt choice, one beyond it as the simulator's own; the floor of the
    largest measured k <= the row's prompts is used and its k named; no floor (task or strategy unmeasured): no line."""
    from simulators.lab.decisions.stats import floor_lines
    from simulators.trust import floor_for

    (k_p, pld), (k_s, suf) = (floor_for("humaneval", s, 8)["block_efficiency"] for s in ("pld", "suffix"))
    rows = [{"run": "pld", "strategy": "pld", "prompts": 8, "real": {"eta": 2.0}, "sim": {"eta": 2.0 * (1 + pld / 2)}},
            {"run": "suffix x=1", "strategy": "suffix", "prompts": 8, "real": {"eta": 3.0},
             "sim": {"eta": 3.0 * (1 + 2 * suf)}},
            {"run": "mystery", "strategy": "mystery", "prompts": 8, "real": {"eta": 1.0}, "sim": {"eta": 9.0}}]
    lines = floor_lines(rows, "humaneval")
    assert len(lines) == 2 and "mystery" not in "".join(lines)
    assert f"pld {pld / 2:+.0%} / {pld:.0%}," in lines[0] and "(at" not in lines[0].split("suffix")[0]
    assert k_p == 8 and k_s < 8 and f"suffix x=1 {2 * suf:+.0%} / {suf:.0%} (at {k_s})" in lines[0]
    assert lines[1] == "beyond the floor (the simulator's own error): suffix x=1; within it (not told apart from " \
                       "which prompts were drawn): pld"
    assert floor_lines(rows, None) == [] and floor_lines(rows, "synthetic") == []
