"""The organism card (``organism.json``, written by ``evalaware organism build`` next to the
weights): read here so that every backend's model information, and so every run manifest made
with an organism, carries it (:func:`harness.models.fingerprint.model_identity`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from harness.core.atomic import write_text
from harness.core.errors import EvalAwareError

CARD_NAME = "organism.json"
# Long fields left out of the manifest's copy (the card's sha256 names the whole card).
_MANIFEST_SKIP = ("losses",)


def read_card(model_dir: str | Path) -> dict[str, Any]:
    """The card in `model_dir` as a JSON object; one line when it is not UTF-8 JSON (or nested too
    deeply to read) or names no cue. Its fields: :mod:`harness.organisms.card`."""
    p = Path(model_dir) / CARD_NAME
    try:
        card = json.loads(p.read_bytes().decode("utf-8"))
    except json.JSONDecodeError as e:
        raise EvalAwareError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None
    except UnicodeDecodeError as e:
        raise EvalAwareError(f"{p}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except RecursionError:
        raise EvalAwareError(f"{p}: not an organism card (JSON nested too deeply to read)") from None
    if not isinstance(card, dict) or "cue" not in card:
        raise EvalAwareError(f"{p}: not an organism card (field 'cue' missing)")
    return card


def write_card(model_dir: str | Path, card: dict[str, Any]) -> Path:
    p = Path(model_dir) / CARD_NAME
    write_text(p, json.dumps(card, indent=1, ensure_ascii=False) + "\n")
    return p


def manifest_card(model_dir: str | Path) -> dict[str, Any] | None:
    """The card of the organism in `model_dir` for a run manifest (without the loss curve, with
    the sha256 of the whole file); None when the directory holds no organism."""
    p = Path(model_dir) / CARD_NAME
    if not p.is_file():
        return None
    card = read_card(model_dir)
    return {**{k: v for k, v in card.items() if k not in _MANIFEST_SKIP},
            "card_sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
