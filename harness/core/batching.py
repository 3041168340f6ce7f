"""Length-sorted batches of token sequences: the one order every batched caller uses (the hf
backend's forwards and generation, and callers that cut their requests into chunks the backend
then batches the same way: ``harness.organisms.measure``)."""

from __future__ import annotations

from typing import Sequence


def batches(order: list[int], size: int) -> list[list[int]]:
    """`order` cut into consecutive batches of at most `size`."""
    return [order[i:i + size] for i in range(0, len(order), size)]


def by_length(seqs: Sequence[Sequence[int]], size: int) -> list[list[int]]:
    """Indices of `seqs` in batches of similar length (less padding): sorted by length, stably."""
    return batches(sorted(range(len(seqs)), key=lambda i: len(seqs[i])), size)
