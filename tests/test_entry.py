"""Every registered strategy runs end to end through `python -m ouroboros.run` (in process), on the simulator and
on the tiny hf pair, with a record appended for it and its baseline."""

import pytest
from cli_helper import run_module

from ouroboros.running.sinks import read_records
from ouroboros.strategies import REGISTRY

SIM = ["model=llama70b_7b", "dataset.num_prompts=2", "max_new_tokens=8", "logger=quiet"]
HF = ["model=tiny", "model.hidden_size=32", "model.layers=1", "model.draft_layers=1", "dataset.num_prompts=1",
      "dataset.prompt_len=12", "max_new_tokens=6", "logger=quiet", "warmup=false"]
SMALL = {"lookahead": ["strategy.params.W=2", "strategy.params.N=3", "strategy.params.G=2"],
         "ouroboros": ["strategy.params.W=2", "strategy.params.N=3", "strategy.params.G=2", "strategy.params.K=1"]}


def datastore(tmp_path, vocab: int) -> str:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join(str(i % vocab) for i in range(200)) + "\n")
    res = run_module("ouroboros.rest_datastore", "--out", str(tmp_path / "ds.npz"), "--tokens", str(corpus))
    assert res.code == 0, res.err
    return str(tmp_path / "ds.npz")


@pytest.mark.parametrize("backend", ["sim", "hf"])
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_strategy_runs_from_the_command_line(tmp_path, name, backend):
    args = [*(SIM if backend == "sim" else HF), f"strategy={name}", *SMALL.get(name, [])]
    if name == "rest":
        args.append(f"strategy.params.datastore={datastore(tmp_path, 64)}")
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", *args, f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    recs = read_records(out)
    assert [r["strategy"] for r in recs] == (["vanilla"] if name == "vanilla" else ["vanilla", name])
    assert recs[-1]["backend"] == backend and recs[-1]["totals"]["new_tokens"] > 0
    if backend == "hf":
        assert recs[-1]["identical_to_baseline"] == "1/1"
