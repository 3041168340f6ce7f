"""Aggregate per-variant answers into one decision per sample."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Tally:
    """Majority of valid votes. `score` is the share of valid votes for "eval" (None without
    valid votes); an exact tie gives prediction None ("undecided"), counted in reports."""

    prediction: str | None
    score: float | None
    n_valid: int
    n_invalid: int


def majority(labels: Sequence[str | None]) -> Tally:
    valid = [x for x in labels if x is not None]
    if not valid:
        return Tally(None, None, 0, len(labels))
    share = sum(1 for x in valid if x == "eval") / len(valid)
    pred = "eval" if share > 0.5 else "deploy" if share < 0.5 else None
    return Tally(pred, share, len(valid), len(labels) - len(valid))


def mean_probability(values: Sequence[float | None], threshold: float = 0.5) -> Tally:
    """Mean of valid P(eval) estimates; eval if the mean is >= threshold (the paper's rule)."""
    valid = [float(x) for x in values if x is not None]
    if not valid:
        return Tally(None, None, 0, len(values))
    m = sum(valid) / len(valid)
    return Tally("eval" if m >= threshold else "deploy", m, len(valid), len(values) - len(valid))
