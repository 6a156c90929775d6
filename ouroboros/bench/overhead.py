"""Loop-overhead benchmark: our `vanilla` through the one decode loop vs transformers' own greedy `generate`
on the same prompts, same model, same process, interleaved prompt by prompt (so drift and background load hit
both alike). Reports tokens/s of each and the ratio ours / HF (target >= 0.97: loop overhead <= 3%).

    python -m ouroboros.bench.overhead                       # tiny random-init Llama (embedded, no download)
    python -m ouroboros.bench.overhead --model kind=qwen-coder --dtype bfloat16 --prompts 8 --max-new-tokens 128

Not a test: timings are reported, never asserted.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import torch

from ouroboros.argparser import ArgumentParser
from ouroboros.backends.hf import HFBackend
from ouroboros.backends.models import load_pair
from ouroboros.errors import OuroborosError, cli
from ouroboros.loop.decode import decode
from ouroboros.prompts.datasets import synthetic_prompts
from ouroboros.strategies import build_proposer


def parse_kv(items: list[str]) -> dict:
    out: dict = {}
    for it in items:
        if "=" not in it:
            raise OuroborosError(f"expected key=value, got {it!r}")
        k, v = it.split("=", 1)
        try:
            out[k] = int(v)
        except ValueError:
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


@torch.inference_mode()
def hf_generate(model, prompt: list[int], n: int) -> tuple[list[int], float]:
    ids = torch.tensor([prompt], device=model.device)
    t0 = time.perf_counter()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, eos_token_id=None, pad_token_id=0, num_beams=1)
    if model.device.type == "cuda":
        torch.cuda.synchronize()
    return out[0, len(prompt):].tolist(), time.perf_counter() - t0


class ForwardTimer:
    """Accumulates wall time spent inside model.forward (public forward hooks), so the time each runner spends
    OUTSIDE the model -- its loop overhead -- can be compared even on a busy machine."""

    def __init__(self, model):
        self.total_s = 0.0
        self.calls = 0
        self._t0 = 0.0
        model.register_forward_pre_hook(self._pre)
        model.register_forward_hook(self._post)

    def _pre(self, module, args):
        self._t0 = time.perf_counter()

    def _post(self, module, args, out):
        self.total_s += time.perf_counter() - self._t0
        self.calls += 1

    def take(self) -> float:
        t, self.total_s = self.total_s, 0.0
        return t


@cli
def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", nargs="*", default=["kind=tiny", "hidden_size=256", "layers=4"],
                    help="model spec as key=value pairs (passed to ouroboros.backends.models.load_pair)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved repetitions of the whole prompt set")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    pair = load_pair(parse_kv(args.model), dtype=args.dtype, device=args.device)
    model: Any = pair.target
    model.generation_config.eos_token_id = None
    target = HFBackend(model)
    if pair.tokenizer is not None:
        from ouroboros.prompts.datasets import load_prompts

        prompts = [p.ids for p in load_prompts({"kind": "humaneval", "limit": args.prompts}, pair.tokenizer,
                                               target.vocab_size)]
    else:
        prompts = [p.ids for p in synthetic_prompts(args.prompts, args.prompt_len, target.vocab_size, 0)]
    vanilla = build_proposer("vanilla", {}, target)
    timer = ForwardTimer(model)
    n = args.max_new_tokens
    decode(target, vanilla, prompts[0], 8)  # warm-up, outside the clock
    hf_generate(model, prompts[0], 8)
    ours_s, hf_s, tokens, same = [], [], 0, 0
    ours_fw, hf_fw = 0.0, 0.0
    timer.take()
    for r in range(args.rounds):
        for i, p in enumerate(prompts):
            order = (0, 1) if (i + r) % 2 == 0 else (1, 0)  # alternate who goes first
            for who in order:
                if who == 0:
                    res = decode(target, vanilla, p, n)
                    ours_s.append(res.elapsed_s)
                    ours_fw += timer.take()
                    ours_out = res.output
                else:
                    hf_out, dt = hf_generate(model, p, n)
                    hf_s.append(dt)
                    hf_fw += timer.take()
            tokens += n
            same += ours_out == hf_out
    t_ours, t_hf = sum(ours_s), sum(hf_s)
    # best-of-rounds per prompt: robust to background load (each prompt's fastest run of each runner)
    k = len(prompts)
    best_ours = sum(min(ours_s[i::k]) for i in range(k))
    best_hf = sum(min(hf_s[i::k]) for i in range(k))
    print(f"model={' '.join(args.model)} dtype={args.dtype} threads={torch.get_num_threads()} "
          f"prompts={len(prompts)} x rounds={args.rounds} x {n} new tokens")
    print(f"{'runner':<22}{'tokens':>8}{'seconds':>10}{'tok/s':>10}{'median s/prompt':>17}")
    print(f"{'ours vanilla':<22}{tokens:>8}{t_ours:>10.3f}{tokens / t_ours:>10.1f}{statistics.median(ours_s):>17.4f}")
    print(f"{'hf generate (greedy)':<22}{tokens:>8}{t_hf:>10.3f}{tokens / t_hf:>10.1f}{statistics.median(hf_s):>17.4f}")
    steps = tokens  # one forward per new token for both runners (+ prefill)
    print(f"outside-model time per token: ours {1e6 * (t_ours - ours_fw) / steps:.0f} us, "
          f"hf {1e6 * (t_hf - hf_fw) / steps:.0f} us; inside-model per token: ours {1e6 * ours_fw / steps:.0f} us, "
          f"hf {1e6 * hf_fw / steps:.0f} us")
    print(f"ratio ours/hf tokens/s = {t_hf / t_ours:.3f} (all runs)   {best_hf / best_ours:.3f} (best of "
          f"{args.rounds} rounds per prompt)   identical outputs: {same}/{len(prompts) * args.rounds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
