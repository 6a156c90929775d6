"""Bad inputs of `python -m simulators` (issue 59): every one is exit code 2 and one `error:` line naming the flag or
the bound it breaks, with no traceback and nothing written (the test's folder and conf/ keep their files), before any
fit, timing or record reading. In process (tests/cli_helper.py); the fits run on the simulator with 1 prompt."""

import os
from pathlib import Path

import pytest
from cli_helper import run_module

CONF = Path(__file__).resolve().parents[1] / "conf"
# a pair's figures as `calibrate measured` flags: eta 3.5 at gamma 4, SpS 1.75x vanilla (these fit: exit 0)
FLAGS = {"--model": "llama70b_7b", "--task": "gsm8k", "--hardware": "a800x2", "--vanilla-tok-s": "8",
         "--sps-tok-s": "14", "--sps-accepted-length": "2.5", "--sps-gamma": "4", "--max-new-tokens": "64",
         "--prompt-len": "300", "--prompts": "1"}
FIGURES = """model: {model}
hardware: a800x2
source: test
sps: {{gamma: 4}}
tasks:
  {task}:
    prompt_len: 300
    max_new_tokens: 64
    vanilla_tok_s: {vanilla}
    sps_tok_s: {sps}
    sps_block_efficiency: {eta}
"""


def files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def measured(tmp: Path, **change: str | None) -> list[str]:
    """`calibrate measured` flags: FLAGS with `change` (flag without its dashes, _ for -; None drops it), writing
    under tmp/out/out."""
    flags = {**FLAGS, "--out-dir": str(tmp / "out" / "out"),
             **{"--" + k.replace("_", "-"): v for k, v in change.items()}}
    return ["calibrate", "measured", *(x for k, v in flags.items() if v is not None for x in (k, v))]


def refused(args: list[str], tmp: Path, needle: str) -> str:
    """Run `python -m simulators ARGS`: exit 2, one `error:` line holding `needle`, nothing new under tmp or conf/."""
    before, conf = files(tmp), files(CONF)
    res = run_module("simulators", *args)
    lines = res.err.strip().splitlines()
    assert res.code == 2, (res.code, res.err[-2000:])
    assert "Traceback" not in res.err and len(lines) == 1 and lines[0].startswith("error: "), res.err[-2000:]
    assert needle in lines[0], lines[0]
    assert files(tmp) == before and files(CONF) == conf
    return lines[0]


@pytest.fixture
def tmp(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "a_file").write_text("x\n")
    (tmp_path / "empty.jsonl").write_text("")
    return tmp_path


def test_the_base_flags_fit(tmp):
    """The rows below break one flag of figures that calibrate fine (a profile is written)."""
    res = run_module("simulators", *measured(tmp))
    assert res.code == 0, res.err
    assert files(tmp / "out") == {"out", "out/llama70b_7b_gsm8k.yaml"}


# ----------------------------------------------------------------------------------------------- item 10: out dirs
@pytest.mark.parametrize("out, needle", [
    ("/proc/nope", "--out-dir: cannot write in '/proc/nope'"),
    ("{tmp}/a_file", "is a file, not a folder"),
    ("{tmp}/a_file/sub", "is not a folder"),
])
@pytest.mark.parametrize("job", ["measured", "paper"])
def test_calibrate_measured_checks_its_out_dir_before_fitting(tmp, job, out, needle):
    args = measured(tmp, out_dir=out.format(tmp=tmp)) if job == "measured" else [
        "calibrate", "paper", "--prompts", "1", "--out-dir", out.format(tmp=tmp)]
    refused(args, tmp, needle)


def test_calibrate_measured_refuses_a_read_only_out_dir(tmp):
    if os.geteuid() == 0:
        pytest.skip("root writes in a read-only folder")
    ro = tmp / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        refused(measured(tmp, out_dir=str(ro)), tmp, "--out-dir: cannot write in")
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("args, needle", [
    # calibrate clock: the profile written at the end, checked before any forward is timed or record read
    (["calibrate", "clock", "--model", "tiny", "--names", "a,b", "--ks", "1,4,16", "--ctxs", "8,32", "--repeats", "1",
      "--threads", "1", "--out", "/proc/nope/cpu.yaml"], "--out: cannot write '/proc/nope/cpu.yaml'"),
    (["calibrate", "clock", "--model", "tiny", "--threads", "0", "--out", "{tmp}/cpu.yaml"], "--threads must be >= 1"),
    (["calibrate", "clock", "--model", "tiny", "--names", "a,b", "--records", "{tmp}/empty.jsonl", "--out",
      "{tmp}/out"],
     "--out: '{tmp}/out' is a directory, not a file"),
    # calibrate proposers: --out a folder; --hardware names the default output file
    (["calibrate", "proposers", "--records", "{tmp}/empty.jsonl", "--hardware", "a800x2", "--out", "{tmp}/out"],
     "--out: '{tmp}/out' is a directory, not a file"),
    (["calibrate", "proposers", "--records", "{tmp}/empty.jsonl", "--hardware", "../hardware/a800x2"],
     "--hardware '../hardware/a800x2': a name may hold only"),
    # calibrate floor / bands: their YAML, before the records are read or the bands measured
    (["calibrate", "floor", "--records", "{tmp}/empty.jsonl", "--dataset", "humaneval", "--out", "/proc/nope/f.yaml"],
     "--out: cannot write '/proc/nope/f.yaml'"),
    (["calibrate", "bands", "--prompts", "1", "--out", "{tmp}/a_file/bands.yaml"], "--out: cannot write"),
    # calibrate decisions: the profile's folder and its name, before any recording is read
    (["calibrate", "decisions", "--dir", "{tmp}/out", "--out-dir", "/proc/nope"], "--out-dir: cannot write in"),
    (["calibrate", "decisions", "--dir", "{tmp}/out", "--out-dir", "{tmp}/out", "--name", "../../evil"],
     "--name '../../evil': a name may hold only"),
    (["calibrate", "decisions", "--dir", "{tmp}/out", "--out-dir", "{tmp}/out", "--model", "bogus"],
     "unknown model profile 'bogus'"),
    # check clock: --dir gets the traces and measured times, checked before any model loads
    (["check", "clock", "--hardware", "a800x2", "--dir", "{tmp}/a_file"], "--dir: '{tmp}/a_file' is a file"),
])
def test_commands_that_write_check_their_outputs_first(tmp, args, needle):
    refused([a.format(tmp=tmp) for a in args], tmp, needle.format(tmp=tmp))


# ----------------------------------------------------------------------------------------------- item 11: figures
@pytest.mark.parametrize("change, needle", [
    ({"vanilla_tok_s": "nan"}, "--vanilla-tok-s must be a finite number > 0, got nan"),
    ({"vanilla_tok_s": "inf"}, "--vanilla-tok-s must be a finite number > 0, got inf"),
    ({"sps_tok_s": "nan"}, "--sps-tok-s must be a finite number > 0, got nan"),
    ({"sps_accepted_length": "nan"}, "--sps-accepted-length must be a finite number, got nan"),
    ({"sps_accepted_length": None, "sps_eta": "nan"}, "--sps-eta must be a finite number, got nan"),
    ({"sps_accepted_length": "-1"}, "--sps-accepted-length must be >= 0"),
    ({"sps_accepted_length": "4.5"}, "--sps-accepted-length 4.5 is more than gamma = 4"),
    ({"sps_accepted_length": None, "sps_eta": "5.5"}, "(--sps-eta) is more than gamma + 1 = 5"),
    ({"sps_accepted_length": None, "sps_eta": "0.5"}, "--sps-eta must be >= 1"),
    ({"sps_accepted_length": None, "sps_gamma": None, "sps_schedule": "hf", "sps_eta": "65"},
     "(--sps-eta) is more than max_new_tokens = 64"),
    # SpS is at most eta x vanilla (a step costs one target forward at least): 1000 / 9 = 111x at eta 3.5
    ({"vanilla_tok_s": "9", "sps_tok_s": "1000"},
     "--sps-tok-s 1000 is 111x --vanilla-tok-s 9, more than the SpS block efficiency 3.5 allows"),
    ({"seed": "-1"}, "--seed must be >= 0"),
])
def test_calibrate_measured_refuses_impossible_figures(tmp, change, needle):
    refused(measured(tmp, **change), tmp, needle)


@pytest.mark.parametrize("sps, needle", [
    ("26", "even with a draft overhead of 0 (the fit's lower bound"),   # under 3.5x, out of the cost model's reach
    ("0.5", "with a draft overhead of 3 x the target's (the fit's upper bound)"),
])
def test_a_fit_stopped_at_a_bound_is_refused(tmp, sps, needle):
    """The draft overhead clamped to an end of its range would not match the SpS token/s given: refused, not
    written as a fitted 0.00 ms."""
    refused(measured(tmp, sps_tok_s=sps), tmp, needle)


@pytest.mark.parametrize("fig, needle", [
    ({"vanilla": ".nan"}, "task gsm8k: vanilla_tok_s must be a finite number > 0, got nan"),
    ({"sps": ".nan"}, "task gsm8k: sps_tok_s must be a finite number > 0"),
    ({"eta": ".nan"}, "task gsm8k: sps_block_efficiency must be a finite number"),
    ({"sps": "1000"}, "sps_tok_s 1000 is 125x vanilla_tok_s 8, more than the SpS block efficiency 3.5 allows"),
    ({"task": "../../evil"}, "figures.yaml: task '../../evil': a name may hold only"),
    ({"model": "../model/llama70b_7b"}, "model '../model/llama70b_7b': a name may hold only"),
])
def test_calibrate_measured_checks_each_task_of_a_figures_file(tmp, fig, needle):
    path = tmp / "figures.yaml"
    path.write_text(FIGURES.format(**{"model": "llama70b_7b", "task": "gsm8k", "vanilla": "8", "sps": "14",
                                      "eta": "3.5", **fig}))
    refused(["calibrate", "measured", "--from", str(path), "--prompts", "1", "--out-dir", str(tmp / "out" / "out")],
            tmp, needle)


# ----------------------------------------------------------------------------------------------- item 12: names
@pytest.mark.parametrize("flag, name", [
    ("task", "../../evil"), ("task", ".hidden"), ("task", "a/b"), ("model", "../model/llama70b_7b"),
    ("hardware", "../hardware/a800x2"),
])
def test_names_that_become_file_names_are_checked(tmp, flag, name):
    refused(measured(tmp, **{flag: name}), tmp, f"--{flag} {name!r}: a name may hold only")


# ------------------------------------------------------------------------------------ item 18: check decisions
@pytest.mark.parametrize("args, needle", [
    (["--model", "bogus", "--records", "{tmp}/nope.jsonl"], "unknown model profile 'bogus'"),
    (["--model", "../model/tiny"], "--model '../model/tiny': a name may hold only"),
    (["--dataset", "bogus", "--records", "{tmp}/nope.jsonl"], "--dataset: unknown dataset 'bogus'"),
    (["--sim", "../model/tiny", "--records", "{tmp}/nope.jsonl"], "--sim '../model/tiny'"),
    (["--sim", "nope", "--records", "{tmp}/nope.jsonl"], "unknown sim profile 'nope'"),
    (["--max-new-tokens", "0", "--records", "{tmp}/nope.jsonl"], "--max-new-tokens must be >= 1"),
    (["--records", "{tmp}/nope.jsonl"], "--records '{tmp}/nope.jsonl': no such file"),
    (["--dir", "{tmp}/nope"], "--dir '{tmp}/nope': no such folder"),
])
def test_check_decisions_checks_the_cheap_arguments_in_order(tmp, args, needle):
    refused(["check", "decisions", *(a.format(tmp=tmp) for a in args)], tmp, needle.format(tmp=tmp))
