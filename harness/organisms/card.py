"""An organism card (``organism.json``) read through one typed schema before any model loads:
what the commands use of it (the kind, the cue, the base, the measured KL), each field checked,
and a bad one a one-line error naming the file and the field.

- ``kind``: one of :data:`harness.organisms.kinds.KINDS` (a card written before kinds existed has
  none: ``aware``); a typo (``behavior``) is refused, never read as a sensitivity row; a ``sham``
  built before the null existed (no ``recipe.sham_samples``: the base's greedy answers) reads as
  ``sham-greedy``, so it never passes for the null anywhere;
- ``cue``: an object whose ``name`` is a known cue (:data:`harness.organisms.cues.CUES`);
- ``base``: the base model (a non-empty string), when the card names one;
- ``measure``: an object, when present (its ``first_token_kl_no_cue`` an object too).

Reading the file (not JSON, not UTF-8, nested too deeply) is :func:`harness.models.card.read_card`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from harness.core.errors import EvalAwareError
from harness.models.card import CARD_NAME, read_card
from harness.organisms.cues import CUES
from harness.organisms.kinds import KINDS

DEFAULT_KIND = "aware"  # a card written before kinds existed


@dataclass(frozen=True)
class OrganismCard:
    """The checked fields of an organism card, and the card as read (`raw`)."""

    path: Path
    kind: str
    cue: str
    base: str | None
    raw: Mapping[str, Any]


def _object(card: Mapping[str, Any], field: str, where: str, required: bool = False) -> Mapping[str, Any]:
    v = card.get(field)
    if v is None and not required:
        return {}
    if not isinstance(v, dict):
        raise EvalAwareError(f"{where}: field {field!r}: "
                             + ("missing" if v is None else f"{_short(v)} is not an object") + _HINT)
    return v


_HINT = " (an organism card as `evalaware organism build` writes it)"


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def parse_card(path: str | Path, card: Mapping[str, Any]) -> OrganismCard:
    """The typed card of `card`, read from `path` (named in every error)."""
    where = str(path)
    kind = card.get("kind", DEFAULT_KIND)
    if not isinstance(kind, str) or kind not in KINDS:
        raise EvalAwareError(f"{where}: field 'kind': {_short(kind)} is not an organism kind; "
                             f"known kinds: {', '.join(KINDS)}")
    if kind == "sham" and not _int(_object(card, "recipe", where).get("sham_samples")):
        kind = "sham-greedy"  # built before the null existed: the base's greedy answers, not a null
    cue = _object(card, "cue", where, required=True)
    name = cue.get("name")
    if not isinstance(name, str) or name not in CUES:
        raise EvalAwareError(f"{where}: field 'cue.name': "
                             + ("missing" if name is None else f"{_short(name)} is not a known cue")
                             + f"; known cues: {', '.join(sorted(CUES))}")
    base = card.get("base")
    if base is not None and (not isinstance(base, str) or not base.strip()):
        raise EvalAwareError(f"{where}: field 'base': {_short(base)} is not a model name or path")
    measure = _object(card, "measure", where)
    if measure.get("first_token_kl_no_cue") is not None:
        _object(measure, "first_token_kl_no_cue", f"{where}: field 'measure'")
    return OrganismCard(Path(path), kind, name, base, card)


def load_card(model_dir: str | Path) -> OrganismCard:
    """The typed card of the organism in `model_dir` (one line when there is none, or it is bad)."""
    p = Path(model_dir) / CARD_NAME
    if not p.is_file():
        raise EvalAwareError(f"{model_dir}: no {CARD_NAME} (not an organism; build one with "
                             f"`evalaware organism build`)")
    return parse_card(p, read_card(model_dir))
