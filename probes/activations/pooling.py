"""Pooling token activations into one vector per sample, expressed as token weights.

Every pooling is a weight vector over the sequence (prompt + answer, one sequence). Padding
positions always get weight 0, so padding never enters a mean; a pooling with no tokens for a
sample (no answer, no reasoning, no evidence found) is *absent* for that sample, not zero.

- ``last_prompt``: the last prompt token (the end of the generation prompt, before any answer).
- ``mean_prompt``: mean over the prompt tokens.
- ``mean_answer``: mean over the model's answer tokens (reasoning trace included, as generated).
- ``mean_reasoning``: mean over the reasoning-trace tokens only.
- ``mean_evidence``: mean over the tokens of the judge-quoted evidence spans.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import torch

POOLINGS: tuple[str, ...] = ("last_prompt", "mean_prompt", "mean_answer", "mean_reasoning",
                             "mean_evidence")
DEFAULT_POOLINGS: tuple[str, ...] = ("last_prompt", "mean_answer", "mean_evidence")

Span = tuple[int, int]  # half-open [start, end)


@dataclass(frozen=True)
class SequenceSpans:
    """Token spans of one captured sequence (coordinates in the unpadded sequence)."""

    n_prompt: int
    n_total: int
    reasoning: tuple[Span, ...] = ()
    evidence: tuple[Span, ...] = ()

    def tokens(self, pooling: str) -> list[int]:
        """Token positions that pooling averages over (empty = absent)."""
        if pooling == "last_prompt":
            return [self.n_prompt - 1] if self.n_prompt > 0 else []
        if pooling == "mean_prompt":
            return list(range(self.n_prompt))
        if pooling == "mean_answer":
            return list(range(self.n_prompt, self.n_total))
        spans = {"mean_reasoning": self.reasoning, "mean_evidence": self.evidence}.get(pooling)
        if spans is None:
            raise ValueError(f"unknown pooling {pooling!r}; use one of {', '.join(POOLINGS)}")
        return sorted({t for a, b in spans for t in range(max(a, 0), min(b, self.n_total))})


def pooling_weights(spans: Sequence[SequenceSpans], poolings: Sequence[str], width: int,
                    left_padded: bool = True) -> torch.Tensor:
    """Weights (batch, n_poolings, width): 1/n on each pooled token, 0 elsewhere (padding too)."""
    import torch
    w = torch.zeros((len(spans), len(poolings), width), dtype=torch.float64)
    for i, s in enumerate(spans):
        if s.n_total > width:
            raise ValueError(f"sequence of {s.n_total} tokens does not fit width {width}")
        shift = width - s.n_total if left_padded else 0
        for j, p in enumerate(poolings):
            toks = s.tokens(p)
            if toks:
                w[i, j, torch.tensor(toks) + shift] = 1.0 / len(toks)
    return w


# --- characters -> tokens --------------------------------------------------------------------

def token_char_offsets(tokenizer: Any, ids: Sequence[int]) -> tuple[str, list[Span]]:
    """Decoded text (special tokens kept) and each token's character span in it.

    Uses the fast tokenizer's offsets when re-encoding the text gives the same ids; otherwise
    decodes growing prefixes (exact for any tokenizer, quadratic in length)."""
    ids = [int(t) for t in ids]
    text = tokenizer.decode(ids, skip_special_tokens=False)
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        if list(enc["input_ids"]) == ids:
            return text, [(int(a), int(b)) for a, b in enc["offset_mapping"]]
    except (NotImplementedError, TypeError, ValueError, KeyError):
        pass
    offsets: list[Span] = []
    prev = 0
    for k in range(1, len(ids) + 1):
        # A token ending inside a multi-byte character decodes to U+FFFD; the prefix length can
        # then shrink on the next token, so clamp to keep spans monotonic.
        cur = max(prev, len(tokenizer.decode(ids[:k], skip_special_tokens=False)))
        offsets.append((prev, cur))
        prev = cur
    return text, offsets


def char_spans_to_tokens(char_spans: Sequence[Span], offsets: Sequence[Span]) -> list[Span]:
    """Token spans covering each character span (a token counts if it overlaps the span)."""
    out: list[Span] = []
    for a, b in char_spans:
        hit = [k for k, (s, e) in enumerate(offsets) if s < b and e > a]
        if hit:
            out.append((hit[0], hit[-1] + 1))
    return out


def find_quote(text: str, quote: str) -> Span | None:
    """Character span of a quote in text: exact, else whitespace- and case-insensitive."""
    q = quote.strip().strip('"\u201c\u201d\'')
    if not q:
        return None
    i = text.find(q)
    if i >= 0:
        return (i, i + len(q))
    pattern = r"\s+".join(re.escape(w) for w in q.split())
    m = re.search(pattern, text, flags=re.IGNORECASE)
    return (m.start(), m.end()) if m else None
