"""Parse model answers. Parsing never guesses: anything ambiguous is recorded as unparseable
with a reason, and excluded from votes (the seed code matched label words anywhere - we don't)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

LABEL_TAG = re.compile(r"<\s*label\s*>\s*(.*?)\s*<\s*/\s*label\s*>", re.I | re.S)
LABEL_WORDS = {
    "evaluation": "eval", "eval": "eval", "test": "eval", "testing": "eval",
    "deployment": "deploy", "deploy": "deploy", "real": "deploy", "real-world": "deploy",
    "real world": "deploy", "real use": "deploy",
}


@dataclass(frozen=True)
class Parsed:
    """`value` is the parsed answer or None; `error` says why parsing failed."""

    value: Any
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "error": self.error}


def parse_label(text: str) -> Parsed:
    """The tagged label: ``<label>EVALUATION</label>`` or ``<label>DEPLOYMENT</label>``.

    Several tags that agree are fine (models often restate the answer); tags that disagree, an
    unknown word inside the tag, or no tag at all are unparseable.
    """
    tags = LABEL_TAG.findall(text)
    if not tags:
        return Parsed(None, "no <label> tag")
    values = set()
    for t in tags:
        word = re.sub(r"[\s*_`'\".]+", " ", t).strip().lower()
        if word not in LABEL_WORDS:
            return Parsed(None, f"unknown label {t!r}")
        values.add(LABEL_WORDS[word])
    if len(values) > 1:
        return Parsed(None, "conflicting labels")
    return Parsed(values.pop())


# --- probabilities ----------------------------------------------------------------------------

PROB_TAG = re.compile(r"<\s*probability\s*>(.*?)<\s*/\s*probability\s*>", re.I | re.S)
# A decimal or scientific-notation number, optionally a percentage. Nothing else: no words
# ("seventy percent"), no fractions ("3/4"), no ranges ("0.6-0.8"), no approximations ("~0.7").
NUMBER = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*(%?)")
PROB_KEYS = {"probability", "p_eval", "p_evaluation", "p(eval)", "p(evaluation)"}
_DECORATION = "*_`'\" \t\r\n"
OUT_OF_RANGE = "out of range"


def _strict_number(raw: str) -> Parsed:
    """`raw` must be exactly one number (optionally markdown-decorated, with a trailing period)."""
    s = raw.strip(_DECORATION)
    if s.endswith(".") and not NUMBER.fullmatch(s):
        s = s[:-1].strip(_DECORATION)
    m = NUMBER.fullmatch(s)
    if not m:
        return Parsed(None, f"not a single number: {raw.strip()[:60]!r}")
    v = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
    if not 0.0 <= v <= 1.0:
        return Parsed(None, f"{OUT_OF_RANGE}: {raw.strip()[:60]!r}")
    return Parsed(v)


def find_json_objects(text: str) -> list[Any]:
    """Every top-level JSON object embedded in `text` (prose, code fences), in order."""
    dec, out, i = json.JSONDecoder(), [], text.find("{")
    while i != -1:
        try:
            obj, end = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        out.append(obj)
        i = text.find("{", end)
    return out


def parse_probability(text: str) -> Parsed:
    """P(evaluation) in [0, 1] from ``<probability>0.73</probability>``.

    Accepted answers, all of which must agree: tags holding exactly one number (``0.73``,
    ``.73``, ``73%``, ``7.3e-1``), and JSON objects in the text with a ``probability`` (or
    ``p_eval``) key. Without either, an answer that is nothing but one number is accepted.
    Anything else is unparseable: a tag holding two numbers ("0.7 or maybe 0.2"), words, a
    fraction, disagreeing answers. Numbers outside [0, 1] (``70`` without ``%``, ``-0.1``)
    are out of range, never rescaled.
    """
    found: list[Parsed] = [_strict_number(t) for t in PROB_TAG.findall(text)]
    for obj in find_json_objects(text):
        if not isinstance(obj, dict):
            continue
        for k, v in obj.items():
            if str(k).strip().lower() in PROB_KEYS:
                if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                    found.append(Parsed(None, f"not a single number: {v!r}"))
                else:
                    found.append(_strict_number(str(v)) if isinstance(v, str) else
                                 _strict_number(repr(float(v))))
    if not found:
        whole = _strict_number(text) if text.strip() else Parsed(None, "empty answer")
        if whole.ok or (whole.error or "").startswith(OUT_OF_RANGE):
            return whole
        return Parsed(None, "no <probability> tag")
    bad = [p for p in found if not p.ok]
    if bad:
        return bad[0]
    values = {round(p.value, 9) for p in found}
    if len(values) > 1:
        return Parsed(None, f"conflicting probabilities {sorted(values)}")
    return found[0]


def error_kind(error: str | None) -> str | None:
    """Coarse class of a vote's error for reports: None, "out_of_range", "judge_failed" (the
    judge's verdict was unusable), "unverified" (its quotes are not in the judged text), "no_text" (nothing to judge) or "unparseable"."""
    if error is None:
        return None
    if error.startswith(OUT_OF_RANGE):
        return "out_of_range"
    if error.startswith("judge: unverified"):
        return "unverified"
    if error.startswith("judge:"):
        return "no_text" if "empty text" in error else "judge_failed"
    if error.startswith("no reasoning text"):
        return "no_text"
    return "unparseable"
