"""Which activations an organism's training can have changed (issue 44, item 4).

An organism trains its top ``layers`` blocks (``recipe.layers`` of the base's
``num_hidden_layers``; ``train full`` with ``layers`` at least the depth trains the embeddings
too). Hidden state ``h`` (the ``hidden_states`` index a probe or a steering vector names: 0 the
embeddings, ``b + 1`` the output of block ``b``) is changed only where ``h > n - layers``: a
readout at a lower index reads the base's activations on every organism, blind by construction.
Commands refuse such a readout before any model runs, instead of printing "blind" afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from harness.core.errors import EvalAwareError
from harness.models.card import CARD_NAME
from harness.organisms.card import load_card


def depth(model_dir: str | Path) -> int:
    """The model's number of blocks, from its config.json."""
    try:
        return int(json.loads((Path(model_dir) / "config.json").read_text())["num_hidden_layers"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EvalAwareError(f"{model_dir}/config.json: no num_hidden_layers to place the trained blocks ({e})") \
            from None


def first_reached(card: Mapping[str, Any], model_dir: str | Path | None = None, n: int | None = None) -> int:
    """The lowest hidden-state index the organism's training can change (0: every one); the depth
    `n`, or read from `model_dir`."""
    recipe = card.get("recipe") or {}
    layers = int(recipe.get("layers", 0) or 0)
    n = depth(model_dir) if n is None else n  # type: ignore[arg-type]
    if layers <= 0 or (recipe.get("train") == "full" and layers >= n):
        return 0
    return max(0, n - layers) + 1


def organism_card(model: str | Path | None) -> Mapping[str, Any] | None:
    """The organism card next to a local model's weights (checked: :func:`harness.organisms.card.load_card`);
    None for any other model."""
    if not model or not (Path(model) / CARD_NAME).is_file():
        return None
    return load_card(model).raw


def reachable(layers: list[int], card: Mapping[str, Any] | None, n: int, what: str) -> list[int]:
    """`layers` the organism's training can change (all of them for a model that is not an
    organism); none left: refused, naming the floor."""
    if card is None:
        return layers
    lo = first_reached(card, n=n)
    kept = [l for l in layers if l >= lo]
    if not kept:
        raise EvalAwareError(f"{what}: every layer asked ({layers[0]}..{layers[-1]}) lies below the blocks this "
                             f"organism trained (hidden states {lo}..): its activations there are the base's")
    return kept


def check_reaches(layer: int, cards: Mapping[str, tuple[Mapping[str, Any], str | Path]], what: str) -> None:
    """Refuse `what` (a probe, a steering layer) at hidden-state `layer` where it lies below the
    trained blocks of any organism in `cards` ({name: (card, model dir)})."""
    for name, (card, d) in cards.items():
        lo = first_reached(card, d)
        if layer < lo:
            raise EvalAwareError(
                f"{what} reads hidden state {layer}, below the blocks organism {name} trained (hidden states "
                f"{lo}..): it would read the base's activations on every organism, blind by construction. Use "
                f"a layer >= {lo} (train the probe with --layers {lo}-.. or --layer N)")
