"""REST with no datastore on the simulator: the simulator's stand-in (simulators/stand_in.py), built once per process
in the surrogate's ids from standard-library text the surrogate target does not write; the run says so in one note
and in its record, and its target knows the stand-in's text where `check decisions` would give it a REST run's
datastore. A real backend (and a replayed or proxy token source) refuses REST without a datastore in one line,
before any work. Losslessness on the stand-in: tests/test_sim_lossless.py."""

import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from cli_helper import run_module
from hydra import compose, initialize_config_dir

from ouroboros.config import apply_explicit, explicit_notices, validate
from ouroboros.errors import OuroborosError
from ouroboros.running.session import load_backends, pair_key, proposer_params
from ouroboros.running.sinks import load_records
from ouroboros.strategies import NO_DATASTORE
from ouroboros.strategies.datastore import SEP, Datastore
from simulators.corpus import CODE_MODULES, PACKAGE_MODULES, corpus_text, load_corpus, stand_in_docs
from simulators.simconfig import CORPORA, SimConfig
from simulators.stand_in import build, rest_stand_in

ROOT = Path(__file__).resolve().parents[1]
CONF = str(ROOT / "conf")
MODEL = yaml.safe_load((ROOT / "conf/model/llama70b_7b.yaml").read_text())
SIM = ["model=llama70b_7b", "dataset.num_prompts=2", "dataset.task=none", "max_new_tokens=16", "logger=quiet"]


def composed(*overrides: str):
    ovr = list(overrides)
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        run = apply_explicit(validate(compose("config", overrides=ovr)), ovr)
    return run, explicit_notices(run, ovr)


@pytest.mark.parametrize("kind", CORPORA)
def test_the_stand_in_is_text_the_surrogate_does_not_write(kind):
    what, docs = stand_in_docs(kind)
    own = corpus_text(kind)
    assert docs and all(d and d not in own for d in docs)
    assert len(docs) == int(what.split(", ")[-1].split()[0])   # "... N modules)"
    if kind != "prose":   # the code corpora stand in for each other (pycode vs top-level modules: the fidelity check)
        other = PACKAGE_MODULES if kind == "code" else CODE_MODULES
        assert len(docs) == len(other) and "\n\n".join(docs) == corpus_text("pycode" if kind == "code" else "code")


def test_built_once_per_process_in_the_surrogates_ids_and_the_same_every_time():
    a = rest_stand_in({"corpus": "pycode"}, MODEL)
    assert rest_stand_in({"corpus": "pycode", "alpha_easy": 0.5}, MODEL) is a   # draft knobs: the same stand-in
    assert rest_stand_in({"corpus": "prose"}, MODEL) is not a
    opts = SimConfig(corpus="pycode")
    tok = load_corpus("pycode", opts.vocab, opts.pieces).tokenizer
    want: list[int] = []
    for d in stand_in_docs("pycode")[1]:
        want += ([SEP] if want else []) + tok.encode(d)
    ds = Datastore.load(a.path)
    assert ds.tokens.tolist() == want and a.tokens == sum(t != SEP for t in want)
    assert 0 < ds.max_token < tok.vocab_size
    again = build.__wrapped__("pycode", opts.vocab, opts.pieces, None)   # a fresh build: the same datastore
    assert again.path != a.path and np.array_equal(Datastore.load(again.path).sa_rev, ds.sa_rev)


def test_a_simulated_rest_run_without_a_datastore_uses_the_stand_in_and_says_so(tmp_path):
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", *SIM, "strategy=rest", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err
    stand_in = rest_stand_in({}, MODEL)
    notes = [ln for ln in res.err.splitlines() if "stand-in" in ln]
    assert notes == [f"note: {stand_in.note({})}"]
    assert "pycode" in notes[0] and f"{stand_in.tokens:,} tokens" in notes[0]
    assert "a real run needs strategy.params.datastore=PATH" in notes[0]
    base, rest = load_records(out)
    assert rest.strategy == "rest" and rest.params["datastore"] is None   # the params as given
    assert rest.decisions is not None and rest.decisions["rest_datastore"] == stand_in.record({})
    assert rest.decisions["rest_datastore"]["stand_in"] == stand_in.text
    assert rest.decisions["rest_datastore"]["target_knows_it"] is False   # the prior's recall is off
    assert base.decisions is not None and "rest_datastore" not in base.decisions
    assert rest.identical_to_baseline == "2/2"
    assert sum(p["proposer_stats"]["accepted:datastore"] for p in rest.prompts) > 0   # its drafts were accepted


def test_the_target_knows_the_stand_ins_text_where_recall_is_on():
    stand_in = rest_stand_in({}, MODEL)
    rest, notes = composed(*SIM, "strategy=rest", "sim.recall=0.5")
    pld, _ = composed(*SIM, "strategy=pld", "sim.recall=0.5")
    assert pair_key(rest) != pair_key(pld)                               # a pair of its own
    assert load_backends(rest)[0].lm.memory is stand_in.datastore        # its target knows the stand-in's text
    assert load_backends(pld)[0].lm.memory is None                       # the other strategies' does not
    assert proposer_params(rest)["datastore"] == stand_in.path and proposer_params(pld) == dict(pld.strategy.params)
    assert [n for n in notes if "stand-in" in n] == [stand_in.note(rest.sim)]
    assert "the target knows its text (sim.recall=0.5)" in stand_in.note(rest.sim)
    off, _ = composed(*SIM, "strategy=rest")
    assert load_backends(off)[0].lm.memory is None and "knows" not in stand_in.note(off.sim)


def test_rest_with_a_datastore_or_corpus_gets_no_stand_in(tmp_path):
    path = tmp_path / "ds.npz"
    Datastore.build([[5, 6, 7, 8]]).save(str(path))
    run, notes = composed(*SIM, "strategy=rest", f"strategy.params.datastore={path}", "sim.recall=0.5")
    assert proposer_params(run)["datastore"] == str(path) and not [n for n in notes if "stand-in" in n]
    assert load_backends(run)[0].lm.memory is None   # a datastore of your own: sim.recall_text says what it knows


@pytest.mark.parametrize("overrides, needle", [
    (["model=tiny", "dataset.num_prompts=1"], NO_DATASTORE),
    ([*SIM, "sim.tokens=replay"], "rest with sim.tokens=replay needs strategy.params.datastore=PATH"),
])
def test_rest_without_a_datastore_is_refused_in_one_line_where_there_is_no_stand_in(overrides, needle):
    with pytest.raises(OuroborosError) as e:
        composed(*overrides, "strategy=rest")
    assert str(e.value).startswith(needle) and "\n" not in str(e.value)


def test_a_real_sweep_runs_without_rest_and_says_so_and_rest_alone_fails_before_any_work(tmp_path):
    """A real sweep of several strategies (the main job's preset on a real pair) goes on without rest, with one note
    saying how to add it; a sweep of rest alone is the one-line error, nothing measured."""
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.sweep", "model=tiny", 'sweep.grid=["strategy=pld,rest"]', "dataset.num_prompts=1",
                     "max_new_tokens=4", "logger=quiet", f"out={out}", tmp=tmp_path)
    assert res.code == 0 and [r.strategy for r in load_records(out)] == ["vanilla", "pld"]
    rest_lines = [ln for ln in res.err.splitlines() if "rest" in ln]
    assert len(rest_lines) == 1 and re.fullmatch(
        r"note: sweep custom-\w+ runs without rest \(strategy=rest\): no datastore on a real backend; add "
        r"strategy=rest strategy\.params\.datastore=PATH \(`python -m ouroboros\.rest_datastore`\) to run it",
        rest_lines[0])
    alone = tmp_path / "alone.jsonl"
    res = run_module("ouroboros.sweep", "model=tiny", 'sweep.grid=["strategy=rest"]', "dataset.num_prompts=1",
                     "max_new_tokens=4", "logger=quiet", f"out={alone}", tmp=tmp_path)
    assert res.code == 2 and res.err.strip().splitlines() == [f"error: {NO_DATASTORE}"]
    assert res.out == "" and not alone.exists()                     # nothing measured, nothing appended
    assert "strategy=rest strategy.params.datastore=PATH" in NO_DATASTORE   # how to fix it, in a sweep too
