"""The organism card: ``organism.json`` next to the weights; re-exported by
:mod:`harness.models.fingerprint`, which puts it into the model information of every run."""

from __future__ import annotations

from harness.models.card import CARD_NAME, read_card, write_card

__all__ = ["CARD_NAME", "read_card", "write_card"]
