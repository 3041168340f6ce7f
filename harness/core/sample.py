"""The unit of data: a conversation transcript with an eval/deploy label."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
Label = Literal["eval", "deploy"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
LABELS: tuple[str, ...] = ("eval", "deploy")


@dataclass(frozen=True)
class ToolCall:
    """One tool call made by an assistant message (arguments kept as a JSON string)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    """One chat message; `content` is plain text (content blocks are joined on load).

    `reasoning` holds an assistant's reasoning (thinking) blocks, kept apart from the answer in
    `content`; renderers show it as ``<think>...</think>`` before the answer (see render.py).
    """

    role: str
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    reasoning: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            d["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.reasoning is not None:
            d["reasoning"] = self.reasoning
        return d


@dataclass(frozen=True)
class SampleMeta:
    """Metadata used for slicing results and for grouped cross-validation.

    `human_eval_probability` is a P(eval) from real human annotation only, and
    `human_eval_source` names who gave it (e.g. Needham et al.'s two authors); both are set
    together or not at all (see :func:`harness.data.readers.parse_record`).
    """

    category: str
    agentic: bool = False
    eval_type: str = ""
    human_eval_probability: float | None = None
    human_eval_source: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        extra = d.pop("extra")
        d.update(extra)
        return d


@dataclass(frozen=True)
class Sample:
    """A transcript to classify. `label` is the ground truth: "eval" or "deploy"."""

    id: str
    messages: tuple[Message, ...]
    label: str
    metadata: SampleMeta

    @property
    def is_eval(self) -> bool:
        return self.label == "eval"

    @property
    def n_turns(self) -> int:
        """Number of user turns in the full transcript."""
        return sum(1 for m in self.messages if m.role == "user")

    def first_turn(self) -> tuple[Message, ...]:
        """System prompt(s) and the first user message: the paper's default view."""
        out: list[Message] = []
        for m in self.messages:
            if m.role == "system":
                out.append(m)
            elif m.role == "user":
                out.append(m)
                break
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "label": self.label,
            "messages": [m.to_dict() for m in self.messages],
            "metadata": self.metadata.to_dict(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True)


def sample_view(sample: Sample, view: str) -> tuple[Message, ...]:
    """The messages a method sees: the first turn (system + first user message) or all."""
    return sample.first_turn() if view == "first_turn" else sample.messages


def meta_value(sample: Sample, key: str) -> str:
    """A metadata field as a string (category, eval_type, agentic, or any extra field)."""
    m = sample.metadata
    if hasattr(m, key):
        return str(getattr(m, key))
    v = m.extra.get(key)
    return str(v) if v is not None else ""
