"""Lossless verification under random sampling (temperature, top-k, top-p), for every strategy.

The target distribution p at a position is softmax(warp(logits)) with transformers' warper order and
conventions: temperature, then top-k, then top-p (nucleus keeps the smallest set of most likely tokens whose
mass reaches top_p, at least one token). Which rule verifies which draft, and why it is exact:

1. Deterministic trees (greedy draft model, pool phrases, prompt n-grams, retrieved continuations, lookahead
   windows; `Draft.meta` has no "q"): walk from the root; at each node draw x ~ p(node); if a candidate child
   carries x, descend; otherwise emit x and stop. Every emitted token is a draw from p given the emitted prefix,
   whatever the tree, so the output law is exactly the target's. The tree must be fixed before this step's
   draws (it is: proposers build it from earlier steps only). Draws at all nodes are taken in one batch up front
   (independent draws; only those on the walked path are used), so a step costs one device sync.
2. Sampled draft chains (`Draft.meta["q"]`: [n, V] draft distributions the chain was sampled from; e.g.
   speculative with draft_temperature > 0): Leviathan et al. (2023) / Chen et al. (2023) rejection rule --
   accept d_i with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection emit a draw from
   norm(max(0, p_i - q_i)) and stop; if all are accepted emit a draw from p after the last one. Exact by their
   Theorem 1.
3. Sampled multi-candidate siblings (`verify_multi_candidate`, SpecInfer's rule, Miao et al. 2024): children
   c_1..c_k of a node drawn i.i.d. from q: try them in order, accept c_j with probability
   min(1, p(c_j) / q(c_j)), else set p <- norm(max(0, p - q)) and try the next; if none is accepted emit a draw
   from the final residual. Exact by SpecInfer's Theorem 4.2. Provided as a kernel with a distribution test;
   no built-in strategy draws sampled sibling sets today.

#Match in sampling mode counts trunk tokens equal to the target's draw at their position. `Verdict.preds`
carries the target's draws at every node (what proposers harvest from), not argmaxes.

This module knows nothing of models, strategies or the loop; it maps (draft, logits, rng) -> Verdict.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import torch

from ouroboros.checks import check_range
from ouroboros.errors import OuroborosError
from ouroboros.loop.draft import CANDIDATE, Draft
from ouroboros.loop.verify import Verdict, trunk_match


@dataclass
class SamplingConfig:
    temperature: float = 0.0   # 0 = greedy (the default everywhere; the greedy verifier runs)
    top_p: float = 1.0
    top_k: int = 0             # 0 = off
    seed: int = 0

    def __post_init__(self) -> None:
        check_range("temperature", self.temperature, lo=0)
        if not math.isfinite(self.temperature):   # inf flattens every distribution to uniform: not a sampler
            raise OuroborosError(f"sampling.temperature must be a finite number >= 0, got {self.temperature}")
        check_range("top_p", self.top_p, lo=0, hi=1, lo_open=True)
        check_range("top_k", self.top_k, lo=0)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def warp(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """[n, V] logits -> [n, V] probabilities (temperature, top-k, top-p; as transformers' warpers)."""
    x = logits.double() / cfg.temperature  # [n, V]
    if cfg.top_k and cfg.top_k < x.shape[-1]:
        kth = torch.topk(x, cfg.top_k, dim=-1).values[..., -1:]  # [n, 1]
        x = x.masked_fill(x < kth, float("-inf"))
    if cfg.top_p < 1.0:
        srt, idx = torch.sort(x, dim=-1, descending=False)  # ascending, as transformers does
        cum = srt.softmax(-1).cumsum(-1)  # [n, V]
        remove = cum <= (1 - cfg.top_p)
        remove[..., -1] = False  # always keep the most likely token
        x = x.masked_fill(remove.scatter(-1, idx, remove), float("-inf"))
    return x.softmax(-1)


def stream_seed(seed: int, key: str) -> int:
    """The seed of (run seed, prompt key)'s stream."""
    return (seed * 1_000_003 + zlib.crc32(key.encode())) % (2**63)


def seeded_generator(seed: int, key: str, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator whose stream depends only on (seed, key): runs are reproducible whatever the prompt order."""
    g = torch.Generator(device=device)
    g.manual_seed(stream_seed(seed, key))
    return g


def verify_tree_sampling(draft: Draft, probs: torch.Tensor, gen: torch.Generator) -> Verdict:
    """Rule 1. probs: [n + 1, V] target distributions at [root, node 0, ...]."""
    draws = torch.multinomial(probs, 1, generator=gen).squeeze(-1).tolist()  # [n + 1], the step's one sync
    children = draft.children() if not draft.is_chain else None
    toks, kinds = draft.tokens, draft.kinds
    path: list[int] = []
    cur = -1
    while True:
        x = draws[cur + 1]
        nxt = -1
        if children is None:
            c = cur + 1
            if c < len(toks) and toks[c] == x and kinds[c] == CANDIDATE:
                nxt = c
        else:
            for c in children.get(cur, ()):
                if toks[c] == x and kinds[c] == CANDIDATE:
                    nxt = c
                    break
        if nxt < 0:
            return Verdict(path=path, tokens=[toks[i] for i in path] + [x], preds=draws,
                           n_match=trunk_match(draft, draws))
        path.append(nxt)
        cur = nxt


def verify_chain_rejection(draft: Draft, probs: torch.Tensor, q: torch.Tensor, gen: torch.Generator) -> Verdict:
    """Rule 2. probs: [n + 1, V] target; q: [n, V] draft distributions the chain d_0..d_{n-1} was drawn from."""
    n = len(draft)
    d = torch.tensor(draft.tokens, device=probs.device)  # [n]
    p_d = probs[:n].gather(-1, d[:, None]).squeeze(-1)  # [n]
    q_d = q.to(probs).gather(-1, d[:, None]).squeeze(-1)  # [n]
    u = torch.rand(n, generator=gen, device=probs.device, dtype=probs.dtype)  # [n]
    ok = (u * q_d <= p_d).tolist()  # accept iff u < p/q  (q_d > 0: d_i was drawn from q)
    draws = torch.multinomial(probs, 1, generator=gen).squeeze(-1).tolist()  # for #Match and proposers
    m = 0
    while m < n and ok[m]:
        m += 1
    if m == n:
        x = draws[n]
    else:
        resid = (probs[m] - q[m].to(probs)).clamp_min(0)  # [V]
        s = resid.sum()
        x = int(torch.multinomial(resid / s, 1, generator=gen)) if s > 0 else draws[m]
    return Verdict(path=list(range(m)), tokens=draft.tokens[:m] + [x], preds=draws, n_match=trunk_match(draft, draws))


def verify_multi_candidate(p: torch.Tensor, q: torch.Tensor, candidates: list[int],
                           gen: torch.Generator) -> tuple[int, int]:
    """Rule 3 at one node. p, q: [V]; candidates: tokens drawn i.i.d. from q. Returns (accepted index or -1,
    emitted token)."""
    p = p.double().clone()
    q = q.to(p)
    for j, c in enumerate(candidates):
        if float(torch.rand((), generator=gen, device=p.device, dtype=p.dtype)) * float(q[c]) <= float(p[c]):
            return j, c
        p = (p - q).clamp_min(0)
        s = p.sum()
        if s <= 0:  # p was dominated by q: nothing left to correct, p itself is the answer
            break
        p = p / s
    return -1, int(torch.multinomial(p, 1, generator=gen))


class SamplingVerifier:
    """The loop's verifier in sampling mode: rule 2 when the draft carries q, else rule 1.
    `begin(key)` reseeds per prompt (the loop calls it), so seeded runs are reproducible."""

    needs_logits = True
    samples = True

    def __init__(self, cfg: SamplingConfig):
        if cfg.greedy:
            raise OuroborosError("SamplingVerifier needs temperature > 0 (use the greedy verifier for 0)")
        self.cfg = cfg
        self.gen: torch.Generator | None = None
        self._device: torch.device | None = None
        self._key = ""

    def begin(self, key: str) -> None:
        self._key = key
        self.gen = None  # created lazily on the logits' device

    def generator(self, device: torch.device) -> torch.Generator:
        if self.gen is None or self._device != device:
            self.gen = seeded_generator(self.cfg.seed, self._key, device)
            self._device = device
        return self.gen

    def __call__(self, draft: Draft, scores, state) -> Verdict:
        probs = warp(scores.logits, self.cfg)  # [n + 1, V]
        gen = self.generator(probs.device)
        q = draft.meta.get("q")
        if q is not None and len(draft) and draft.is_chain:
            return verify_chain_rejection(draft, probs, q, gen)
        return verify_tree_sampling(draft, probs, gen)
