"""Teacher forcing on a transformers model (``HFBackend.loglikelihood`` and
``continuation_scores``), one pass over each prompt's KV cache.

Each distinct prompt runs once, batched with other prompts (left padding, :func:`run_prompts`);
a :class:`PromptBatch` keeps the batch's KV cache and the log-softmax at each prompt's last
position (the first continuation token's distribution). ``HFBackend`` keeps the batches of its
last first-token call (``next_token_logprobs`` / ``next_token_view``), so the continuations that
tokenizer-aware scoring asks for right after reuse them: the prompts are not run again (issue 23).

The continuations of a batch then run in **one forward per batch** over its KV cache, all of a
prompt's continuations side by side in its row after the prompt ("tree" attention): a 4-D
attention mask lets each continuation token see its prompt and the earlier tokens of its own
continuation only, positions restart after the prompt for each continuation, so every token gets
the same attention inputs as when its continuation runs alone; nothing of the prompt is copied
per continuation. The KV cache is restored after the forward (the appended keys and values are
dropped). Models whose cache is not plain full attention (sliding-window or linear-attention
layers) take :func:`_gathered`: the prompts' KV rows repeated per continuation, in chunks of
`batch_size` (the path before issue 23's last round). Log-softmax is taken only where a
continuation token is predicted, in float32 as in :meth:`HFBackend.next_token_logprobs`.

Prompts that are prefixes of a longer prompt of the same call (the monitor reads one output at
every sentence boundary) share one forward pass (:func:`chain_prompts`): the longest runs once,
and each prefix's continuations start from its KV cache cropped to the prefix, so n positions
along an output cost one prefill instead of n.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch

from harness.core.errors import BackendError
from harness.backends.hf.batches import left_pad
from harness.core.batching import batches, by_length

TokenIds = Sequence[int]

# Most logits one continuation forward may hold (float32 elements: 256 MiB); longer rows are
# split into several forwards over the same cache.
LOGIT_BUDGET = 1 << 26


@dataclass
class PromptBatch:
    """One left-padded batch of prompts after their forward: `prompts[r]` is row r of `cache`
    and `mask`; `first[r]` the float32 log-softmax after prompt r."""

    prompts: list[tuple[int, ...]]
    cache: Any
    mask: torch.Tensor
    first: torch.Tensor

    def nbytes(self) -> int:
        n = self.first.numel() * self.first.element_size()
        for layer in getattr(self.cache, "layers", ()):
            for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
                if isinstance(t, torch.Tensor):
                    n += t.numel() * t.element_size()
        return n


def run_prompts(model: Any, prompts: Sequence[TokenIds], batch_size: int, pad_id: int,
                device: str) -> Iterable[PromptBatch]:
    """Each prompt's forward (length-sorted batches, left padding), keeping the KV cache."""
    prompts = [tuple(int(t) for t in p) for p in prompts]
    with torch.inference_mode():
        for batch in by_length(prompts, batch_size):
            ids, mask, pos = left_pad([prompts[j] for j in batch], pad_id, device)
            res = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                        logits_to_keep=1)
            first = torch.log_softmax(res.logits[:, -1].float(), dim=-1)
            yield PromptBatch([prompts[j] for j in batch], res.past_key_values, mask, first)


def chain_prompts(model: Any, chains: Sequence[tuple[tuple[int, ...], list[tuple[int, ...]]]],
                  device: str) -> Iterable[PromptBatch]:
    """Per chain (a prompt and its proper prefixes among the call's prompts, :func:`prefix_chains`)
    one forward of the longest; then, per member, a one-row :class:`PromptBatch` whose KV cache is
    that forward's, cropped to the member (causal attention: the keys and values of the first n
    tokens do not depend on the tokens after them)."""
    for longest, members in chains:
        keep = torch.tensor([len(q) - 1 for q in members], device=device)  # only these logits
        res = model(input_ids=torch.tensor([list(longest)], device=device), use_cache=True,
                    logits_to_keep=keep)
        for j, q in enumerate(members):
            cache = copy.deepcopy(res.past_key_values)
            if len(q) < len(longest):
                cache.crop(len(q) - len(longest))  # drop the tokens after the prefix
            first = torch.log_softmax(res.logits[:, j].float(), dim=-1)
            yield PromptBatch([q], cache, torch.ones((1, len(q)), dtype=torch.long, device=device), first)


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


Known = dict[tuple[int, ...], tuple[PromptBatch, int]]


def teacher_force(model: Any, pairs: Sequence[tuple[TokenIds, TokenIds]], mass_ids: list[int] | None,
                  batch_size: int, pad_id: int, device: str, known: Known | None = None
                  ) -> list[tuple[float, float]]:
    """(sum of log p(continuation | prompt), log mass of `mass_ids` after the continuation) per
    pair; the mass is 0.0 when `mass_ids` is None (the last continuation token is then not fed).
    Prompts in `known` (prompt -> (its batch, its row)) are not run again."""
    for (p, c) in pairs:
        if len(p) == 0 or len(c) == 0:
            raise BackendError("loglikelihood needs a non-empty prompt and continuation")
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (p, _) in enumerate(pairs):
        groups.setdefault(tuple(int(t) for t in p), []).append(i)
    known = known or {}
    out = [0.0] * len(pairs)
    mass = [0.0] * len(pairs)
    conts = [[int(t) for t in c] for _, c in pairs]
    sel = torch.tensor(mass_ids, device=device) if mass_ids is not None else None
    kept: dict[int, tuple[PromptBatch, dict[int, list[int]]]] = {}  # id(batch) -> (batch, row -> pairs)
    for p, idx in groups.items():
        if p in known:
            pb, r = known[p]
            kept.setdefault(id(pb), (pb, {}))[1].setdefault(r, []).extend(idx)
    todo = [p for p in groups if p not in known]
    chains, todo = prefix_chains(todo)
    work = list(kept.values())
    with torch.inference_mode():
        for pb, rows in work:
            _continue(model, pb, rows, conts, sel, out, mass, batch_size, pad_id, device)
        for pb in chain_prompts(model, chains, device):
            _continue(model, pb, {0: groups[pb.prompts[0]]}, conts, sel, out, mass, batch_size,
                      pad_id, device)
        for pb in run_prompts(model, todo, batch_size, pad_id, device):
            rows = {r: groups[p] for r, p in enumerate(pb.prompts)}
            _continue(model, pb, rows, conts, sel, out, mass, batch_size, pad_id, device)
    return list(zip(out, mass))


def _continue(model: Any, pb: PromptBatch, rows: dict[int, list[int]], conts: list[list[int]],
              sel: torch.Tensor | None, out: list[float], mass: list[float], batch_size: int,
              pad_id: int, device: str) -> None:
    """The continuations of the pairs in `rows` (batch row -> pair indices) over `pb`'s cache."""
    fed = 0 if sel is not None else 1  # continuation tokens not fed (the last one, unless mass)
    items: dict[int, list[int]] = {}  # row -> pairs with tokens to feed
    for r, idx in rows.items():
        for i in idx:
            out[i] = float(pb.first[r, conts[i][0]])
            if len(conts[i]) - fed > 0:
                items.setdefault(r, []).append(i)
    if not items:
        return
    if _tree_ok(model, pb.cache):
        _tree(model, pb, items, conts, fed, sel, out, mass, pad_id, device)
    else:
        _gathered(model, pb, [(i, r) for r, idx in items.items() for i in idx], conts, fed, sel,
                  out, mass, batch_size, pad_id, device)


def _tree_ok(model: Any, cache: Any) -> bool:
    """Whether a custom 4-D mask reaches every layer unchanged: plain full-attention caches and
    the sdpa / eager attention implementations."""
    from transformers.cache_utils import DynamicLayer

    layers = getattr(cache, "layers", None)
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers) and \
        impl in ("sdpa", "eager")


def _tree(model: Any, pb: PromptBatch, items: dict[int, list[int]], conts: list[list[int]], fed: int,
          sel: torch.Tensor | None, out: list[float], mass: list[float], pad_id: int, device: str) -> None:
    """All continuations of each row side by side after its prompt, one forward per segment."""
    n_rows, width_p = pb.mask.shape
    vocab = pb.first.shape[-1]
    longest = max(len(conts[i]) - fed for idx in items.values() for i in idx)
    cap = max(longest, LOGIT_BUDGET // max(1, n_rows * vocab))
    queue = {r: list(idx) for r, idx in items.items()}
    start = pb.mask.sum(-1)  # each prompt's length: the first continuation position
    layers = pb.cache.layers
    while any(queue.values()):
        seg: dict[int, list[tuple[int, int]]] = {}  # row -> (pair, offset)
        for r, q in queue.items():
            o = 0
            while q and o + len(conts[q[0]]) - fed <= cap:
                seg.setdefault(r, []).append((q[0], o))
                o += len(conts[q.pop(0)]) - fed
        width = max(o + len(conts[i]) - fed for s in seg.values() for i, o in s)
        x = torch.full((n_rows, width), pad_id, dtype=torch.long)
        pos = start[:, None].expand(n_rows, width).clone().cpu()
        # attention: each token sees its prompt (not the padding) and its own continuation so far;
        # a padding query sees itself only (keeps its row finite)
        allow = torch.zeros((n_rows, width, width_p + width), dtype=torch.bool)
        allow[:, :, :width_p] = pb.mask.bool().cpu()[:, None, :]
        allow[:, torch.arange(width), width_p + torch.arange(width)] = True
        for r, s in seg.items():
            for i, o in s:
                n = len(conts[i]) - fed
                x[r, o:o + n] = torch.tensor(conts[i][:n])
                pos[r, o:o + n] = int(start[r]) + torch.arange(n)
                allow[r, o:o + n, width_p + o:width_p + o + n] = torch.ones(n, n, dtype=torch.bool).tril()
        for r in range(n_rows):  # padding queries: nothing of the prompt
            used = torch.zeros(width, dtype=torch.bool)
            for i, o in seg.get(r, ()):
                used[o:o + len(conts[i]) - fed] = True
            allow[r, ~used, :width_p] = False
        dtype = pb.cache.layers[0].keys.dtype
        bias = torch.zeros(allow.shape, dtype=dtype)
        bias.masked_fill_(~allow, torch.finfo(dtype).min)
        saved = [(layer.keys, layer.values) for layer in layers]
        try:
            logits = model(input_ids=x.to(device), past_key_values=pb.cache,
                           attention_mask=bias[:, None].to(device), position_ids=pos.to(device),
                           use_cache=True).logits
        finally:
            for layer, (k, v) in zip(layers, saved):
                layer.keys, layer.values = k, v
        lp = torch.log_softmax(logits.float(), dim=-1)
        tr, tc, tt, owner = [], [], [], []  # teacher-forced targets: row, column, token, pair
        mr, mc, mown = [], [], []           # mass positions
        for r, s in seg.items():
            for i, o in s:
                c = conts[i]
                for k in range(1, len(c)):
                    tr.append(r), tc.append(o + k - 1), tt.append(c[k]), owner.append(i)
                if sel is not None:
                    mr.append(r), mc.append(o + len(c) - 1), mown.append(i)
        if tr:
            vals = lp[torch.tensor(tr, device=lp.device), torch.tensor(tc, device=lp.device),
                      torch.tensor(tt, device=lp.device)].double().tolist()
            for i, v in zip(owner, vals):
                out[i] += v
        if mr:
            rows_lp = lp[torch.tensor(mr, device=lp.device), torch.tensor(mc, device=lp.device)]
            vals = torch.logsumexp(rows_lp[:, sel], dim=-1).tolist()
            for i, v in zip(mown, vals):
                mass[i] = float(v)
        del logits, lp


def _gathered(model: Any, pb: PromptBatch, longer: list[tuple[int, int]], conts: list[list[int]],
              fed: int, sel: torch.Tensor | None, out: list[float], mass: list[float], batch_size: int,
              pad_id: int, device: str) -> None:
    """(pair, row) continuations in chunks of `batch_size`, each over a copy of the prompts'
    KV rows (one row per continuation)."""
    for chunk in batches(longer, batch_size):
        rows = torch.tensor([r for _, r in chunk], device=device)
        cs = [conts[i] for i, _ in chunk]
        width = max(len(c) for c in cs) - fed
        # Right padding: later pad tokens cannot affect earlier positions.
        x = torch.full((len(chunk), width), pad_id, dtype=torch.long)
        for k, c in enumerate(cs):
            x[k, :len(c) - fed] = torch.tensor(c[:len(c) - fed])
        cache = copy.deepcopy(pb.cache)
        cache.reorder_cache(rows)  # gathers (and repeats) the prompts' rows
        pmask = pb.mask.index_select(0, rows)
        start = pmask.sum(-1, keepdim=True)
        cpos = start + torch.arange(width, device=device)
        cmask = torch.cat([pmask, torch.ones((len(chunk), width), dtype=torch.long,
                                             device=device)], dim=-1)
        logits = model(input_ids=x.to(device), past_key_values=cache,
                       attention_mask=cmask, position_ids=cpos, use_cache=True).logits
        for k, ((i, _), c) in enumerate(zip(chunk, cs)):
            lp = torch.log_softmax(logits[k, :len(c) - fed].float(), dim=-1)
            tgt = torch.tensor(c[1:], device=device)
            out[i] += float(lp[:len(c) - 1].gather(-1, tgt[:, None]).sum())
            if sel is not None:
                mass[i] = float(torch.logsumexp(lp[len(c) - 1, sel], 0))
