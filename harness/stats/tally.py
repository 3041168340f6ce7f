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
    """answers / cut (generations behind the records) and, of cut, cut_context (the answers to
    the sample the questions follow as cut, text kept: nothing parsed is lost) and cut_read (the
    rest: answers parsed or judged, empty answers); verdicts / unjudged / unverified (judge calls
    made, unusable ones, ones whose quotes none verify); a verdict on an empty text (no judge
    call) is not counted."""
    c: Counter[str] = Counter()
    for r in records:
        for key, field in (("answers", "n_answers"), ("cut", "n_cut"), ("cut_context", "n_cut_context")):
            c[key] += int((getattr(r, field) if isinstance(r, Record) else r.get(field)) or 0)
        for v in votes_of(r):
            if v.verdict is None or v.verdict.error == "empty text":
                continue
            c["verdicts"] += 1
            kind = error_kind(v.error)
            c["unjudged"] += kind == "judge_failed"
            c["unverified"] += kind == "unverified" or v.verdict.unverified  # as recorded, or by its quotes
    c["cut_read"] = c["cut"] - c["cut_context"]
    return c


def cut_cell(t: Mapping[str, int]) -> str:
    """The "cut" cell of a :func:`tally`: cut/answers, and how many of the cut ones were answers
    to the sample kept as cut (e.g. "58/576 (58 sample answers)"); "–" without generations."""
    if not t["answers"]:
        return "–"
    ctx = f" ({t['cut_context']} sample answer{'s' * (t['cut_context'] != 1)})" if t["cut_context"] else ""
    return f"{t['cut']}/{t['answers']}{ctx}"
