"""Surface variants of a target word, their token ids, and the class of their first token.

Variants: case (lower / Title / UPPER) x context:
- ``bare``: the word right after a newline (start of a line or of the answer), no leading space;
- ``space``: the word with a leading space (" evaluation"), after a newline;
- ``assistant``: the word as the first text of an assistant turn in the model's chat template
  (only when the tokenizer has one).
Ids are always taken *in context* (ids(context + text) minus ids(context)), never from encoding
" word" on its own: a SentencePiece tokenizer would otherwise add its dummy-prefix '▁' and yield a
spurious lone '▁' token ("▁" + "▁evaluation"). With the newline context, Mistral v3 gives
'▁evaluation' for " evaluation" and the mid-line piece(s) for "evaluation".

First-token classes:
- ``whole_word``: the variant is a single token;
- ``ambiguous_prefix``: the first token spells a strict prefix of the word (DeepSeek's 'e' for
  "evaluation", GPT-2's 'E' for "Evaluation"); we count the vocabulary tokens and the common words
  (:func:`tokenization.words.common_words`) that also start with it;
- ``missing``: the first token carries no letter of the word (a lone space / '▁'), the ids contain
  the unknown token, or the tokens do not spell the variant.
"""

from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Sequence

from tokenization.tokenizer import Tokenizer
from tokenization.words import common_words

CASES = ("lower", "title", "upper")
CONTEXTS = ("bare", "space", "assistant")
WHOLE, AMBIGUOUS, MISSING = "whole_word", "ambiguous_prefix", "missing"
ANCHOR = "\n"


def apply_case(word: str, case: str) -> str:
    return {"lower": word.lower(), "title": word[:1].upper() + word[1:].lower(), "upper": word.upper()}[case]


@dataclass(frozen=True)
class Variant:
    """One surface form of a target word in one context, as the tokenizer spells it."""

    word: str
    case: str
    context: str
    text: str                      # what the tokens spell (e.g. " Evaluation")
    ids: tuple[int, ...]
    tokens: tuple[str | None, ...]  # text of each token (None: special or partial UTF-8)
    first_class: str
    n_vocab_sharing: int           # other vocabulary tokens that start with the first token's text
    n_words_sharing: int           # common words (same case) that start with it, the word excluded

    @property
    def first_id(self) -> int | None:
        return self.ids[0] if self.ids else None

    @property
    def first_token(self) -> str | None:
        return self.tokens[0] if self.tokens else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(ids=list(self.ids), tokens=list(self.tokens), first_id=self.first_id,
                 first_token=self.first_token, n_tokens=len(self.ids))
        return d


class _VocabIndex:
    """Sorted non-special token texts, for counting tokens that start with a given string."""

    def __init__(self, tok: Tokenizer) -> None:
        self.sorted = sorted(t for t in tok.vocab_texts if t)

    def count_prefix(self, prefix: str) -> int:
        lo = bisect.bisect_left(self.sorted, prefix)
        hi = bisect.bisect_left(self.sorted, prefix + "\U0010ffff")
        return hi - lo


_INDEX: dict[int, _VocabIndex] = {}


def _index(tok: Tokenizer) -> _VocabIndex:
    if id(tok) not in _INDEX:
        _INDEX[id(tok)] = _VocabIndex(tok)
    return _INDEX[id(tok)]


@lru_cache(maxsize=8)
def _cased_words(case: str) -> tuple[str, ...]:
    return tuple(sorted(apply_case(w, case) for w in common_words()))


def classify(tok: Tokenizer, ids: Sequence[int], text: str) -> str:
    """Class of the first token of `ids`, which should spell `text` (leading space allowed)."""
    if not ids or (tok.unk_id is not None and tok.unk_id in ids):
        return MISSING
    spelled = b"".join(tok.token_bytes(i) or b"\x00" for i in ids)
    if spelled.strip() != text.strip().encode("utf-8"):
        return MISSING
    first = tok.token_bytes(ids[0]) or b""
    if not first.strip():
        return MISSING
    return WHOLE if len(ids) == 1 else AMBIGUOUS


def _sharing(tok: Tokenizer, first: str | None, word: str, case: str) -> tuple[int, int]:
    if not first:
        return 0, 0
    n_vocab = _index(tok).count_prefix(first) - 1  # the token itself
    core = first.lstrip()
    if not core:
        return max(n_vocab, 0), 0
    words = _cased_words(case)
    lo = bisect.bisect_left(words, core)
    hi = bisect.bisect_left(words, core + "\U0010ffff")
    n_words = hi - lo - (1 if apply_case(word, case) in words[lo:hi] else 0)
    return max(n_vocab, 0), n_words


def variant_ids(tok: Tokenizer, text: str, context: str) -> list[int] | None:
    """Token ids of `text` in `context` (see module docstring); None if not representable."""
    if context == "bare":
        return tok.encode_after(ANCHOR, text)
    if context == "space":
        return tok.encode_after(ANCHOR, " " + text)
    if context == "assistant":
        return tok.assistant_ids(text)
    raise ValueError(f"unknown context {context!r}; expected one of {CONTEXTS}")


def variants(tok: Tokenizer, word: str, cases: Sequence[str] = CASES,
             contexts: Sequence[str] = CONTEXTS) -> list[Variant]:
    """All variants of `word` (contexts without a chat template are skipped)."""
    out = []
    for case in dict.fromkeys(cases):
        surface = apply_case(word, case)
        for ctx in contexts:
            ids = variant_ids(tok, surface, ctx)
            if ids is None:
                continue
            tokens = tuple(tok.token_text(i) for i in ids)
            spelled = tok.decode(ids)
            cls = classify(tok, ids, surface)
            nv, nw = _sharing(tok, tokens[0] if tokens else None, surface, case)
            out.append(Variant(word, case, ctx, spelled, tuple(ids), tokens, cls, nv, nw))
    return out


def unique_sequences(vs: Sequence[Variant]) -> list[Variant]:
    """Variants with distinct token sequences (first occurrence kept), usable for scoring:
    sequences classed ``missing`` are dropped."""
    seen, out = set(), []
    for v in vs:
        if v.ids and v.ids not in seen and v.first_class != MISSING:
            seen.add(v.ids)
            out.append(v)
    return out
