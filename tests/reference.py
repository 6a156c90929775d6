"""Independent reference greedy decoder: no cache, no loop, no project code. The losslessness oracle."""

import torch


@torch.no_grad()
def reference_greedy(model, prompt, max_new_tokens, eos_ids=()):
    ids = list(prompt)
    out = []
    for _ in range(max_new_tokens):
        logits = model(torch.tensor([ids])).logits[0, -1]  # [V]
        nxt = int(logits.argmax())
        ids.append(nxt)
        out.append(nxt)
        if nxt in eos_ids or len(ids) >= model.config.max_position_embeddings:
            break
    return out
