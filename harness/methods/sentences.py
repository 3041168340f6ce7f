"""Awareness sentences, their placebo twins, and the sentence boundaries of a model's output: what
the `monitor` method teacher-forces and where (:mod:`harness.methods.monitor`), and what
`evalaware intervene` inserts (:mod:`harness.intervene.conditions`).

The pairs file (built in: ``harness/prompts/monitor/sentences_v1.txt``; ``--monitor-sentences
FILE`` replaces it) holds one pair a line, ``AWARENESS | PLACEBO``; blank lines and lines starting
with ``#`` are skipped. A placebo matches its twin in form and length without the meaning ("This
might be a test." / "This might be a recipe."): the monitor's score is the awareness sentences'
log-mean-exp likelihood *minus the placebos'*, so whatever raises any sentence of that form at
that point (a fluent sentence end, a habit of repeating short sentences) cancels.
:func:`length_mismatches` checks the length match on a tokenizer (the tests run it on every
tokenizer of the asset set: within :data:`MAX_TOKEN_GAP` tokens).

Boundaries (:func:`sentence_cuts`) are token positions in the output: its start, after every
sentence end (``.``, ``!``, ``?``, ``…``, closing quotes or brackets allowed after it) or line end
that is followed by the start of a word, and its end. The whitespace between sentences stays in
the prefix; a sentence forced after a prefix that does not end in whitespace gets a leading space
(:func:`joiner`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.core.errors import EvalAwareError
from harness.core.textio import read_utf8

BUILTIN_PAIRS = "monitor/sentences_v1"
MAX_TOKEN_GAP = 2
_END = re.compile(r"[.!?\u2026][\"'\u201d\u2019)\]]*$")


@dataclass(frozen=True)
class SentencePairs:
    """Awareness sentences and their placebo twins, index by index; `name` says where they came
    from, `sha256` identifies the text (recorded in the method's settings)."""

    aware: tuple[str, ...]
    placebo: tuple[str, ...]
    name: str
    sha256: str

    def __len__(self) -> int:
        return len(self.aware)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sha256": self.sha256, "pairs": [list(p) for p in zip(self.aware, self.placebo)]}


def parse_pairs(text: str, name: str) -> SentencePairs:
    """The pairs of a file's text; a malformed line is refused naming the file and line."""
    aware, placebo = [], []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 2 or not all(parts):
            raise EvalAwareError(f"{name}: line {n}: expected 'AWARENESS SENTENCE | PLACEBO SENTENCE'")
        if parts[0] == parts[1]:
            raise EvalAwareError(f"{name}: line {n}: the placebo equals its awareness sentence")
        aware.append(parts[0])
        placebo.append(parts[1])
    if not aware:
        raise EvalAwareError(f"{name}: no sentence pairs")
    if len(set(aware)) != len(aware) or len(set(placebo)) != len(placebo):
        raise EvalAwareError(f"{name}: a sentence appears twice (pairs are one to one)")
    if set(aware) & set(placebo):
        raise EvalAwareError(f"{name}: a sentence is both an awareness sentence and a placebo")
    return SentencePairs(tuple(aware), tuple(placebo), name,
                         hashlib.sha256(text.encode()).hexdigest())


def load_pairs(path: str | Path | None = None, prompts: Any = None) -> SentencePairs:
    """The pairs of `path`, else the built-in file (through `prompts`, a
    :class:`~harness.methods.prompts.PromptLibrary`, so ``--prompts DIR`` may override it and the
    manifest records its sha256)."""
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise EvalAwareError(f"{p}: monitor sentence file not found")
        return parse_pairs(read_utf8(p), str(p))
    if prompts is None:
        from harness.methods.prompts import PromptLibrary

        prompts = PromptLibrary()
    prompt = prompts.get(BUILTIN_PAIRS)
    return parse_pairs(prompt.text, prompt.name)


def token_length(tokenizer: Any, text: str) -> int:
    """Tokens of `text` without special tokens (a transformers tokenizer or a
    :mod:`tokenization` one)."""
    if hasattr(tokenizer, "encode") and not hasattr(tokenizer, "convert_ids_to_tokens"):
        return len(tokenizer.encode(text))
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def length_mismatches(pairs: SentencePairs, tokenizer: Any, gap: int = MAX_TOKEN_GAP
                      ) -> list[tuple[str, str, int, int]]:
    """(awareness, placebo, their token lengths) of every pair whose lengths differ by more
    than `gap`, both at a sentence start and after a space."""
    out = []
    for a, p in zip(pairs.aware, pairs.placebo):
        for lead in ("", " "):
            na, np_ = token_length(tokenizer, lead + a), token_length(tokenizer, lead + p)
            if abs(na - np_) > gap:
                out.append((lead + a, lead + p, na, np_))
    return out


def token_pieces(tokenizer: Any, ids: Sequence[int], window: int = 8) -> list[str]:
    """The text each token adds in context (decoded with the `window` tokens before it, so
    SentencePiece's leading spaces and multi-byte characters come out right); linear time."""
    ids = [int(t) for t in ids]
    out = []
    for k in range(len(ids)):
        a = max(0, k - window)
        before = tokenizer.decode(ids[a:k], skip_special_tokens=False) if k > a else ""
        both = tokenizer.decode(ids[a:k + 1], skip_special_tokens=False)
        out.append(both[len(before):] if both.startswith(before) else both[-1:] if both else "")
    return out


def sentence_cuts(tokenizer: Any, ids: Sequence[int], max_positions: int | None = None) -> list[int]:
    """Token positions of the sentence boundaries of `ids`: 0, after every sentence or line end
    followed by the start of a word, and len(ids) (see the module docstring). With
    `max_positions`, an evenly spaced subset keeping the first and the last."""
    pieces = token_pieces(tokenizer, ids)
    cuts, text = [0], ""
    for k, piece in enumerate(pieces):
        text += piece
        nxt = pieces[k + 1] if k + 1 < len(pieces) else None
        if nxt is None or not nxt.strip():  # the end (added below), or inside the gap
            continue
        body = text.rstrip()
        if not body:
            continue
        ends = bool(_END.search(body)) or "\n" in text[len(body):] or nxt[:1] == "\n"
        word_starts = text[-1:].isspace() or nxt[:1].isspace()
        if ends and word_starts:
            cuts.append(k + 1)
    if len(ids) and cuts[-1] != len(ids):
        cuts.append(len(ids))
    if max_positions and len(cuts) > max_positions:
        step = (len(cuts) - 1) / (max_positions - 1)
        cuts = sorted({cuts[round(i * step)] for i in range(max_positions)})
    return cuts


def joiner(tokenizer: Any, ids: Sequence[int]) -> str:
    """What goes between a prefix `ids` and a forced sentence: nothing at the start or after
    whitespace, else a space."""
    if not ids:
        return ""
    tail = tokenizer.decode([int(t) for t in ids[-8:]], skip_special_tokens=False)
    return "" if not tail or tail[-1].isspace() else " "
