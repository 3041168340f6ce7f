"""Render conversations to token ids with the model's own chat template, once, for every backend.

Decisions (documented here because the paper leaves them open):
- Tool calls are written into the assistant's text as ``<tool_call>{"name": ..., "arguments": ...}
  </tool_call>`` so every template shows them the same way; tool results keep the ``tool`` role
  when the template renders it, otherwise they become user messages starting "Tool result:".
- A template that drops or rejects system messages gets the system text prepended to the first
  user message.
- A tokenizer without a chat template gets a plain "System:/User:/Assistant:" transcript with the
  BOS token (base models such as Gemma-3-270M need BOS).
- The rendered text is encoded without adding special tokens, so BOS is never doubled.
- An assistant message's reasoning (e.g. Inspect logs' reasoning blocks) is written before its
  answer as ``<think>\n...\n</think>\n\n``, the convention :mod:`harness.core.reasoning` splits
  completions on, so it stays marked as reasoning in every view and template.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from harness.core.sample import Message

PLAIN_ROLES = {"system": "System", "user": "User", "assistant": "Assistant", "tool": "Tool"}


def message_text(m: Message) -> str:
    """The message's text with reasoning (in ``<think>`` tags) and tool calls written inline."""
    parts = [f"<think>\n{m.reasoning}\n</think>\n"] if m.reasoning else []
    parts += [m.content] if m.content else []
    for c in m.tool_calls:
        parts.append("<tool_call>" + json.dumps({"name": c.name, "arguments": c.arguments},
                                                ensure_ascii=False) + "</tool_call>")
    return "\n".join(parts)


def format_transcript(messages: Sequence[Message]) -> str:
    """A transcript as plain text, for third-person questions ("here is a conversation: ...")."""
    blocks = []
    for m in messages:
        blocks.append(f"{m.role.upper()}: {message_text(m)}")
    return "\n\n".join(blocks)


@dataclass
class Renderer:
    """Turns message lists into prompt token ids for one tokenizer.

    `template_kwargs` are passed to the chat template (e.g. ``{"enable_thinking": False}`` for
    Qwen3) and recorded in the run manifest.
    """

    tokenizer: Any
    template_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.has_template = bool(getattr(self.tokenizer, "chat_template", None))
        self.supports_system = self.has_template and self._probe_role("system")
        self.supports_tool = self.has_template and self._probe_role("tool")

    def _probe_role(self, role: str) -> bool:
        marker = "ZQXJ-probe-7731"
        msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": role, "content": marker}, {"role": "user", "content": "ok"}]
        if role == "system":
            msgs = [{"role": "system", "content": marker}, {"role": "user", "content": "hi"}]
        try:
            return marker in self._apply(msgs, add_generation_prompt=True)
        except Exception:
            return False

    def _apply(self, msgs: list[dict[str, str]], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(msgs, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  **self.template_kwargs)

    def to_dicts(self, messages: Sequence[Message]) -> list[dict[str, str]]:
        """Messages as chat-template dicts, adapted to what the template supports."""
        out: list[dict[str, str]] = []
        pending_system: list[str] = []
        for m in messages:
            text = message_text(m)
            role = m.role
            if role == "system" and not self.supports_system:
                pending_system.append(text)
                continue
            if role == "tool" and not self.supports_tool:
                role, text = "user", f"Tool result:\n{text}"
            if pending_system and role == "user":
                text = "\n\n".join(pending_system + [text])
                pending_system = []
            out.append({"role": role, "content": text})
        if pending_system:
            out.insert(0, {"role": "user", "content": "\n\n".join(pending_system)})
        return out

    def render_text(self, messages: Sequence[Message], add_generation_prompt: bool = True,
                    assistant_prefix: str = "") -> str:
        """The prompt as text; `assistant_prefix` is appended after the generation prompt
        (used to pre-fill the start of the answer, e.g. ``<think>``)."""
        if self.has_template:
            text = self._apply(self.to_dicts(messages), add_generation_prompt)
        else:
            bos = getattr(self.tokenizer, "bos_token", None) or ""
            text = bos + "".join(f"{PLAIN_ROLES[m.role]}: {message_text(m)}\n\n" for m in messages)
            if add_generation_prompt:
                text += "Assistant:"
        return text + assistant_prefix

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True,
               assistant_prefix: str = "") -> tuple[int, ...]:
        text = self.render_text(messages, add_generation_prompt, assistant_prefix)
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def info(self) -> dict[str, Any]:
        """What the manifest records about rendering."""
        template = getattr(self.tokenizer, "chat_template", None) or ""
        return {
            "chat_template_sha256": hashlib.sha256(str(template).encode()).hexdigest(),
            "template_kwargs": self.template_kwargs, "has_template": self.has_template,
            "supports_system": self.supports_system, "supports_tool": self.supports_tool,
        }
