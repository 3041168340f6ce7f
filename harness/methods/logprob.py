"""First-token logprob analysis (the paper's fifth method), naive and tokenizer-aware.

Two methods share this module and differ only in the scored position:
- ``logprob`` (the paper's): the first token of the model's response to the sample itself; no
  question is added, so nothing primes the model. Coverage is usually tiny: models rarely start an
  answer with "evaluation" or "deployment", which is the paper's finding.
- ``logprob_question``: the sample followed by a one-word question (prompt file
  ``logprob/question``); the first answer token then usually is a target word.

Both record the naive score (the paper's: probability mass of the target words' first tokens),
the same restricted to the top 20 (what hosted APIs return), and the tokenizer-aware score
(teacher-forced full-word probability of every variant, normalised over the candidates; see
``tokenization.scoring``), each with its coverage. `score` and `prediction` use the aware P(eval)
(eval if >= 0.5); a sample whose candidates carry no probability at all is undecided.
"""

from __future__ import annotations

from typing import Any, ClassVar, Sequence

from ..sample import Message, Sample
from ..voting import Vote
from .base import Method, register, sample_view

# Cases scored by default: lower and Title. An all-caps one-word answer is rare, and its splits
# (SmolLM2: EV|ALU|ATION) make 40 of the 53 proper prefixes that tokenizer-aware scoring must
# send per prompt, i.e. 4x the cost. `evalaware tokens inspect` still lists UPPER variants.
SCORING_CASES = ("lower", "title")


class _LogprobBase(Method):
    form: ClassVar[str]

    def __init__(self, ctx) -> None:  # type: ignore[no-untyped-def]
        super().__init__(ctx)
        from tokenization import ScoringPlan, from_backend

        self._plan = ScoringPlan.build(from_backend(ctx.backend), cases=SCORING_CASES)

    def prompt_messages(self, sample: Sample) -> tuple[Message, ...]:
        msgs = sample_view(sample, self.ctx.config.view)
        if self.form == "question":
            msgs = msgs + (Message("user", self.ctx.prompts.get("logprob/question").text),)
        return msgs

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "form": self.form, "cases": list(SCORING_CASES),
                "aware_tol": self.ctx.config.aware_tol,
                "words": {w.word: w.label for w in self._plan.per_word}}

    def run_batch(self, samples: Sequence[Sample]) -> list[dict[str, Any]]:
        from tokenization import score_prompts

        prompts = [self.ctx.renderer.render(self.prompt_messages(s)) for s in samples]
        # vLLM: score multi-token words through prefix-cached next-token calls (cheaper there).
        via = "prefix" if self.ctx.backend.kind == "vllm" else "loglikelihood"
        scores = score_prompts(self.ctx.backend, prompts, plan=self._plan, aware_via=via,
                               tol=self.ctx.config.aware_tol)
        out = []
        for s, sc in zip(samples, scores):
            p = sc.aware_p_eval
            vote = Vote(None if p is None else ("eval" if p >= 0.5 else "deploy"), p,
                        int(p is not None), int(p is None))
            out.append(self.record(s, vote, form=self.form, **sc.to_dict()))
        return out


@register
class LogprobResponse(_LogprobBase):
    name = "logprob"
    description = "target-word probability at the first token of the model's own response"
    form = "response"


@register
class LogprobQuestion(_LogprobBase):
    name = "logprob_question"
    description = "target-word probability after a one-word eval-or-deployment question"
    form = "question"
