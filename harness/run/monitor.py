"""What a run tells the terminal while it goes: answers cut at the token limit and unusable
judge verdicts, per method, as soon as a committed batch shows the share is high (each warning
once per method), and who judges.

Thresholds: more than :data:`CUT_WARN` of a method's answers cut where it costs a reading (a
question's answer, a trace, a verdict, an answer left empty: ``cut_read`` of
:func:`harness.stats.tally.tally`); more than :data:`UNJUDGED_WARN` of its judge verdicts
unusable (``judge_failed``), or unverified (quoting nothing in the judged text). Answers to the
sample that the questions follow as cut (``cut_context``: no vote is lost to the cut, e.g. the
demo's short ``--answer-tokens``) get a note, once, that asks nothing of the user.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any, Callable, Sequence

from tqdm.auto import tqdm

from harness.stats.tally import tally

CUT_WARN = 0.10
UNJUDGED_WARN = 0.25


def default_say(msg: str) -> None:
    tqdm.write(msg, file=sys.stderr)


class RunMonitor:
    """Feed it each committed batch with :meth:`add`; it warns through `say`."""

    def __init__(self, say: Callable[[str], None] = default_say) -> None:
        self.say = say
        self.totals: dict[str, Counter[str]] = {}
        self.warned: set[tuple[str, str]] = set()

    def add(self, method: str, records: Sequence[dict[str, Any]]) -> None:
        t = self.totals.setdefault(method, Counter())
        t.update(tally(records))
        for kind, of, what, limit, advice in _WARNINGS:
            if t[of] and t[kind] / t[of] > limit and (method, kind) not in self.warned:
                self.warned.add((method, kind))
                self.say(f"{'warning' if advice else 'note'}: {method}: {t[kind]} of {t[of]} {what[0]} "
                         f"so far ({t[kind] / t[of]:.1%}) {what[1]}" + (f"; {advice}" if advice else ""))


# (count, out of, (noun, what happened), threshold, advice; None: a note, nothing to act on)
_WARNINGS = (
    ("cut_read", "answers", ("answers", "stopped at the token limit (answers to the questions, "
                             "reasoning traces, judge verdicts or answers left empty)"), CUT_WARN,
     "raise --answer-tokens/--probe-tokens/--judge-tokens (reasoning models need thousands)"),
    ("cut_context", "answers", ("answers", "were answers to the sample cut at --answer-tokens; "
                                "the questions follow each as far as it went, so no vote is lost "
                                "to the cut (expected with a short limit, as in the demo)"), CUT_WARN, None),
    ("unjudged", "verdicts", ("judge verdicts", "are unusable (unjudged)"), UNJUDGED_WARN,
     "use --constrain (verdicts held to their JSON schema) or a stronger --judge-model"),
    ("unverified", "verdicts", ("judge verdicts", "quote nothing that is in the judged text, "
                                "or copy the judge prompt (unverified: they cast no vote)"), UNJUDGED_WARN,
     "the judge is not reading the text; use a stronger --judge-model"),
)
