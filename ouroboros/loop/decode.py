"""THE decode loop: propose -> score -> verify -> commit -> observe -> record. One loop for every strategy.

It knows nothing of Hydra, wandb, tokenizers or which strategy it runs: a strategy is a `Proposer` (one
module under `ouroboros/strategies/`), a scorer is a `Backend` (hf or sim), a verification rule is a function
`(draft, scores, state) -> Verdict`. A proposer that needs a model runs this same loop on that model
(`run_steps`), e.g. Ouroboros' lookahead drafter or a vertical cascade.

Budget rules: never emits past the first EOS token nor past max_new_tokens, even when the verified path is
longer (the path is cut and only the kept part is committed); stops when the model context is full.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ouroboros.errors import OuroborosError
from ouroboros.loop.contracts import Backend, DecodeState, Proposer, Scores, Verifier
from ouroboros.loop.draft import CANDIDATE, Draft
from ouroboros.loop.metrics import PromptResult, StepRecord
from ouroboros.loop.verify import Verdict, verify_greedy


class GreedyVerifier:
    """The greedy rule (ouroboros/loop/verify.py): needs the argmaxes only, draws nothing."""

    needs_logits = False
    samples = False

    def begin(self, key: str) -> None:
        pass

    def __call__(self, draft: Draft, scores: Scores, state: DecodeState) -> Verdict:
        return verify_greedy(draft, scores.preds, count_match=state.record)


greedy_verifier = GreedyVerifier()


@dataclass
class LoopResult:
    output: list[int]
    steps: list[StepRecord]
    stop_reason: str


def check_request(target: Backend, prompt: Sequence[int], max_new_tokens: int, prompt_id: str | None = None) -> None:
    if len(prompt) == 0:
        raise OuroborosError("empty prompt: give at least one token")
    if max_new_tokens <= 0:
        raise OuroborosError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if len(prompt) >= target.max_context:
        name = f"prompt {prompt_id!r}" if prompt_id is not None else "prompt"
        raise OuroborosError(f"{name} of {len(prompt)} tokens does not fit the model context of {target.max_context}")
    bad = [t for t in prompt if not 0 <= t < target.vocab_size]
    if bad:
        raise OuroborosError(f"prompt token {bad[0]} is outside the vocabulary [0, {target.vocab_size})")


def run_steps(target: Backend, proposer: Proposer, max_new_tokens: int, eos_ids: frozenset[int] = frozenset(),
              verifier: Verifier = greedy_verifier, prompt_len: int | None = None, record: bool = True,
              stop_at: int | None = None) -> LoopResult:
    """Decode up to `max_new_tokens` from the backends' current (already prefilled) state. record=False skips
    step 7 (the StepRecords; an inner drafting loop whose caller keeps only the output). stop_at: also stop once
    at least this many tokens are out, keeping all of the last step's (still at most `max_new_tokens`): a
    drafter whose last multi-token step may overshoot its length, as Ouroboros' official drafter does."""
    clock = target.clock
    dc = proposer.counters
    room = target.max_context - len(target.tokens)
    state = DecodeState(tokens=target.tokens, prompt_len=len(target.tokens) if prompt_len is None else prompt_len,
                        remaining=min(max_new_tokens, room), room=room,
                        sampler=verifier if verifier.samples else None, record=record)
    out: list[int] = []
    steps: list[StepRecord] = []
    stop = "budget" if max_new_tokens <= room else "context"
    # logits for a sampling verifier, or for a proposer that learns from every row (`reads_logits`: Token Recycling)
    want_logits = verifier.needs_logits or proposer.reads_logits
    soft = max_new_tokens if stop_at is None else stop_at
    while state.remaining > 0 and len(out) < soft:
        f0, k0 = dc.forwards, dc.tokens
        t0 = clock.now()
        # 1. draft: a token tree (empty for vanilla)
        draft = proposer.propose(state)
        t1 = clock.now()
        # 2. score: ONE target forward over pending tokens + the whole tree
        fed = len(target.tokens) - target.cache_len + len(draft)
        scores = target.score(draft, want_logits=want_logits)
        # 3. verify: accepted root-to-leaf path + bonus token
        verdict = verifier(draft, scores, state)
        t2 = clock.now()
        # 4. cut at the budget and after the first EOS (done before commit so only kept tokens are committed)
        new = verdict.tokens[: state.remaining]
        hit_eos = False
        if eos_ids:
            for i, t in enumerate(new):
                if t in eos_ids:
                    new, hit_eos = new[: i + 1], True
                    break
        if len(new) < len(verdict.tokens):  # the proposer observes exactly what was committed
            verdict = replace(verdict, path=verdict.path[: len(new)], tokens=new)
        # 5. commit: keep the accepted nodes' state, drop the rest
        target.commit(verdict.path, new)
        out.extend(new)
        state.remaining -= len(new)
        state.room -= len(new)
        # 6. observe: pool harvesting, draft-side rollback, ...
        proposer.observe(verdict, scores, state)
        t3 = clock.now()
        # 7. record
        if record:
            steps.append(step_record(draft, verdict, len(new), fed, dc.forwards - f0, dc.tokens - k0,
                                     t1 - t0, t2 - t1, t3 - t2))
        if hit_eos:
            stop = "eos"
            break
    return LoopResult(out, steps, stop)


def step_record(draft: Draft, verdict: Verdict, new_tokens: int, fed: int, draft_forwards: int, draft_tokens: int,
                draft_s: float, verify_s: float, other_s: float) -> StepRecord:
    kinds = draft.kinds
    n_cand = len(kinds) - sum(kinds)  # PROBE == 1
    src = None
    if verdict.path:
        srcs = draft.sources
        src = dict(Counter(srcs[i] for i in verdict.path))
    return StepRecord(
        n_nodes=len(draft), n_candidates=n_cand, max_depth=max_candidate_depth(draft, n_cand),
        accepted=len(verdict.path), new_tokens=new_tokens, n_match=verdict.n_match, target_tokens=fed,
        draft_forwards=draft_forwards, draft_tokens=draft_tokens, draft_s=draft_s, verify_s=verify_s,
        other_s=other_s, accepted_sources=src)


def max_candidate_depth(draft: Draft, n_cand: int | None = None) -> int:
    """Depth of the deepest candidate (never-accepted probes excluded); 0 for an empty draft. `n_cand`: the
    draft's candidate count when the caller has it."""
    if n_cand is None:
        n_cand = len(draft.kinds) - sum(draft.kinds)  # PROBE == 1
    if n_cand == 0:
        return 0
    if draft.is_chain:
        return len(draft)
    return 1 + max(d for d, k in zip(draft.depths, draft.kinds, strict=True) if k == CANDIDATE)


def decode(target: Backend, proposer: Proposer, prompt: Sequence[int], max_new_tokens: int,
           eos_ids: Sequence[int] = (), verifier: Verifier = greedy_verifier, prompt_id: str = "0") -> PromptResult:
    """Prefill target and proposer with `prompt`, then run the loop. Returns the prompt's full record."""
    check_request(target, prompt, max_new_tokens, prompt_id)
    prompt = [int(t) for t in prompt]
    clock = target.clock
    verifier.begin(prompt_id)  # sampling verifiers reseed per prompt (reproducible runs)
    t_start = clock.now()
    target.prefill(prompt)
    proposer.begin(prompt)
    t_prefill = clock.now()
    res = run_steps(target, proposer, max_new_tokens, frozenset(int(e) for e in eos_ids), verifier, len(prompt))
    t_end = clock.now()
    return PromptResult(prompt_id=prompt_id, prompt_len=len(prompt), output=res.output, elapsed_s=t_end - t_start,
                        prefill_s=t_prefill - t_start, stop_reason=res.stop_reason, steps=res.steps,
                        proposer_stats=proposer.stats())
