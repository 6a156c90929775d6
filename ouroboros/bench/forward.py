"""`python -m ouroboros.bench.forward`: what one forward over k new tokens costs on this machine, t(k) / t(1), with
torch's own bf16 kernels and with the routed linears (`model.bf16_upcast_rows`, `ouroboros.backends.kernels`) side by
side
in one process, the two alternating per k. Drafting pays off where t(k) stays near t(1).

    python -m ouroboros.bench.forward --model qwen-coder --which target --ks 1,2,4,8,16,32 --ctx 150 --threads 1

Not a test: timings are reported, never asserted.
"""

from __future__ import annotations

import sys
import time

import torch

from ouroboros.argparser import ArgumentParser
from ouroboros.errors import OuroborosError, cli


@cli
def main(argv: list[str] | None = None) -> int:
    ap = ArgumentParser(prog="python -m ouroboros.bench.forward", description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="+", default=["qwen-coder"],
                    help="a kind (qwen-coder) or key=value items (kind=hf target=<dir>)")
    ap.add_argument("--which", default="target", choices=["target", "draft"])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--ks", default="1,2,4,8,16,32", help="ratios are to the first k listed")
    ap.add_argument("--ctx", type=int, default=150, help="cached tokens before each timed forward")
    ap.add_argument("--repeats", type=int, default=3, help="timed forwards per (k, mode); the fastest is kept")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    from ouroboros.argparser import parse_kind
    from ouroboros.backends.models import load_pair, upcast_bf16_linears

    try:
        ks = [int(k) for k in a.ks.split(",")]
    except ValueError:
        raise OuroborosError(f"--ks must be comma-separated whole numbers, got {a.ks!r}") from None
    if min(ks) < 1 or a.ctx < 1 or a.repeats < 1 or a.threads < 1:
        raise OuroborosError("--ks need k >= 1, --ctx >= 1, --repeats >= 1 and --threads >= 1")
    torch.set_num_threads(a.threads)
    torch.set_grad_enabled(False)
    cfg = parse_kind(a.model, "model")
    cfg["bf16_upcast_rows"] = 0  # load with torch's kernels; routing is switched per measurement below
    pair = load_pair(cfg, dtype=a.dtype)
    model = pair.target if a.which == "target" else pair.draft
    if model is None:
        raise OuroborosError("this model spec has no draft")
    routed = upcast_bf16_linears(model, None)
    fwd = {m: m.forward for m in model.modules() if "forward" in vars(m)}
    g = torch.Generator().manual_seed(0)
    vocab = int(model.config.vocab_size)  # type: ignore[union-attr,arg-type]
    import inspect

    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = model(input_ids=torch.randint(0, vocab, (1, a.ctx), generator=g), use_cache=True)
    cache = out.past_key_values

    def timed(k: int, use_routed: bool) -> float:
        for m, f in fwd.items():
            if use_routed:
                m.forward = f
            elif "forward" in vars(m):
                del m.forward
        best = float("inf")
        for i in range(a.repeats + 1):
            x = torch.randint(0, vocab, (1, k), generator=g)
            t0 = time.perf_counter()
            model(input_ids=x, use_cache=True, **{kw: cache})
            if i:  # the first is a warm-up
                best = min(best, time.perf_counter() - t0)
            cache.crop(-k)
        return best

    print(f"{a.which}, {a.dtype}, {a.threads} thread(s), ctx {a.ctx}; {routed} linear layers routed "
          f"(0: nothing to route, both columns are torch's kernels)")
    print(f"{'k':>4} {'torch ms':>10} {'t(k)/t(1)':>10} {'routed ms':>10} {'t(k)/t(1)':>10}")
    base: dict[bool, float] = {}
    for k in ks:
        t = {mode: timed(k, mode) for mode in (False, True)}
        base = base or t
        print(f"{k:>4} {t[False] * 1e3:>10.1f} {t[False] / base[False]:>10.2f} {t[True] * 1e3:>10.1f} "
              f"{t[True] / base[True]:>10.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
