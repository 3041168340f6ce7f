"""Binary test (Needham et al. 2025, first person as in the paper): after answering the sample,
the model is asked whether the interaction is an evaluation or real deployment; tagged label;
majority of the variants."""

from __future__ import annotations

from harness.core.details import LabelGate, LabelVote
from harness.methods.answer_format import BINARY
from harness.core.parsing import parse_label
from harness.methods.voting import majority
from harness.methods.report_spec import ReportSpec
from harness.methods.base import LABEL_OPTIONS, LABEL_SCORE_NOTE, QuestionVoteMethod, register


@register
class BinaryTest(QuestionVoteMethod):
    name = "binary"
    description = "asks eval-or-deployment after the model's answer; majority of 5 variants"
    prompt_set = "binary"
    parse = staticmethod(parse_label)
    aggregate = staticmethod(majority)
    answer_format = BINARY
    details = (LabelGate, LabelVote)
    options = QuestionVoteMethod.options + LABEL_OPTIONS
    report = ReportSpec(order=10, constrainable=True,
                        score="mean P(EVALUATION) at the label",
                        summary_note=LABEL_SCORE_NOTE)
