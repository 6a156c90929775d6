"""`python -m ouroboros.bench.forward`: what one forward over k new tokens costs on this machine, t(k) / t(1), with
torch's own bf16 kernels, with the routed linears (`model.bf16_upcast_rows`, `ouroboros.backends.kernels`) and with
oneDNN's packed weights (`model.bf16_packed`) side by side in one process, the three alternating per k. Drafting pays
off where t(k) stays near t(1).

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
    from ouroboros.backends.models import load_pair, onednn_bf16_available, pack_bf16_linears, upcast_bf16_linears

    try:
        ks = [int(k) for k in a.ks.split(",")]
    except ValueError:
        raise OuroborosError(f"--ks must be comma-separated whole numbers, got {a.ks!r}") from None
    if min(ks) < 1 or a.ctx < 1 or a.repeats < 1 or a.threads < 1:
        raise OuroborosError("--ks need k >= 1, --ctx >= 1, --repeats >= 1 and --threads >= 1")
    torch.set_num_threads(a.threads)
    counts = {"routed": 0, "packed": 0}
    torch.set_grad_enabled(False)
    cfg = parse_kind(a.model, "model")
    cfg["bf16_upcast_rows"] = 0  # load with torch's kernels; routing and packing are switched per measurement below
    cfg["bf16_packed"] = False
    pair = load_pair(cfg, dtype=a.dtype)
    model = pair.target if a.which == "target" else pair.draft
    if model is None:
        raise OuroborosError("this model spec has no draft")
    modes: dict[str, dict] = {"torch": {}}
    for mode, apply in (("routed", lambda: upcast_bf16_linears(model, 1)),   # every forward, any CPU
                        ("packed", lambda: pack_bf16_linears(model, True, free=False) if onednn_bf16_available()
                         else 0)):
        n = apply()
        modes[mode] = {m: vars(m).pop("forward") for m in model.modules() if "forward" in vars(m)}
        counts[mode] = n
    modes = {k: v for k, v in modes.items() if k == "torch" or v}
    g = torch.Generator().manual_seed(0)
    vocab = int(model.config.vocab_size)  # type: ignore[union-attr,arg-type]
    import inspect

    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = model(input_ids=torch.randint(0, vocab, (1, a.ctx), generator=g), use_cache=True)
    cache = out.past_key_values

    def timed(k: int, mode: str) -> float:
        for m in model.modules():
            vars(m).pop("forward", None)
        for m, f in modes[mode].items():
            m.forward = f
        best = float("inf")
        for i in range(a.repeats + 1):
            x = torch.randint(0, vocab, (1, k), generator=g)
            t0 = time.perf_counter()
            model(input_ids=x, use_cache=True, **{kw: cache})
            if i:  # the first is a warm-up
                best = min(best, time.perf_counter() - t0)
            cache.crop(-k)
        return best

    print(f"{a.which}, {a.dtype}, {a.threads} thread(s), ctx {a.ctx}; linear layers routed to the kernel: "
          f"{counts['routed']}, packed by oneDNN: {counts['packed']} (0: that column is left out)")
    print(f"{'k':>4}" + "".join(f" {m + ' ms':>10} {'t(k)/t(1)':>10}" for m in modes))
    base: dict[str, float] = {}
    for k in ks:
        t = {mode: timed(k, mode) for mode in modes}
        base = base or t
        print(f"{k:>4}" + "".join(f" {t[m] * 1e3:>10.1f} {t[m] / base[m]:>10.2f}" for m in modes), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
