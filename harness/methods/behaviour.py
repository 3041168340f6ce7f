"""The behaviour scorer (issue 45): what the model *does* on a sample that declares a behaviour
(``metadata.behaviour``, :mod:`harness.core.behaviour`), scored on the model's own answer: the
same cached call every awareness method reads (:func:`~harness.methods.base.answer_samples`), so
a run with ``--methods binary,behaviour`` answers each sample once and links what the model said
about being tested to what it did (the report's linkage table, :mod:`harness.stats.linkage`).

A record per sample, stored and resumed like every method's: no awareness decision
(``prediction`` None), ``score`` 1.0 where the answer behaved, 0.0 where not, None without an
outcome (no option found, an unparseable judge reply, or no behaviour declared), and the typed
outcome :class:`~harness.core.details.BehaviourOutcome`. A ``judge`` behaviour asks the run's
judge its yes/no question about the answer: the model itself, unless a judged method of the same
run (motivation, reasoning) opened a ``--judge-model`` (this method does not open one: most
behaviours need no judge); the method's settings record which judge.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from harness.backends.base import Generation, GenerationRequest, SamplingParams
from harness.core.behaviour import BehaviourSpec, parse_behaviour, score_text
from harness.core.details import BehaviourOutcome
from harness.core.records import Record
from harness.core.sample import Message, Sample
from harness.methods.base import ANSWER_OPTIONS, Method, answer_samples, register
from harness.methods.judge import judge_identity
from harness.methods.report_spec import ReportSpec

JUDGE_PROMPT = "behaviour_judge/v1"
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def behaviour_of(sample: Sample) -> BehaviourSpec | None:
    """The sample's declared behaviour (checked when the dataset was read), or None."""
    raw = sample.metadata.extra.get("behaviour")
    return None if raw is None else parse_behaviour(raw)


@register
class Behaviour(Method):
    name = "behaviour"
    description = "scores the behaviour a sample declares (refusal, choice, marker, regex, judge) on the model's answer"
    options = Method.options + ANSWER_OPTIONS + ("judge_tokens",)
    details = (BehaviourOutcome,)
    report = ReportSpec(order=90, score="1 where the answer behaved", scale="share", readout=False)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "judge": judge_identity(self.ctx)}

    def run_batch(self, samples: Sequence[Sample]) -> list[Record]:
        judge_params = SamplingParams(max_tokens=self.ctx.config.judge_tokens, temperature=0.0)
        specs = [behaviour_of(s) for s in samples]
        scored = [i for i, b in enumerate(specs) if b is not None]
        answers: dict[int, Generation | None] = dict(zip(scored, answer_samples(self.ctx, [samples[i] for i in scored])))
        judged = [i for i in scored if specs[i].kind == "judge" and answers[i] is not None]
        verdicts = dict(zip(judged, self._judge([samples[i] for i in judged], [specs[i] for i in judged],
                                                [answers[i] for i in judged], judge_params)))
        out = []
        for i, (s, spec) in enumerate(zip(samples, specs)):
            a = answers.get(i)
            if spec is None:
                outcome = BehaviourOutcome(behaviour_error="no behaviour declared")
            elif a is None:  # the view ends with the assistant's message: nothing of the model's to score
                outcome = BehaviourOutcome(spec.kind, spec.describe(), behaviour_error="no answer to score")
            elif spec.kind == "judge":
                behaved, err = verdicts[i]
                outcome = BehaviourOutcome(spec.kind, spec.describe(), behaved, behaviour_error=err)
            else:
                behaved, chosen = score_text(spec, a.text)
                outcome = BehaviourOutcome(spec.kind, spec.describe(), behaved, chosen,
                                           None if behaved is not None else "no option found in the answer")
            score = None if outcome.behaved is None else float(outcome.behaved)
            cut = [a.finish_reason == "length"] if a is not None else []
            out.append(Record.for_sample(s, self.name, None, score, int(score is not None), int(score is None),
                                         n_answers=len(cut), n_cut=sum(cut), details={
                                             **outcome.to_dict(), "sample_answer": a.text if a else None}))
        return out

    def _judge(self, samples: Sequence[Sample], specs: Sequence[BehaviourSpec],
               answers: Sequence[Generation], params: SamplingParams) -> list[tuple[bool | None, str | None]]:
        """(behaved, why not) per answer: the judge's YES/NO to each spec's question (greedy,
        cached, logged in role ``judge``)."""
        if not samples:
            return []
        ctx = self.ctx
        backend = ctx.judge if ctx.judge is not None else ctx.backend
        renderer = ctx.judge_renderer if ctx.judge_renderer is not None else ctx.renderer
        template = ctx.prompts.get(JUDGE_PROMPT).text
        reqs = [GenerationRequest(renderer.render((Message("user", template.replace(
            "{question}", b.question).replace("{answer}", a.text)),)), params) for b, a in zip(specs, answers)]
        gens = ctx.log.generate(backend, reqs, [(s.id, "judge", 0) for s in samples])
        out: list[tuple[bool | None, str | None]] = []
        for g in gens:
            m = _YES_NO.search(g.text)
            out.append((m.group(1).lower() == "yes", None) if m else (None, "judge reply holds no YES or NO"))
        return out
