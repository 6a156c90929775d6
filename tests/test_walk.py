"""Issue 61 #3: the walk of one run enters each core module at most twice (tests/walk.py says how it counts)."""

import pytest
from walk import walk

RUNS = {
    "the main job's pair, simulated": ("ouroboros.sweep", "model=llama70b_7b", "sweep=single", "strategy=ouroboros"),
    "a real-model sweep with its baseline": ("ouroboros.sweep", "model=tiny", "backend=hf", "sweep=single",
                                             "strategy=speculative"),
    "one run": ("ouroboros.run", "strategy=pld"),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_no_core_module_is_entered_more_than_twice(name, tmp_path):
    module, *args = RUNS[name]
    w = walk(module, *args, "dataset.num_prompts=1", "max_new_tokens=8", "logger=quiet", f"out={tmp_path}/r.jsonl",
             tmp=tmp_path)
    assert w.code == 0, w.err[-2000:]
    core = {"ouroboros.config", "ouroboros.running.point", "ouroboros.running.executor", "ouroboros.running.session"}
    assert core <= set(w.stays)
    assert module in w.stays and w.boundary       # the entry point and the backend kind were walked through
    assert max(w.entries().values()) <= 2, " -> ".join(w.stays)
