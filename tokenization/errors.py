"""Error classes shared by the whole project, defined here so ``tokenization`` needs nothing from
``harness`` (``harness.core.errors`` re-exports them and adds its own subclasses)."""

from __future__ import annotations


class EvalAwareError(Exception):
    """Base class for errors shown to the user as one line with a non-zero exit (the `evalaware`
    CLI prints ``error: <message>`` and exits with `exit_code`: 2, bad input)."""

    exit_code = 2


class AssetError(EvalAwareError):
    """An offline asset is missing or fails its checksum."""
