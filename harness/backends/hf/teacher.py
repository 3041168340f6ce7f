"""Teacher forcing on a transformers model (``HFBackend.loglikelihood`` and
``continuation_scores``): each distinct prompt runs once, batched with other prompts (left
padding); its KV cache rows are then gathered for its continuations (in chunks of `batch_size`),
so only continuation tokens are recomputed and log-softmax is taken only where a continuation
token is predicted.

Prompts that are prefixes of a longer prompt of the same call (the monitor reads one output at
every sentence boundary) share one forward pass: the longest runs once, and each prefix's
continuations start from its KV cache cropped to the prefix (causal attention: the cached keys
and values of the first n tokens do not depend on the tokens after them), so n positions along
an output cost one prefill instead of n."""

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
    out = [0.0] * len(pairs)
    mass = [0.0] * len(pairs)
    sel = torch.tensor(mass_ids, device=device) if mass_ids is not None else None
    fed = 0 if mass_ids is not None else 1  # continuation tokens not fed (the last one, unless mass)
    chains, alone = prefix_chains(list(groups))
    with torch.inference_mode():
        for longest, members in chains:
            keep = torch.tensor([len(q) - 1 for q in members], device=device)  # only these logits
            res = model(input_ids=torch.tensor([list(longest)], device=device), use_cache=True,
                        logits_to_keep=keep)
            for j, q in enumerate(members):
                n = len(q)
                first = torch.log_softmax(res.logits[0, j].float(), dim=-1)
                base = copy.deepcopy(res.past_key_values)
                if n < len(longest):
                    base.crop(n - len(longest))  # drop the tokens after the prefix
                longer = []
                for i in groups[q]:
                    out[i] = float(first[int(pairs[i][1][0])])
                    if len(pairs[i][1]) - fed > 0:
                        longer.append(i)
                for chunk in batches(longer, batch_size):
                    conts = [list(pairs[i][1]) for i in chunk]
                    width = max(len(c) for c in conts) - fed
                    x = torch.full((len(chunk), width), pad_id, dtype=torch.long)
                    for k, c in enumerate(conts):
                        x[k, :len(c) - fed] = torch.tensor(c[:len(c) - fed])
                    cache = copy.deepcopy(base)
                    cache.reorder_cache(torch.zeros(len(chunk), dtype=torch.long, device=device))
                    cpos = n + torch.arange(width, device=device).repeat(len(chunk), 1)
                    cmask = torch.ones((len(chunk), n + width), dtype=torch.long, device=device)
                    logits = model(input_ids=x.to(device), past_key_values=cache, attention_mask=cmask,
                                   position_ids=cpos, use_cache=True).logits
                    for k, (i, c) in enumerate(zip(chunk, conts)):
                        lp = torch.log_softmax(logits[k, :len(c) - fed].float(), dim=-1)
                        tgt = torch.tensor(c[1:], device=device)
                        out[i] += float(lp[:len(c) - 1].gather(-1, tgt[:, None]).sum())
                        if sel is not None:
                            mass[i] = float(torch.logsumexp(lp[len(c) - 1, sel], 0))
        prompts = alone
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


def prefix_chains(prompts: Sequence[tuple[int, ...]]) -> tuple[list[tuple[tuple[int, ...], list[tuple[int, ...]]]],
                                                               list[tuple[int, ...]]]:
    """([(longest prompt, [it and the prompts that are its proper prefixes])], the other prompts):
    a chain is formed wherever some prompt is a proper prefix of a longer one; each prefix joins
    the first longest prompt that extends it."""
    have = set(prompts)
    chains: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    taken: set[tuple[int, ...]] = set()
    for p in sorted(prompts, key=len, reverse=True):
        if p in taken:
            continue
        members = [q for q in (p[:k] for k in range(1, len(p))) if q in have and q not in taken]
        if members:
            chains[p] = [p] + members
            taken.update(chains[p])
    return list(chains.items()), [p for p in prompts if p not in taken]
