"""`python -m ouroboros.bench.datastore`: the REST retrieval benchmark runs in-process, compares two versions'
trees and refuses bad inputs in one line (timings are printed, never asserted)."""

import os

import numpy as np
import pytest

from ouroboros.bench import datastore as bench
from ouroboros.strategies.datastore import Datastore


def test_bench_compares_versions_on_identical_lookups(tmp_path, capsys):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 50, size=400).tolist() for _ in range(5)]
    path = str(tmp_path / "ds.npz")
    Datastore.build(docs).save(path)
    same_file = os.path.join(os.path.dirname(bench.__file__), "..", "strategies", "datastore.py")
    assert bench.main(["--datastore", path, "--against", same_file, "--lookups", "50", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "identical trees: 50/50" in out and "current:" in out and "against:" in out


@pytest.mark.parametrize("args, msg", [
    (["--lookups", "0"], "must be >= 1"),
    (["--against", "/nonexistent/datastore.py"], "no such file"),
])
def test_bench_refuses_bad_inputs(tmp_path, capsys, args, msg):
    path = str(tmp_path / "ds.npz")
    Datastore.build([[1, 2, 3] * 20]).save(path)
    assert bench.main(["--datastore", path, *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1
