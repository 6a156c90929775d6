"""`hf` backend: any transformers causal LM through its stock model class (no copied or patched modeling file).

Tree scoring uses the public forward arguments only: explicit `position_ids` (node depth), a ready 4-D additive
attention mask (which `masking_utils` passes through untouched) and a `DynamicCache`. Chains need no mask at
all (plain causal attention). `commit(path, new_tokens)` compacts the accepted nodes' KV into place (in-place
copy along the sequence axis of every cache layer) and trims the rest; `rollback(n)` trims.

Local attention (sliding windows: Mistral, Qwen2 `use_sliding_window`, Gemma 2/3's local layers, Starcoder2,
Phi-3): the cache keeps EVERY layer's full history (a plain `DynamicCache()`, whose slot i is position i), because
a window-sized layer cannot give back the keys a rejected draft pushed out. Chains then get the model's own
window mask; a tree gets a window by node position (`q - k < window`, transformers' `sliding_window_overlay`),
one 4-D mask per layer type (`{"full_attention": m, "sliding_attention": m}`) where a model mixes both.

Some stock attentions cannot take an arbitrary tree (`tree_refusal()` says why, from what the model does,
not from its name): a forward without `position_ids` (positions follow the input order: BLOOM's ALiBi), a
causal mask kept as a buffer and applied by a key's index in the input (GPT-Neo's local layers), a layer
type other than full / sliding attention, or a forward that fails on a small tree probe (Falcon with
ALiBi). Such a model scores chains only; a tree draft is refused with a one-line error, never scored wrongly.

Under load, `score_batch` runs one padded forward over several rows of one model and `HFEngine` is the batched
serving engine built on it. The sequence bookkeeping (tokens, cache length, the score -> commit order, rollback) is
`SequenceBackend`'s, shared with the simulator's backend. `HF` is the backend kind (`BackendKind`, the core's own:
ouroboros/backends/registry.py): its load-time checks, its pair (ouroboros/backends/models.py `load_pair`), its engine.

This module knows nothing of strategies, verification or budgets.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

import torch
from transformers import DynamicCache

from ouroboros.backends.base import BackendKind, OpenPair, Scores, SequenceBackend, WallClock
from ouroboros.errors import OuroborosError
from ouroboros.loop.draft import Draft, additive_mask

_LAYER_TYPES = ("full_attention", "sliding_attention")


def layer_windows(config) -> list[int | None]:
    """Per decoder layer: its attention window (None = full attention), from transformers' own fields
    (`layer_types` where the config has it, else `sliding_window` for every layer). A layer type this
    backend cannot mask is returned as -1."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if types is None:
        n = int(getattr(config, "num_hidden_layers", 0) or 0)
        return [window or None] * n
    return [None if t == "full_attention" else (window if t == "sliding_attention" and window else -1)
            for t in types]


def _index_masked(model) -> bool:
    """True when an attention module applies a precomputed [.., L, L] boolean mask by key index that is not
    plain causal (a local band, e.g. GPT-Neo's `bias` buffer): such a mask cannot follow tree positions."""
    for buf in model.buffers():
        if buf.dtype != torch.bool or buf.dim() < 2 or buf.shape[-1] != buf.shape[-2] or buf.shape[-1] < 2:
            continue
        m = buf.reshape(-1, buf.shape[-2], buf.shape[-1])[0]
        causal = torch.ones_like(m).tril()
        if not torch.equal(m & causal, causal):
            return True
    return False


class HFBackend(SequenceBackend):
    kind = "hf"   # its backend kind's name (`HF`, below)

    def __init__(self, model, max_context: int | None = None, name: str = "model"):
        model.eval()
        ctx = getattr(model.config, "max_position_embeddings", None) or (1 << 30)
        super().__init__(name, min(ctx, max_context) if max_context else ctx)
        self.model = model
        self.config = model.config
        # logits width is what verification indexes; it can exceed the tokenizer's size (padding rows)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.device = model.get_input_embeddings().weight.device
        self.dtype = model.dtype
        self.cache: DynamicCache | None = None
        self.clock = WallClock(cuda=self.device.type == "cuda")
        # transformers >= 5.2x renamed the forward's cache argument; take whichever the stock class has
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._windows = layer_windows(self.config)
        self._has_positions = "position_ids" in params
        self._refusal: str | None = None
        self._probed = False

    def fresh(self) -> HFBackend:
        """A new, empty backend on the same model (its own tokens and cache): one per batch slot."""
        return HFBackend(self.model, self.max_context, self.name)

    # ------------------------------------------------------------------ capability
    def tree_refusal(self) -> str | None:
        """None when this model can score token trees exactly; else why not (one clause). Checked once: the
        model's fields and buffers, then one forward of a 3-node tree probe (no cache is touched)."""
        if not self._probed:
            self._probed = True
            why = self._find_refusal()
            self._refusal = None if why is None else f"{self.config.model_type} models: {why}"
        return self._refusal

    def batch_refusal(self) -> str | None:
        """None when rows of this model can share one padded forward (`score_batch`); else why not (one clause)."""
        if any(w is not None for w in self._windows):
            return f"{self.config.model_type} models have sliding-window layers here"
        if not self._has_positions or getattr(self.config, "alibi", False):
            return (f"{self.config.model_type} models take positions from ALiBi biases over the input order, which "
                    "padded rows would shift")
        return None

    def _find_refusal(self) -> str | None:
        if not self._has_positions:
            return "its forward takes no position_ids (positions follow the input order, e.g. ALiBi)"
        if any(w == -1 for w in self._windows):
            kinds = sorted(set(getattr(self.config, "layer_types", ())) - set(_LAYER_TYPES))
            return f"it has layers of type {', '.join(kinds)}, which a tree mask cannot express"
        if _index_masked(self.model):
            return "its local attention masks keys by their index in the input, not by their position"
        try:  # two siblings under one root: positions [0, 1, 1]
            with torch.inference_mode():
                ids = torch.tensor([[1, 2, 3]], device=self.device)  # [1, 3]
                pos = torch.tensor([[0, 1, 1]], device=self.device)
                self.model(input_ids=ids, position_ids=pos, attention_mask=self._tree_mask([-1, 0, 0], 0, 0),
                           use_cache=False)
        except Exception as e:  # noqa: BLE001 - any failure means: no trees on this model
            return f"its forward fails on a tree mask ({type(e).__name__}: {str(e)[:120]})"
        return None

    def _tree_mask(self, parents: list[int], n_pending: int, base: int):
        """The tree's additive mask(s): one [1, 1, q, base + q] tensor, or one per layer type when layers
        mix full and sliding attention."""
        kinds = set(self._windows) or {None}  # a config that lists no layers: one full-attention mask
        masks = {w: additive_mask(parents, n_pending, base, self.dtype, self.device, window=w) for w in kinds}
        if len(masks) == 1:
            return next(iter(masks.values()))
        return {"full_attention" if w is None else "sliding_attention": m for w, m in masks.items()}

    # ------------------------------------------------------------------ forward
    def _forward(self, ids: list[int], positions: list[int] | None, mask, keep: int):
        ids_t = torch.tensor([ids], dtype=torch.long, device=self.device)  # [1, q]
        if positions is None:
            pos_t = torch.arange(self.cache_len, self.cache_len + len(ids), device=self.device).unsqueeze(0)  # [1, q]
        else:
            pos_t = torch.tensor([positions], dtype=torch.long, device=self.device)
        out = self.model(input_ids=ids_t, position_ids=pos_t, attention_mask=mask, use_cache=True,
                         logits_to_keep=keep, **{self._cache_kw: self.cache})
        return out.logits[0]  # [keep, V]

    @torch.inference_mode()
    def top2_margin(self, prefix: list[int]) -> float:
        """The target's top-1 minus top-2 logit after `prefix`, from a fresh forward (the cache is not touched):
        how close a divergence's position is to a tie (ouroboros/running/divergence.py)."""
        ids = torch.tensor([prefix], dtype=torch.long, device=self.device)  # [1, L]
        logits = self.model(input_ids=ids, logits_to_keep=1, use_cache=False).logits[0, -1]  # [V]
        top = torch.topk(logits.float(), 2).values
        return float(top[0] - top[1])

    def _restart(self, prompt: list[int]) -> None:
        self.cache = DynamicCache()  # full-history layers everywhere (module docstring: local attention)

    @torch.inference_mode()
    def _prefill_forward(self, k: int) -> None:
        self._forward(self.tokens[:k], None, None, keep=1)

    def _score_inputs(self, draft: Draft) -> tuple[list[int], list[int] | None, int]:
        """(ids, positions or None = plain causal, pending count) of the forward that scores `draft`."""
        n_p = self._pending()
        pending = self.tokens[self.cache_len:]
        if draft.is_chain:
            return pending + draft.tokens, None, n_p
        if self.tree_refusal() is not None:
            raise OuroborosError(f"the {self.name} model cannot score a token tree ({self.tree_refusal()})")
        base = self.cache_len
        positions = list(range(base, base + n_p)) + [base + n_p + d for d in draft.depths]
        return pending + draft.tokens, positions, n_p

    def _scored(self, logits, n_p: int, n: int, want_logits: bool) -> Scores:
        self._count_score(n_p, n)
        preds = logits.argmax(-1).tolist()  # the step's one deliberate device sync
        return Scores(preds=preds, logits=logits if want_logits else None)

    @torch.inference_mode()
    def score(self, draft: Draft, want_logits: bool = False) -> Scores:
        ids, positions, n_p = self._score_inputs(draft)
        n = len(draft)
        mask = None if positions is None else self._tree_mask(draft.parents, n_p, self.cache_len)
        logits = self._forward(ids, positions, mask, keep=n + 1)  # [n + 1, V]
        return self._scored(logits, n_p, n, want_logits)

    # ------------------------------------------------------------------ cache edits
    def _layers(self):
        return self.cache.layers  # type: ignore[union-attr]

    def _trim(self, length: int) -> None:
        for layer in self._layers():
            if layer.keys is not None and layer.keys.shape[-2] > length:
                layer.keys = layer.keys[..., :length, :]
                layer.values = layer.values[..., :length, :]

    @torch.inference_mode()
    def _keep(self, path: list[int], base: int, new_tokens: list[int]) -> None:
        """The accepted nodes' KV (base = where the draft nodes' KV starts) moves into place: an in-place copy
        along the sequence axis when a non-first branch was accepted; `_forget` trims the rest."""
        m = len(path)
        if path != list(range(m)):
            src = torch.tensor([base + p for p in path], dtype=torch.long, device=self.device)  # [m]
            for layer in self._layers():
                layer.keys[..., base:base + m, :] = layer.keys.index_select(-2, src.to(layer.keys.device))
                layer.values[..., base:base + m, :] = layer.values.index_select(-2, src.to(layer.values.device))

    def _forget(self) -> None:
        self._trim(self.cache_len)


@torch.inference_mode()
def score_batch(backends: list[HFBackend], drafts: list[Draft], want_logits: list[bool]) -> list[Scores]:
    """ONE forward of a shared model over several sequences, each an `HFBackend` on that model with its own cache
    and draft tree: the rows of a batch. Each row's cached KV is left-padded to the longest (padding is masked),
    its pending tokens + tree nodes right-padded to the widest row (padding queries see only themselves), with
    per-row positions and a per-row 4-D tree mask; afterwards each row's new KV is appended to its own cache, so
    `commit` / `rollback` work per row exactly as after `score`. Every row gets the predictions its own `score`
    would give (exact in fp64: tests/test_batch.py)."""
    if len(backends) == 1:
        return [backends[0].score(drafts[0], want_logits[0])]
    b0 = backends[0]
    if any(b.model is not b0.model for b in backends):
        raise RuntimeError("score_batch: every row must run on the same model")
    why = b0.batch_refusal()
    if why:
        raise OuroborosError(f"batched decoding cannot run here: {why}")
    inputs = [b._score_inputs(d) for b, d in zip(backends, drafts, strict=True)]
    bases = [b.cache_len for b in backends]
    n_rows, L = len(backends), max(bases)
    Q = max(len(ids) for ids, _, _ in inputs)
    dev, dt = b0.device, b0.dtype
    ids_t = torch.zeros(n_rows, Q, dtype=torch.long)
    pos_t = torch.zeros(n_rows, Q, dtype=torch.long)
    mask = torch.full((n_rows, 1, Q, L + Q), torch.finfo(dt).min, dtype=dt)
    for r, (d, (ids, positions, n_p), base) in enumerate(zip(drafts, inputs, bases, strict=True)):
        q = len(ids)
        ids_t[r, :q] = torch.tensor(ids)
        pos_t[r, :q] = torch.tensor(positions) if positions is not None else torch.arange(base, base + q)
        m = additive_mask(d.parents, n_p, base, dt)[0, 0]  # [q, base + q]
        mask[r, 0, :q, L - base:L] = m[:, :base]
        mask[r, 0, :q, L:L + q] = m[:, base:]
        for i in range(q, Q):  # padding queries attend to themselves only (no all-masked softmax row)
            mask[r, 0, i, L + i] = 0
    cache = DynamicCache()
    if L > 0:
        ref = next(b for b, base in zip(backends, bases, strict=True) if base == L)
        for li, layer in enumerate(ref._layers()):
            ks: list[torch.Tensor] = []
            vs: list[torch.Tensor] = []
            for b, base in zip(backends, bases, strict=True):
                k = b._layers()[li].keys if base else None
                v = b._layers()[li].values if base else None
                pad = L - base
                if pad:
                    z = layer.keys.new_zeros(layer.keys.shape[:-2] + (pad, layer.keys.shape[-1]))
                    k = z if k is None else torch.cat([z, k], dim=-2)
                    v = z if v is None else torch.cat([z, v], dim=-2)
                ks.append(k)  # type: ignore[arg-type]
                vs.append(v)  # type: ignore[arg-type]
            cache.update(torch.cat(ks), torch.cat(vs), li)
    first = min(n_p - 1 for _, _, n_p in inputs)  # the earliest query whose logits some row needs
    keep = Q - first
    out = b0.model(input_ids=ids_t.to(dev), position_ids=pos_t.to(dev), attention_mask=mask.to(dev), use_cache=True,
                   logits_to_keep=keep, **{b0._cache_kw: cache})
    logits = out.logits  # [rows, keep, V]
    scores = []
    for r, (b, d, (ids, _, n_p), wl) in enumerate(zip(backends, drafts, inputs, want_logits, strict=True)):
        q, n = len(ids), len(d)
        for li, layer in enumerate(cache.layers):
            keys, values = layer.keys, layer.values  # type: ignore[union-attr]
            assert keys is not None and values is not None and b.cache is not None
            b.cache.update(keys[r:r + 1, :, L:L + q], values[r:r + 1, :, L:L + q], li)
        scores.append(b._scored(logits[r, n_p - 1 - first:q - first], n_p, n, wl))
    return scores


class HFEngine:
    """The hf backend's batched-serving engine (ouroboros/serving/scheduler.py `Engine`): one real forward over a
    batch's rows (`score_batch`), timed by the wall clock; each prefill is its own forward."""

    def __init__(self, cuda: bool = False) -> None:
        self.clock = WallClock(cuda=cuda)

    @classmethod
    def for_backend(cls, backend: HFBackend, prefill: str = "separate") -> HFEngine:
        """The engine for a pair whose target is `backend` (prefills are separate forwards on hf, whatever asked)."""
        return cls(cuda=backend.device.type == "cuda")

    def forward(self, backends: list[HFBackend], drafts: list[Draft], want: list[bool]) -> list[Scores]:
        return score_batch(backends, drafts, want)

    def prefill(self, backend: HFBackend, prompt: list[int]) -> None:
        backend.prefill(prompt)

    def settle(self, backends: list[HFBackend]) -> None:
        pass


class HFKind(BackendKind):
    """backend=hf: real transformers models (ouroboros/backends/models.py loads them), timed by the wall clock; peers
    run on
    them, prompts are read with their tokenizer, each prefill under load is its own forward."""

    name = HFBackend.kind
    runs_peers = True
    model_tokenizer = True

    def setup(self, run: Any) -> None:
        from ouroboros.backends.models import check_device, parse_dtype
        from ouroboros.checks import check_range

        parse_dtype(run.backend.dtype)
        check_device(run.backend.device)
        check_range("backend.threads", run.backend.threads, lo=0)

    def check_serving(self, run: Any, session: Any, budgets: list[int]) -> None:
        """At concurrency >= 2 every model the strategy runs must take padded batched forwards (not sliding
        windows, not ALiBi)."""
        from ouroboros.strategies import get_spec

        c = run.serve.concurrency
        if c < 2:
            return
        needs = [session.target] + ([session.draft] if session.draft is not None and get_spec(run.strategy.name)
                                    .needs_draft_model else [])
        for be in needs:
            why = be.batch_refusal() if isinstance(be, HFBackend) else None
            if why:
                raise OuroborosError(f"serve.concurrency={c} decodes requests in batched forwards, but {why}: run "
                                     "every strategy on this model with serve.concurrency=0 or 1")

    def open_pair(self, run: Any, stand_in: bool = False) -> OpenPair:
        from ouroboros.backends.models import load_pair

        if run.backend.threads:
            torch.set_num_threads(run.backend.threads)
        if run.model.get("kind") != "tiny" and run.logger.console:   # real weights: converting and loading take minutes
            what = run.model["target"] if isinstance(run.model.get("target"), str) else run.model.get("kind")
            print(f"loading {what} ({run.backend.dtype} on {run.backend.device}) ...", file=sys.stderr, flush=True)
        loaded = load_pair(run.model, dtype=run.backend.dtype, device=run.backend.device)
        target = HFBackend(loaded.target, name="target")
        draft = HFBackend(loaded.draft, name="draft") if loaded.draft is not None else None
        return OpenPair(target, draft, loaded.tokenizer, tuple(loaded.eos_ids), margin=target.top2_margin)

    def engine(self, backend: Any, prefill: str) -> HFEngine:
        return HFEngine.for_backend(backend, prefill)


HF = HFKind()
