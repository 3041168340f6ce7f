"""What is behind a method's records: the generations and how many were cut at the token limit,
the judge verdicts and how many were unusable or unverified. Read by the run's live warnings
(:mod:`harness.run.monitor`), ``show`` and the report."""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

from harness.core.details import votes_of
from harness.core.parsing import error_kind
from harness.core.records import Record


def tally(records: Sequence[Record | Mapping[str, Any]]) -> Counter[str]:
    """answers / cut (generations behind the records), verdicts / unjudged / unverified (judge
    calls made, unusable ones, ones whose quotes none verify); a verdict on an empty text (no
    judge call) is not counted."""
    c: Counter[str] = Counter()
    for r in records:
        c["answers"] += int((r.n_answers if isinstance(r, Record) else r.get("n_answers")) or 0)
        c["cut"] += int((r.n_cut if isinstance(r, Record) else r.get("n_cut")) or 0)
        for v in votes_of(r):
            if v.verdict is None or v.verdict.error == "empty text":
                continue
            c["verdicts"] += 1
            kind = error_kind(v.error)
            c["unjudged"] += kind == "judge_failed"
            c["unverified"] += kind == "unverified" or v.verdict.unverified  # as recorded, or by its quotes
    return c
