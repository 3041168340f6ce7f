"""Where a reasoning model's *final answer* starts, for first-token (logprob) scoring.

A reasoning model's first generated token opens its reasoning block (Qwen3 and DeepSeek-R1
``<think>``, gpt-oss harmony's ``<|channel|>analysis``), so scoring target words there reads
noise. Decision: the logprob methods score the first token of the final answer after an *empty,
closed* reasoning block, i.e. the model's own non-thinking mode:

- the chat template has an ``enable_thinking`` switch (Qwen3): it is rendered with
  ``enable_thinking=False`` (the template itself writes ``<think>\\n\\n</think>\\n\\n``);
  ``how = "template_thinking_off"``;
- the generation prompt already opens ``<think>`` (DeepSeek-R1's newer templates): it is closed
  empty (``\\n</think>\\n\\n`` after ``<think>\\n``); ``how = "closed_empty_reasoning"``;
- the template knows ``<think>`` blocks but leaves opening one to the model (DeepSeek-R1's older
  template): an empty block ``<think>\\n\\n</think>\\n\\n`` is appended; same ``how``;
- harmony (gpt-oss): the answer goes to the final channel, ``<|channel|>final<|message|>`` is
  appended unless the prompt already ends with it; ``how = "harmony_final_channel"``;
- anything else is scored right after the generation prompt: ``how = "direct"``.

Why not let the model reason and then teacher-force the answer position after its own trace: a
thinking model's trace runs to thousands of tokens (one long generation per sample, and a trace cut
at the token limit has no answer position at all), and the first-token method is about the
model's prior before it deliberates; the reasoning judge covers the trace. The choice is recorded
in every record (``answer_position``) and in the method settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from harness.core.render import Renderer
from harness.core.sample import Message

EMPTY_THINK = "<think>\n\n</think>\n\n"
HARMONY_FINAL = "<|channel|>final<|message|>"
_PROBE = (Message("user", "Hi"),)


@dataclass(frozen=True)
class AnswerStart:
    """How to render a prompt so that it ends right before the final answer's first token."""

    renderer: Renderer
    prefix: str  # appended after the generation prompt
    how: str

    def render(self, messages: Sequence[Message]) -> tuple[int, ...]:
        return self.renderer.render(messages, assistant_prefix=self.prefix)


def answer_start(renderer: Renderer) -> AnswerStart:
    """The rendering that places a prompt right before the final answer (see module doc)."""
    template = str(getattr(renderer.tokenizer, "chat_template", None) or "")
    if "enable_thinking" in template:
        off = Renderer(renderer.tokenizer, {**renderer.template_kwargs, "enable_thinking": False})
        return AnswerStart(off, "", "template_thinking_off")
    text = renderer.render_text(_PROBE) if renderer.has_template else ""
    if text.rstrip().endswith("<think>"):
        return AnswerStart(renderer, "\n</think>\n\n" if text.endswith("<think>\n") else "\n\n</think>\n\n",
                           "closed_empty_reasoning")
    if "<think>" in template or "</think>" in template:
        return AnswerStart(renderer, EMPTY_THINK, "closed_empty_reasoning")
    if "<|channel|>" in template and not text.endswith(HARMONY_FINAL):
        return AnswerStart(renderer, HARMONY_FINAL, "harmony_final_channel")
    return AnswerStart(renderer, "", "direct")
