"""`python -m simulators check spread`: the real eta of k prompts against all recorded ones (records only)."""

from __future__ import annotations

import json

from simulators.__main__ import main


def point(pid: str, label: str, strategy: str, params: dict, backend: str = "hf") -> dict:
    return {"point_id": pid, "label": label, "strategy": strategy, "params": params, "backend": backend,
            "config": {"dataset": {"kind": "humaneval"}, "model": {"kind": "qwen-coder", "draft": True}}}


def prompt(pid: str, prompt_id: str, tokens: int, steps: int) -> dict:
    per = [tokens // steps + (1 if i < tokens % steps else 0) for i in range(steps)]
    return {"kind": "prompt_result", "of_point": pid,
            "prompt": {"prompt_id": prompt_id, "steps": [{"new_tokens": n, "target_tokens": 1} for n in per]}}


def write(path, lines) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def test_spread_of_k_prompts_is_measured_against_all_and_pools_files(tmp_path, capsys):
    """Two prompts at eta 4 and two at eta 2 (pooled 3, over two files): of the six 2-prompt subsets four give 3
    and two are a third off, so the 80% quantile is 33.3% and the median 0; vanilla's spread is 0; a point with
    the same label but other parameters is another point."""
    a = write(tmp_path / "a.jsonl", [point("v", "vanilla", "vanilla", {}), prompt("v", "p1", 40, 40),
                                     prompt("v", "p2", 40, 40),
                                     point("x", "pld", "pld", {"max_ngram": 3}), prompt("x", "p1", 40, 10),
                                     prompt("x", "p2", 40, 10)])
    b = write(tmp_path / "b.jsonl", [point("y", "pld", "pld", {"max_ngram": 3}), prompt("y", "p3", 20, 10),
                                     prompt("y", "p4", 20, 10),
                                     point("z", "pld", "pld", {"max_ngram": 5}), prompt("z", "p3", 30, 10),
                                     prompt("z", "p4", 30, 10)])
    assert main(["check", "spread", "--records", a, "--records", b, "--prompts", "1,2", "--draws", "4000"]) == 0
    rows = {ln.split()[0] + (" " + ln.split()[1] if ln.split()[1].startswith("[") else ""): ln
            for ln in capsys.readouterr().out.splitlines()[2:-1]}
    assert set(rows) == {"vanilla", "pld", "pld [2]"}
    pld = rows["pld"].split()
    assert pld[1:4] == ["4", "3.00", "2.00-4.00"]
    assert pld[4:9] == ["33.3%", "/", "33.3%", "33.3%", "/"] and pld[9] == "0.0%"   # k=1: every draw 1/3 off
    assert rows["pld [2]"].split()[2:5] == ["2", "3.00", "3.00-3.00"] and rows["pld [2]"].split()[-1] == "-"
    assert rows["vanilla"].split()[4] == "0.0%"


def test_spread_refuses_bad_input_in_one_line(tmp_path, capsys):
    good = write(tmp_path / "r.jsonl", [point("x", "pld", "pld", {}), prompt("x", "p1", 40, 10)])
    sim = write(tmp_path / "s.jsonl", [point("s", "pld", "pld", {}, backend="sim"), prompt("s", "p1", 40, 10)])
    for argv, msg in ((["--prompts", "4,x"], "comma-separated whole numbers"),
                      (["--prompts", "0"], "each size must be >= 1"),
                      (["--draws", "10"], "at least 100 subsets"),
                      (["--records", str(tmp_path / "none.jsonl")], "no such file"),
                      (["--records", sim], "no finished real greedy point")):
        records = [] if "--records" in argv else ["--records", good]
        assert main(["check", "spread", *records, *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], (argv, err)
