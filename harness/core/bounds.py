"""Bounded command-line values: checked when the command line is parsed, before any work.

Upper bounds are far above any legitimate use (the paper asks 5 to 25 questions per sample; a
context holds at most ~10^6 tokens) and stop a typo (``--n-votes 1000000``) from filling memory
for minutes before anything is said. ``EVALAWARE_UNBOUNDED=1`` lifts every upper bound for a
user who means it; lower bounds and finiteness always hold.

:class:`FiniteFloat` is the type of every float option of the command line (nan and inf are
refused, and the option's declared bounds, open or closed); tests/test_hostile_options.py walks
the command tree for a float option of any other type.
"""

from __future__ import annotations

import math
import os
from typing import Any

import click

UNBOUNDED = "EVALAWARE_UNBOUNDED"

MAX_VOTES = 1000
MAX_TOKENS = 1 << 20
MAX_BATCH = 4096
MAX_RESAMPLES = 1_000_000


def _upper(hi: float | None) -> float | None:
    return None if os.environ.get(UNBOUNDED) else hi


class BoundedInt(click.IntRange):
    """An integer in [lo, hi]; the message names the override of the upper bound."""

    def __init__(self, lo: int, hi: int | None) -> None:
        super().__init__(lo, _upper(hi))
        self.hard_max = hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as e:
            try:
                over = self.max is not None and int(value) > self.max
            except (TypeError, ValueError):
                over = False
            if over:
                e.message += f" (set {UNBOUNDED}=1 to allow more)"
            raise


class FiniteFloat(click.FloatRange):
    """A finite float in the range (nan and inf are refused, which FloatRange lets through);
    ``FiniteFloat(0, 1, max_open=True)`` is [0, 1), ``FiniteFloat(0, None)`` is [0, inf)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        v = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(v, param, ctx)


def positive() -> FiniteFloat:
    """A finite float above 0."""
    return FiniteFloat(0, None, min_open=True)


def votes() -> BoundedInt:
    return BoundedInt(1, MAX_VOTES)


def tokens() -> BoundedInt:
    return BoundedInt(1, MAX_TOKENS)


def batch() -> BoundedInt:
    return BoundedInt(1, MAX_BATCH)


def resamples() -> BoundedInt:
    return BoundedInt(0, MAX_RESAMPLES)


MAX_SEED = 2**32 - 1  # numpy's and torch's generators take seeds in [0, 2**32)


def seed() -> click.IntRange:
    """A seed: always in [0, 2**32) (EVALAWARE_UNBOUNDED does not lift it: the generators refuse more)."""
    return click.IntRange(0, MAX_SEED)
