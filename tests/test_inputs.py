"""Every bad input of every entry point: exit code 2, one `error:` line on stderr, no traceback, no record
appended, an existing records file byte-identical, no file left behind. In process (tests/cli_helper.py), on the
simulator (nothing loads before the error, so each row takes milliseconds to a second)."""

from pathlib import Path

import pytest
from cli_helper import run_module

from ouroboros.strategies import check_type

SIM = ["model=llama70b_7b", "dataset.num_prompts=1", "max_new_tokens=4", "logger=quiet"]
OLD = b'{"point_id":"old","label":"kept","totals":{}}\n'


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "hydra" not in p.parts}


# (module, args; {tmp} is the test's folder, {out} the existing records file), a word the error must contain
ROWS = [
    # strategy params: types from each strategy's config dataclass, ranges from its __post_init__
    ("ouroboros.run", ["strategy.params.gamma=2.5"], "speculative.gamma must be an int, got 2.5"),
    ("ouroboros.run", ["strategy.params.gamma=abc"], "speculative.gamma must be an int, got 'abc'"),
    ("ouroboros.run", ["strategy.params.gamma=0"], "gamma must be >= 1"),
    ("ouroboros.run", ["strategy=ouroboros", "strategy.params.lengthening=maybe"],
     "ouroboros.lengthening must be a bool, got 'maybe'"),
    ("ouroboros.run", ["strategy=pld", "strategy.params.prefer=middle"], "pld.prefer"),
    ("ouroboros.run", ["strategy=speculative", "+strategy.params.gama=3"], "no option 'gama'"),
    ("ouroboros.run", ["strategy=rest", "strategy.params.max_suffix=[1]"], "rest.max_suffix must be an int"),
    # files to read exist and parse
    ("ouroboros.run", ["strategy=rest", "strategy.params.datastore={tmp}/nope.npz"], "does not exist"),
    ("ouroboros.run", ["strategy=rest", "strategy.params.datastore={tmp}/garbage.txt"], "unreadable or corrupt"),
    ("ouroboros.run", ["strategy=ouroboros", "strategy.params.pool_load={tmp}/garbage.txt"], "corrupt"),
    ("ouroboros.run", ["strategy=ouroboros", "strategy.params.pool_load={tmp}/nope.json"], "does not exist"),
    # files and folders to write
    ("ouroboros.run", ["out={tmp}"], "is a directory"),
    ("ouroboros.run", ["out=/proc/x/r.jsonl"], "out: cannot write"),
    ("ouroboros.run", ["out={tmp}/garbage.txt/r.jsonl"], "is not a directory"),
    ("ouroboros.run", ["strategy=ouroboros", "strategy.params.pool_save=/proc/nope/p.json"],
     "ouroboros.pool_save: cannot write"),
    ("ouroboros.run", ["logger=default", "logger.wandb.dir={tmp}/garbage.txt"], "logger.wandb.dir"),
    ("ouroboros.sweep", ["out=/proc/x/r.jsonl"], "out: cannot write"),
    ("ouroboros.tune", ["strategy.params.gamma=1.5"], "speculative.gamma must be an int"),
    ("ouroboros.tune", ["tune.metric=tokens_per_sec"], "tune.metric 'tokens_per_sec' is not a record total"),
    ("ouroboros.tune", ['tune.stages=["strategy.params.gamma=2,x"]'], "tune.stages: speculative.gamma must be an int"),
    ("ouroboros.tune", ['tune.stages=["model.x=2"]'], "is not a strategy parameter"),
    ("ouroboros.tune", ["strategy=vanilla"], "no tuning stage applies"),
    ("ouroboros.tune", ["tune.out=/proc/x/t.yaml"], "tune.out: cannot write"),
]


@pytest.mark.parametrize("module,args,needle", ROWS, ids=[f"{i}:{r[0]}:{' '.join(r[1])[:40]}"
                                                           for i, r in enumerate(ROWS)])
def test_bad_input_is_one_line_and_loses_nothing(tmp_path, module, args, needle):
    out = tmp_path / "records.jsonl"
    out.write_bytes(OLD)
    (tmp_path / "garbage.txt").write_bytes(b"\xff\xfenot a datastore\n")
    before = _files(tmp_path)
    argv = [a.format(tmp=tmp_path, out=out) for a in args]
    if module in ("ouroboros.run", "ouroboros.sweep", "ouroboros.tune"):
        argv = [*SIM, f"out={out}", *argv]
    res = run_module(module, *argv, tmp=tmp_path)
    lines = res.err.strip().splitlines()
    assert res.code == 2, (res.code, res.err[-2000:])
    assert len(lines) == 1 and lines[0].startswith("error: "), res.err[-2000:]
    assert needle in lines[0]
    assert "Traceback" not in res.err + res.out
    assert out.read_bytes() == OLD
    assert _files(tmp_path) == before


@pytest.mark.parametrize("value,hint,want", [
    (3, int, 3), (3, float, 3.0), (0.5, float, 0.5), (True, bool, True), ("a", str, "a"), (None, str | None, None),
    ("x.npz", str | None, "x.npz"), ([1, 2], list[int], [1, 2]),
])
def test_check_type_accepts(value, hint, want):
    got = check_type(value, hint)
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("value,hint", [
    (2.5, int), (True, int), ("3", int), ("maybe", bool), (1, bool), (3, str), ([1, "a"], list[int]), (2.5, str | None),
    (False, float),
])
def test_check_type_rejects(value, hint):
    with pytest.raises(TypeError):
        check_type(value, hint)
