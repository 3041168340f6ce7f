"""Teacher forcing on a transformers model (``HFBackend.loglikelihood`` and
``continuation_scores``): each distinct prompt runs once, batched with other prompts (left
padding); its KV cache rows are then gathered for its continuations (in chunks of `batch_size`),
so only continuation tokens are recomputed and log-softmax is taken only where a continuation
token is predicted."""

from __future__ import annotations

import copy
from typing import Any, Sequence

import torch

from harness.core.errors import BackendError
from harness.backends.hf.batches import batches, by_length, left_pad

TokenIds = Sequence[int]


def teacher_force(model: Any, pairs: Sequence[tuple[TokenIds, TokenIds]], mass_ids: list[int] | None,
                  batch_size: int, pad_id: int, device: str) -> list[tuple[float, float]]:
    """(sum of log p(continuation | prompt), log mass of `mass_ids` after the continuation) per
    pair; the mass is 0.0 when `mass_ids` is None (the last continuation token is then not fed)."""
    for (p, c) in pairs:
        if len(p) == 0 or len(c) == 0:
            raise BackendError("loglikelihood needs a non-empty prompt and continuation")
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (p, _) in enumerate(pairs):
        groups.setdefault(tuple(int(t) for t in p), []).append(i)
    prompts = list(groups)
    out = [0.0] * len(pairs)
    mass = [0.0] * len(pairs)
    sel = torch.tensor(mass_ids, device=device) if mass_ids is not None else None
    fed = 0 if mass_ids is not None else 1  # continuation tokens not fed (the last one, unless mass)
    with torch.inference_mode():
        for batch in by_length(prompts, batch_size):
            ids, mask, pos = left_pad([prompts[j] for j in batch], pad_id, device)
            res = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                        logits_to_keep=1)
            first = torch.log_softmax(res.logits[:, -1].float(), dim=-1)
            longer = []  # (pair index, row of its prompt in this batch)
            for r, j in enumerate(batch):
                for i in groups[prompts[j]]:
                    out[i] = float(first[r, int(pairs[i][1][0])])
                    if len(pairs[i][1]) - fed > 0:
                        longer.append((i, r))
            for chunk in batches(longer, batch_size):
                rows = torch.tensor([r for _, r in chunk], device=device)
                conts = [list(pairs[i][1]) for i, _ in chunk]
                width = max(len(c) for c in conts) - fed
                # Right padding: later pad tokens cannot affect earlier positions.
                x = torch.full((len(chunk), width), pad_id, dtype=torch.long)
                for k, c in enumerate(conts):
                    x[k, :len(c) - fed] = torch.tensor(c[:len(c) - fed])
                cache = copy.deepcopy(res.past_key_values)
                cache.reorder_cache(rows)  # gathers (and repeats) the prompts' rows
                pmask = mask.index_select(0, rows)
                start = pmask.sum(-1, keepdim=True)
                cpos = start + torch.arange(width, device=device)
                cmask = torch.cat([pmask, torch.ones((len(chunk), width), dtype=torch.long,
                                                     device=device)], dim=-1)
                logits = model(input_ids=x.to(device), past_key_values=cache,
                               attention_mask=cmask, position_ids=cpos, use_cache=True).logits
                for k, ((i, _), c) in enumerate(zip(chunk, conts)):
                    lp = torch.log_softmax(logits[k, :len(c) - fed].float(), dim=-1)
                    tgt = torch.tensor(c[1:], device=device)
                    out[i] += float(lp[:len(c) - 1].gather(-1, tgt[:, None]).sum())
                    if sel is not None:
                        mass[i] = float(torch.logsumexp(lp[len(c) - 1, sel], 0))
    return list(zip(out, mass))
