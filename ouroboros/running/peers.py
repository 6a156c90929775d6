"""Peer baselines: transformers' own `generate` run on the same prompts, in the same process, and vLLM's engine run
in a worker process of its own (ouroboros/vllm/: `vllm_greedy`, `vllm_ngram`, `vllm_draft`, `vllm_suffix`),
returning the same `RunResult` / `PromptResult` records as `ouroboros.running.harness.run_strategy` (same warm-up
policy:
one short decode on the first prompt still to decode, before any clock reading). `PeerRunner` runs either; which
one is the peer's `engine` (ouroboros/running/peer_configs.py).

Peers (name -> what `generate` is called with; every peer decodes greedily, no repetition penalty):
- `hf_greedy`:   plain greedy `generate`.
- `hf_assisted`: `generate(assistant_model=draft)`; params `num_assistant_tokens` (HF default 20),
  `num_assistant_tokens_schedule` ("constant"), `assistant_confidence_threshold` (0.4), set on a copy of the
  draft's generation config for the call only.
- `hf_pld`:      `generate(prompt_lookup_num_tokens=...)`; params `prompt_lookup_num_tokens` (10),
  `max_matching_ngram_size` (HF default 2).

Per-step records come from a forward pre-hook on the target (PyTorch's public hook API; the model is not
changed): each target forward is one step; its start position is the target cache length, so the tokens
committed by step i are start[i + 1] - start[i] (HF crops the cache to the accepted prefix). Accepted length
is new tokens - 1 per step (the bonus/correction token). `n_match` is not observable from outside `generate`
and is recorded as the accepted count (a lower bound). Time split (draft/verify) is not observable either:
the whole step counts as verify_s. HF's first forward (whole prompt + the first drafts) is step 1 and its
time is also reported as prefill_s.

The vLLM peers' records, timing and pairing: ouroboros/vllm/client.py.

Knows nothing of our strategies or the decode loop.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from ouroboros.backends.base import WallClock
from ouroboros.errors import OuroborosError
from ouroboros.loop.metrics import PromptResult, RunResult, StepRecord
from ouroboros.loop.sampling import SamplingConfig, stream_seed
from ouroboros.running.harness import WARMUP_TOKENS, run_prompts
from ouroboros.running.peer_configs import PEERS
from ouroboros.serving.load import Load, Request, ServeResult
from ouroboros.strategies import make_config
from ouroboros.vllm.client import VLLMPeer, model_dir


def check_peer(name: str, params: dict[str, Any] | None) -> dict[str, Any]:
    """Validated params (defaults filled in, types checked against ouroboros/running/peer_configs.py) or a one-line
    error."""
    if name not in PEERS:
        raise OuroborosError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    return dataclasses.asdict(make_config(name, params))


class _StepTap:
    """Forward pre-hooks recording (cache start, tokens fed, draft forwards so far) per target forward."""

    def __init__(self, target, draft, clock: WallClock):
        self.clock = clock
        self.starts: list[int] = []
        self.fed: list[int] = []
        self.draft_fw_at: list[int] = []
        self.t_first_done: float | None = None
        self.draft_forwards = 0
        self.draft_tokens = 0
        self.handles = [target.register_forward_pre_hook(self._pre, with_kwargs=True),
                        target.register_forward_hook(self._post)]
        if draft is not None:
            self.handles.append(draft.register_forward_pre_hook(self._draft_pre, with_kwargs=True))

    @staticmethod
    def _ids(args, kwargs) -> torch.Tensor:
        ids = kwargs.get("input_ids")
        return ids if ids is not None else args[0]

    @staticmethod
    def _cache_len(kwargs) -> int:
        for key in ("cache", "past_key_values"):
            cache = kwargs.get(key)
            if cache is not None and hasattr(cache, "get_seq_length"):
                return int(cache.get_seq_length())
        pos = kwargs.get("position_ids")
        if pos is not None:
            return int(pos[0, 0])
        return 0

    def _pre(self, module, args, kwargs):
        self.starts.append(self._cache_len(kwargs))
        self.fed.append(int(self._ids(args, kwargs).shape[-1]))
        self.draft_fw_at.append(self.draft_forwards)

    def _post(self, module, args, output):
        if self.t_first_done is None:
            self.t_first_done = self.clock.now()

    def _draft_pre(self, module, args, kwargs):
        self.draft_forwards += 1
        self.draft_tokens += int(self._ids(args, kwargs).shape[-1])

    def close(self) -> None:
        for h in self.handles:
            h.remove()

    def steps(self, prompt_len: int, n_out: int, step_s: float) -> list[StepRecord]:
        """One StepRecord per target forward (see the module docstring for what is and is not observed)."""
        n = len(self.starts)
        committed = [prompt_len] + [s + 1 for s in self.starts[1:]] + [prompt_len + n_out]  # before each step
        draft_fw = self.draft_fw_at[1:] + [self.draft_forwards]
        out = []
        for i in range(n):
            new = committed[i + 1] - committed[i]
            cand = self.fed[i] - (prompt_len if i == 0 else 1)
            acc = max(new - 1, 0)
            dfw = draft_fw[i] - self.draft_fw_at[i]
            out.append(StepRecord(n_nodes=cand, n_candidates=cand, max_depth=cand, accepted=acc, new_tokens=new,
                                  n_match=acc, target_tokens=self.fed[i], draft_forwards=dfw, draft_tokens=0,
                                  draft_s=0.0, verify_s=step_s / max(n, 1), other_s=0.0))
        return out


def _gen_kwargs(name: str, params: dict[str, Any], eos_ids: Sequence[int], pad_id: int,
                sampling: SamplingConfig | None = None) -> dict[str, Any]:
    kw: dict[str, Any] = dict(do_sample=False, num_beams=1, repetition_penalty=1.0, no_repeat_ngram_size=0,
                              temperature=None, top_p=None, top_k=None, min_new_tokens=None,
                              eos_token_id=list(eos_ids), pad_token_id=pad_id, return_dict_in_generate=False)
    if sampling is not None and not sampling.greedy:  # generate's own warpers (same order: temperature, k, p)
        kw.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                  top_k=sampling.top_k or None)
    if name == "hf_pld":
        kw.update(params)
    return kw


@torch.inference_mode()
def generate_one(name: str, params: dict[str, Any], target, draft, prompt: Sequence[int], budget: int,
                 eos_ids: Sequence[int], pid: str, sampling: SamplingConfig | None = None) -> PromptResult:
    """One prompt through `generate` as peer `name` with validated `params` (see `check_peer`). With `sampling`
    (temperature > 0), `generate(do_sample=True)` draws from torch's global RNG, seeded per prompt from
    (seed, prompt id) so runs are reproducible (the draws differ from ours: only speed is comparable)."""
    device = target.get_input_embeddings().weight.device
    clock = WallClock(cuda=device.type == "cuda")
    ids = torch.tensor([list(prompt)], dtype=torch.long, device=device)  # [1, L]
    kw = _gen_kwargs(name, params, eos_ids, eos_ids[0] if eos_ids else 0, sampling)
    if sampling is not None and not sampling.greedy:
        torch.manual_seed(stream_seed(sampling.seed, pid))
    saved = None
    if name == "hf_assisted":  # the assistant's settings live on its generation config: set for this call only
        kw["assistant_model"] = draft
        saved = draft.generation_config
        draft.generation_config = copy.deepcopy(saved)
        for k, v in params.items():
            setattr(draft.generation_config, k, v)
    tap = _StepTap(target, draft if name == "hf_assisted" else None, clock)
    try:
        t0 = clock.now()
        out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=budget, **kw)
        t1 = clock.now()
    finally:
        tap.close()
        if saved is not None:
            draft.generation_config = saved
    gen = out[0, ids.shape[1]:].tolist()
    eos = set(eos_ids)
    for i, t in enumerate(gen):  # generate pads after EOS in batches; batch 1 stops, but cut defensively
        if t in eos:
            gen = gen[: i + 1]
            break
    stop = "eos" if gen and gen[-1] in eos else "budget"
    steps = tap.steps(len(prompt), len(gen), t1 - t0)
    prefill = (tap.t_first_done - t0) if tap.t_first_done is not None else 0.0
    return PromptResult(prompt_id=pid, prompt_len=len(prompt), output=gen, elapsed_s=t1 - t0, prefill_s=prefill,
                        stop_reason=stop, steps=steps,
                        proposer_stats={"draft_tokens_fed": tap.draft_tokens} if draft is not None else {})


def check_peer_models(name: str, draft, eos_ids: Sequence[int]) -> None:
    if not eos_ids:
        raise OuroborosError(f"peer {name!r} needs the model's EOS ids (generate would fall back to its own)")
    if PEERS[name].needs_draft_model and draft is None:
        raise OuroborosError(f"peer {name!r} needs a draft model (set model.draft)")
    if PEERS[name].engine == "vllm" and PEERS[name].needs_draft_model:
        model_dir(draft, "draft")   # vLLM loads it from its folder


class GenerateEngine:
    """transformers' `generate` on our loaded models, in this process (`generate_one`)."""

    def __init__(self, name: str, params: dict[str, Any], target, draft, eos_ids: Sequence[int],
                 sampling: SamplingConfig | None):
        self.name, self.params, self.target, self.draft = name, params, target, draft
        self.eos_ids, self.sampling = tuple(eos_ids), sampling

    def warm_up(self, prompt: Sequence[int], budget: int) -> None:
        self.decode(prompt, budget, "warmup")

    def decode(self, prompt: Sequence[int], budget: int, prompt_id: str) -> PromptResult:
        return generate_one(self.name, self.params, self.target, self.draft, prompt, budget, self.eos_ids,
                            prompt_id, self.sampling)


class PeerRunner:
    """One peer as a `ouroboros.running.harness.PromptRunner` (stock models, not backends): same records, same warm-up.
    Its
    engine is transformers' `generate` here, or vLLM's in its worker process (checked here, started at the warm-up,
    kept until the runner is dropped)."""

    def __init__(self, name: str, params: dict[str, Any] | None, target, draft, eos_ids: Sequence[int] = (),
                 label: str | None = None, sampling: SamplingConfig | None = None):
        self.name, self.params = name, check_peer(name, params)
        check_peer_models(name, draft, eos_ids)
        self.target, self.draft, self.eos_ids = target, draft, tuple(eos_ids)
        self.label, self.sampling = label or name, sampling
        self.engine: GenerateEngine | VLLMPeer = (
            VLLMPeer(name, make_config(name, self.params), target, draft if PEERS[name].needs_draft_model else None,
                     eos_ids, sampling, torch.get_num_threads())
            if PEERS[name].engine == "vllm" else GenerateEngine(name, self.params, target, draft, eos_ids, sampling))

    def warm_up(self, prompt: Sequence[int], budget: int) -> None:
        self.engine.warm_up(prompt, min(WARMUP_TOKENS, budget))

    def __call__(self, prompt: Sequence[int], budget: int, prompt_id: str) -> PromptResult:
        return self.engine.decode(prompt, budget, prompt_id)

    def close(self) -> None:
        """Stop the peer's engine now (vLLM's worker and its memory); transformers' generate holds none."""
        if isinstance(self.engine, VLLMPeer):
            self.engine.close()

    def serve(self, requests: Sequence[Request], load: Load, warmup: bool = True) -> ServeResult:
        """Every request under `load` on the peer's own engine (vLLM's continuous batching); after one short
        untimed request (the engine starts there) when `warmup`."""
        if not isinstance(self.engine, VLLMPeer):
            raise OuroborosError(f"peer {self.name!r} runs transformers' generate one request at a time: it cannot "
                                 "serve under load (serve.concurrency); the vLLM peers can")
        if warmup:
            self.warm_up(requests[0].prompt, requests[0].budget)
        return self.engine.serve(requests, load)


def run_peer(name: str, params: dict[str, Any] | None, target, draft, prompts: Sequence[Sequence[int]],
             max_new_tokens: int | Sequence[int], eos_ids: Sequence[int] = (),
             prompt_ids: Sequence[str] | None = None, warmup: bool = True, progress: bool = False,
             label: str | None = None, sampling: SamplingConfig | None = None) -> RunResult:
    """Run one peer over the prompts (stock models, not backends). Same record shape as `run_strategy`."""
    return run_prompts(PeerRunner(name, params, target, draft, eos_ids, label, sampling), prompts, max_new_tokens,
                       prompt_ids, warmup, progress)
