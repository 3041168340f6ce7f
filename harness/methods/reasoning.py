"""Reasoning-trace analysis (after Abdelnabi and Salem 2025): the judge reads the model's
reasoning about the sample for evaluation-awareness cues and quotes them.

Where the reasoning comes from (per record, ``details.reasoning_source``):
- ``native``: the reasoning of the model's own answer to the sample (``<think>`` block or gpt-oss
  analysis channel), i.e. the same cached answer every method uses. Run reasoning models with
  thinking enabled.
- ``elicited``: for answers without reasoning (models without native reasoning, such as
  SmolLM2), the sample is asked again with the instruction in ``prompts/reasoning/elicit.txt``
  appended to the system prompt (an empty override file turns it off) and the answer pre-filled
  with ``<think>``; the text up to ``</think>`` (or to the end, if cut off) is judged.
Mode ``auto`` (the default) takes native reasoning where the answer has some and elicits it
elsewhere; ``native`` never elicits, ``elicited`` always does. A sample still without
reasoning text gets no prediction and counts as invalid (error "no reasoning text"). One trace
and one verdict per sample: `n_votes` does not apply.
"""

from __future__ import annotations

from typing import Any, Sequence

from harness.backends.base import Generation, GenerationRequest, _remove_all
from harness.methods.judge import judge_identity, judge_texts
from harness.core.parsing import Parsed
from harness.core.records import Record, Vote
from harness.core.reasoning import split_reasoning
from harness.core.sample import Message, Sample
from harness.methods.voting import majority
from harness.methods.report_spec import ReportSpec
from harness.methods.base import ANSWER_OPTIONS, JUDGE_OPTIONS, Method, RunContext, answer_samples, register
from harness.core.sample import sample_view

THINK_PREFIX = "<think>\n"
MODES = ("auto", "native", "elicited")


def with_instruction(messages: Sequence[Message], instruction: str) -> tuple[Message, ...]:
    """Append `instruction` to the first system message (or add one in front)."""
    if not instruction:
        return tuple(messages)
    msgs = list(messages)
    for i, m in enumerate(msgs):
        if m.role == "system":
            msgs[i] = Message("system", f"{m.content or ''}\n\n{instruction}".strip())
            return tuple(msgs)
    return (Message("system", instruction),) + tuple(msgs)


def _strip_specials(text: str, tokenizer: Any) -> str:
    return _remove_all(text, [t for t in getattr(tokenizer, "all_special_tokens", []) if t]).strip()


def choose_sources(answers: Sequence[Generation | None], mode: str) -> list[str]:
    """Per sample: "native" where `mode` allows it and the answer has reasoning (always under
    mode "native"), else "elicited"."""
    if mode == "native":
        return ["native"] * len(answers)
    if mode == "elicited":
        return ["elicited"] * len(answers)
    return ["native" if a is not None and a.reasoning else "elicited" for a in answers]


@register
class ReasoningTrace(Method):
    name = "reasoning"
    needs_judge = True
    description = "a judge reads the reasoning (native, or elicited with <think>) for awareness cues"
    report = ReportSpec(order=40, score="share of aware verdicts", scale="share")
    options = Method.options + ANSWER_OPTIONS + JUDGE_OPTIONS  # one trace, one verdict: no n_votes

    def __init__(self, ctx: RunContext, source: str = "auto") -> None:
        super().__init__(ctx)
        if source not in MODES:
            raise ValueError(f"source must be one of {MODES}, got {source!r}")
        self.source = source

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "reasoning_source": self.source,
                "judge": judge_identity(self.ctx)}

    def elicit_prompt(self, sample: Sample) -> tuple[int, ...]:
        """The prompt of the elicited trace: the view with the instruction, ``<think>`` pre-filled."""
        ctx = self.ctx
        instruction = ctx.prompts.get("reasoning/elicit").text
        return ctx.renderer.render(with_instruction(sample_view(sample, ctx.config.view), instruction),
                                   assistant_prefix=THINK_PREFIX)

    def elicit(self, samples: Sequence[Sample]) -> list[Generation]:
        """Generations whose `reasoning` is the text after a pre-filled ``<think>``."""
        ctx, cfg = self.ctx, self.ctx.config
        reqs = [GenerationRequest(self.elicit_prompt(s), cfg.params(cfg.answer_tokens)) for s in samples]
        tok, out = ctx.renderer.tokenizer, []
        for g in ctx.log.generate(ctx.backend, reqs, [(s.id, "elicited_reasoning", 0) for s in samples]):
            reasoning, answer = split_reasoning("<think>" + g.raw_text)
            out.append(Generation(text=_strip_specials(answer, tok),
                                  reasoning=_strip_specials(reasoning or "", tok),
                                  raw_text=g.raw_text, token_ids=g.token_ids,
                                  finish_reason=g.finish_reason))
        return out

    def traces(self, samples: Sequence[Sample]) -> tuple[list[str], list[Generation | None]]:
        """Each sample's reasoning source and the generation holding its reasoning."""
        answers = (answer_samples(self.ctx, samples) if self.source != "elicited"
                   else [None] * len(samples))
        sources = choose_sources(answers, self.source)
        todo = [i for i, src in enumerate(sources) if src == "elicited"]
        gens: list[Generation | None] = list(answers)
        for i, g in zip(todo, self.elicit([samples[i] for i in todo])):
            gens[i] = g
        return sources, gens

    def run_batch(self, samples: Sequence[Sample]) -> list[Record]:
        sources, gens = self.traces(samples)
        texts = [g.reasoning if g is not None and g.reasoning else None for g in gens]
        verdicts = judge_texts(self.ctx, texts, kind="reasoning", tags=[(s.id, 0) for s in samples])
        records = []
        for s, src, g, t, v in zip(samples, sources, gens, texts, verdicts):
            p = v.as_parsed() if t is not None else Parsed(None, "no reasoning text")
            vote = Vote(0, "judge_reasoning", p.value, p.error, v)
            records.append(self.record(
                s, majority([vote.value]), answers=[g], reasoning_source=src, reasoning=t,
                answer=g.text if g is not None else None,
                finish_reason=g.finish_reason if g is not None else None, votes=[vote]))
        return records
