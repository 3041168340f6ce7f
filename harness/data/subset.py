"""Which samples `--limit N` runs: a deterministic, label-balanced, category-spread subset.

Datasets are often sorted by label or source (the Needham et al. file, our demo set), so the
first N samples easily hold one label only and every metric after them is undefined.
:func:`stratified` instead

- splits N evenly between the labels (the odd one to the larger label); a label with too few
  samples gives its share to the other;
- within a label, takes the categories round-robin, so N spreads over as many sources as it can;
- orders each category's samples by a hash of the sample id, and the categories by a hash of
  their name, so the choice depends on the ids only: the same N gives the same samples on every
  re-run, for every method and model, whatever the file order;
- is nested: the samples of ``--limit N`` are among those of ``--limit N+1``, so a run directory
  grown from 16 to 32 samples reuses the first 16.

The chosen samples keep their dataset order. ``--first N`` keeps the first N in file order.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Sequence

from harness.core.errors import EvalAwareError
from harness.core.sample import Sample


def _key(text: str) -> str:
    return hashlib.sha256(("evalaware-subset\0" + text).encode()).hexdigest()


def _round_robin(samples: Sequence[Sample]) -> list[Sample]:
    """One label's samples in pick order: hash order within a category, categories in turn."""
    by_cat: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_cat[s.metadata.category].append(s)
    queues = [sorted(v, key=lambda s: _key(s.id)) for _, v in sorted(by_cat.items(),
                                                                      key=lambda kv: _key(kv[0]))]
    out: list[Sample] = []
    for r in range(max(len(q) for q in queues)):
        out.extend(q[r] for q in queues if r < len(q))
    return out


def _quotas(sizes: dict[str, int], n: int) -> dict[str, int]:
    """Split n as evenly as the label sizes allow; the odd sample goes to the larger label."""
    quota = dict.fromkeys(sizes, 0)
    left = min(n, sum(sizes.values()))
    while left:
        open_ = [lab for lab in sizes if quota[lab] < sizes[lab]]
        share, extra = divmod(left, len(open_))
        order = sorted(open_, key=lambda lab: (quota[lab], -sizes[lab], lab))
        for i, lab in enumerate(order):
            take = min(share + (i < extra), sizes[lab] - quota[lab])
            quota[lab] += take
            left -= take
    return quota


def stratified(samples: Sequence[Sample], n: int) -> list[Sample]:
    """N samples balanced over labels and spread over categories (see the module docstring)."""
    if n >= len(samples):
        return list(samples)
    by_label: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_label[s.label].append(s)
    quota = _quotas({lab: len(v) for lab, v in by_label.items()}, n)
    chosen = {s.id for lab, v in by_label.items() for s in _round_robin(v)[:quota[lab]]}
    return [s for s in samples if s.id in chosen]


def select(samples: Sequence[Sample], limit: int | None = None,
           first: int | None = None) -> list[Sample]:
    """Apply ``--limit`` (stratified) or ``--first`` (file order); neither: every sample."""
    if limit is not None and first is not None:
        raise EvalAwareError("give --limit (stratified) or --first (file order), not both")
    for name, v in (("--limit", limit), ("--first", first)):
        if v is not None and v < 1:
            raise EvalAwareError(f"{name} must be a positive number of samples, got {v}")
    if first is not None:
        return list(samples[:first])
    return stratified(samples, limit) if limit is not None else list(samples)
