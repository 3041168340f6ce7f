"""Reasoning-trace analysis (after Abdelnabi and Salem 2025): the judge reads the model's
reasoning about the sample for evaluation-awareness cues and quotes them.

Where the reasoning comes from (``details.reasoning_source``):
- ``native``: the model reasons on its own (its chat template or vocabulary knows ``<think>``
  or gpt-oss channels). The reasoning of the model's own answer to the sample is judged, the
  same cached answer every method uses. Run reasoning models with thinking enabled.
- ``elicited``: models without native reasoning (SmolLM2) get the instruction in
  ``prompts/reasoning/elicit.txt`` appended to the system prompt (an empty override file turns
  it off) and the answer is pre-filled with ``<think>``; the text up to ``</think>`` (or to the
  end, if cut off) is judged.
A sample without reasoning text gets no prediction and counts as invalid (error "no reasoning
text"). One trace, one verdict per sample: `n_votes` does not apply.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..backends.base import Generation, GenerationRequest
from ..judge import judge_identity, judge_texts
from ..reasoning import split_reasoning
from ..render import Renderer
from ..sample import Message, Sample
from ..voting import majority
from .base import Method, RunContext, answer_samples, register, sample_view

THINK_PREFIX = "<think>\n"
SOURCES = ("native", "elicited")


def has_native_reasoning(renderer: Renderer) -> bool:
    """Whether the model reasons natively: its chat template or vocabulary has reasoning markers."""
    tok = renderer.tokenizer
    template = str(getattr(tok, "chat_template", None) or "")
    if "<think>" in template or "</think>" in template or "<|channel|>" in template:
        return True
    vocab = tok.get_vocab() if hasattr(tok, "get_vocab") else {}
    return "</think>" in vocab or "<|channel|>" in vocab


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
    for t in sorted((t for t in getattr(tokenizer, "all_special_tokens", []) if t), key=len, reverse=True):
        text = text.replace(t, "")
    return text.strip()


@register
class ReasoningTrace(Method):
    name = "reasoning"
    description = "a judge reads the reasoning (native, or elicited with <think>) for awareness cues"

    def __init__(self, ctx: RunContext, source: str | None = None) -> None:
        super().__init__(ctx)
        if source is not None and source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        self.source = source or ("native" if has_native_reasoning(ctx.renderer) else "elicited")

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "reasoning_source": self.source,
                "judge": judge_identity(self.ctx)}

    def traces(self, samples: Sequence[Sample]) -> list[Generation | None]:
        """The generation holding each sample's reasoning; for elicited traces the reasoning
        is split from the pre-filled ``<think>``."""
        ctx, cfg = self.ctx, self.ctx.config
        if self.source == "native":
            return answer_samples(ctx, samples)
        instruction = ctx.prompts.get("reasoning/elicit").text
        reqs = [GenerationRequest(ctx.renderer.render(with_instruction(sample_view(s, cfg.view), instruction),
                                                      assistant_prefix=THINK_PREFIX),
                                  cfg.params(cfg.answer_tokens)) for s in samples]
        out = []
        for g in ctx.backend.generate(reqs):
            reasoning, answer = split_reasoning("<think>" + g.raw_text)
            tok = ctx.renderer.tokenizer
            out.append(Generation(text=_strip_specials(answer, tok),
                                  reasoning=_strip_specials(reasoning or "", tok),
                                  raw_text=g.raw_text, token_ids=g.token_ids,
                                  finish_reason=g.finish_reason))
        return out

    def run_batch(self, samples: Sequence[Sample]) -> list[dict[str, Any]]:
        gens = self.traces(samples)
        texts = [g.reasoning if g is not None and g.reasoning else None for g in gens]
        verdicts = judge_texts(self.ctx, texts, kind="reasoning")
        records = []
        for s, g, t, v in zip(samples, gens, texts, verdicts):
            error = "no reasoning text" if t is None else (None if v.ok else f"judge: {v.error}")
            vote = {"k": 0, "variant": "judge_reasoning", "value": v.label if t else None,
                    "error": error, "judge": v.to_dict()}
            records.append(self.record(
                s, majority([vote["value"]]), reasoning_source=self.source, reasoning=t,
                answer=g.text if g is not None else None,
                finish_reason=g.finish_reason if g is not None else None, votes=[vote]))
        return records
