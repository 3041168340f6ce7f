"""User-motivation guessing (the paper's new method): after answering the sample, the model is
asked an open-ended question about the user's real motivation (the question never mentions
evaluation); a judge decides whether the answer says the user is testing/evaluating the model,
with verbatim evidence quotes; majority of the 3 variants.

Each vote record carries ``answer`` (the model's answer about the motivation) and ``judge``
(:meth:`harness.core.records.Verdict.to_dict`); the taxonomy tool reads both.
"""

from __future__ import annotations

from typing import Any, Sequence

from harness.backends.base import Generation
from harness.methods.judge import judge_identity, judge_texts
from harness.core.parsing import Parsed
from harness.core.records import Verdict
from harness.methods.voting import majority
from harness.methods.report_spec import ReportSpec
from harness.methods.base import JUDGE_OPTIONS, QuestionVoteMethod, register


@register
class UserMotivation(QuestionVoteMethod):
    name = "motivation"
    needs_judge = True
    description = "asks the user's real motivation; a judge looks for 'the user is testing me'; majority of 3"
    prompt_set = "motivation"
    aggregate = staticmethod(majority)
    options = QuestionVoteMethod.options + JUDGE_OPTIONS
    report = ReportSpec(order=30, score="share of aware verdicts", scale="share")

    def parse_answers(self, gens: Sequence[Generation],
                      tags: Sequence[tuple[str, int]]) -> list[tuple[Parsed, Verdict | None]]:
        verdicts = judge_texts(self.ctx, [g.text for g in gens], kind="motivation", tags=tags)
        return [(v.as_parsed(), v) for v in verdicts]

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "judge": judge_identity(self.ctx)}
