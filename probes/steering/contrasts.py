"""Unrelated-contrast controls (issue 45): directions from contrasts that have nothing to do with
being tested (a book on the top vs the bottom shelf, cooking vs astronomy, long vs short,
formal vs casual, a system prompt vs none, English vs French, happy vs gloomy, past vs future,
a question vs a command: :data:`SHIPPED`, ``probes/steering/contrasts/<name>.jsonl``, plus a
user's ``--control-pairs FILE``). A public reproduction found such directions move behaviour as
much as an awareness vector does; norm-matched Gaussian directions do not test that.

Each is built as the awareness vector from ``--pairs`` is (mean of a - b of the last prompt
token's residual, each side one rendered conversation: :func:`last_prompt_states`), unit-normalised
per layer and stored in the vector (``contrast/<name>/<layer>``), so ``steer run`` adds it with the
vector's own scale: ``alpha * unit * norm[layer]`` (norm-matched; :meth:`SteeringVector.unit`).

A pair file: JSONL, one ``{"a": SIDE, "b": SIDE}`` per line; a SIDE is a user message (a string)
or ``{"system": "...", "user": "..."}``.
"""

from __future__ import annotations

import hashlib
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from harness.backends.base import Backend
from harness.core.errors import EvalAwareError
from harness.core.render import Renderer
from harness.core.sample import Message

from probes.activations.pooling import SequenceSpans, pooling_weights
from probes.steering.direction import NORM_POOLING

Conversation = tuple[Message, ...]


def shipped_dir() -> Path:
    return Path(str(resources.files("probes") / "steering" / "contrasts"))


def shipped() -> dict[str, Path]:
    """{name: pair file} of the shipped contrast sets."""
    return {p.stem: p for p in sorted(shipped_dir().glob("*.jsonl"))}


def _side(value: Any, where: str) -> Conversation:
    if isinstance(value, str) and value.strip():
        return (Message("user", value),)
    if isinstance(value, dict) and set(value) == {"system", "user"} and all(
            isinstance(value[k], str) and value[k].strip() for k in ("system", "user")):
        return (Message("system", value["system"]), Message("user", value["user"]))
    raise EvalAwareError(f"{where}: must be a non-empty string or {{\"system\": ..., \"user\": ...}}")


def jsonl_records(p: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed value) for each non-blank line of the JSONL file `p` (a BOM
    allowed); a line that is not JSON is refused as ``{p}:{n}: invalid JSON (...)``."""
    for n, line in enumerate(p.read_text(encoding="utf-8-sig").splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield n, json.loads(line)
        except json.JSONDecodeError as e:
            raise EvalAwareError(f"{p}:{n}: invalid JSON ({e.msg})") from None


def read_contrast(path: str | Path) -> list[tuple[Conversation, Conversation]]:
    """The (a, b) conversations of a pair file; a bad line is refused naming file, line and field."""
    p = Path(path)
    if not p.is_file():
        raise EvalAwareError(f"{p}: no such file")
    pairs = []
    for n, rec in jsonl_records(p):
        if not isinstance(rec, dict):
            raise EvalAwareError(f"{p}:{n}: a line must be an object {{\"a\": ..., \"b\": ...}}")
        pairs.append((_side(rec.get("a"), f"{p}:{n}: field 'a'"), _side(rec.get("b"), f"{p}:{n}: field 'b'")))
    if len(pairs) < 2:
        raise EvalAwareError(f"{p}: {len(pairs)} pair(s); a contrast needs at least 2")
    return pairs


def contrast_sets(extra: Sequence[str | Path] = (), with_shipped: bool = True) -> dict[str, Path]:
    """{name: file}: the shipped sets (unless `with_shipped` is False) and each extra file under
    its stem (a name given twice is refused); every file is read (checked) here, before a model
    loads."""
    out = dict(shipped()) if with_shipped else {}
    for f in extra:
        name = Path(f).stem
        if not Path(f).is_file():  # before the name: a URL or a missing path is named by the path alone
            raise EvalAwareError(f"--control-pairs {f}: no such file (a JSONL of contrast pairs)")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise EvalAwareError(f"--control-pairs {f}: the file's name (without its suffix) names the contrast; "
                                 "use letters, digits, '_', '-' or '.' in it")
        if name in out:
            raise EvalAwareError(f"--control-pairs {f}: a contrast named {name!r} is already "
                                 f"{'shipped' if name in shipped() else 'given'}; rename the file")
        out[name] = Path(f)
    for f in out.values():
        read_contrast(f)
    return out


def last_prompt_states(backend: Backend, convs: Sequence[Conversation], layers: Sequence[int],
                       batch_size: int = 8) -> np.ndarray:
    """(len(convs), len(layers), hidden) residuals at each conversation's last prompt token, each
    rendered with the model's chat template (as runs render samples)."""
    renderer = Renderer(backend.tokenizer, {})
    ids = [renderer.render(c) for c in convs]
    rows = []
    for i in range(0, len(ids), batch_size):
        chunk = ids[i:i + batch_size]
        w = [pooling_weights([SequenceSpans(len(c), len(c))], [NORM_POOLING], len(c),
                             left_padded=False)[0] for c in chunk]
        rows.append(backend.pooled_hidden_states(chunk, list(layers), w)[:, 0].numpy())
    return np.concatenate(rows).astype(np.float64)


def contrast_directions(backend: Backend, sets: dict[str, Path], layers: Sequence[int]
                        ) -> tuple[dict[str, dict[int, np.ndarray]], dict[str, dict[str, Any]]]:
    """({name: {layer: unit direction}}, {name: provenance}) of each contrast: mean (a - b) of
    the last prompt token's residual, unit-normalised per layer; a zero difference is refused."""
    dirs, meta = {}, {}
    for name, path in sets.items():
        pairs = read_contrast(path)
        H = last_prompt_states(backend, [c for pair in pairs for c in pair], layers)
        diff = (H[0::2] - H[1::2]).mean(0)  # (layers, hidden)
        dirs[name] = {}
        for j, l in enumerate(layers):
            n = float(np.linalg.norm(diff[j]))
            if not np.isfinite(n) or n == 0:
                raise EvalAwareError(f"contrast {name} ({path}): layer {l}: a - b is zero; nothing to steer along")
            dirs[name][int(l)] = (diff[j] / n).astype(np.float32)
        meta[name] = {"file": str(Path(path).resolve()), "n_pairs": len(pairs),
                      "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(),
                      "shipped": Path(path).parent.resolve() == shipped_dir().resolve(),
                      "raw_norms": {str(l): float(np.linalg.norm(diff[j])) for j, l in enumerate(layers)}}
    return dirs, meta
