"""Batching for a transformers model: left padding with positions that ignore the padding (the
length-sorted batches are :mod:`harness.core.batching`'s). Public because activation capture (``probes.activations.capture``) and steering-vector
building (``probes.steering.build``) feed the same padded batches to the model's forward hooks."""

from __future__ import annotations

from typing import Sequence

import torch

from harness.core.errors import BackendError

TokenIds = Sequence[int]


def left_pad(seqs: Sequence[TokenIds], pad_id: int, device: str | torch.device = "cpu"
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input ids, attention mask, position ids), each (len(seqs), longest), left-padded with
    `pad_id`. Positions count real tokens only (a plain forward does not derive them from the
    mask), so a padded row computes what it would alone."""
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s) == 0:
            raise BackendError("empty prompt")
        ids[i, n - len(s):] = torch.tensor(list(s), dtype=torch.long)
        mask[i, n - len(s):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), pos.to(device)
