"""Pieces every dataset reader shares (:mod:`harness.data.readers`, :mod:`harness.data.inspect_logs`):
where a record is (for one-line errors), chat-message validation, and the loaded result."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import DatasetError
from harness.core.sample import ROLES, Message, Sample, ToolCall


class RecordContext:
    """Where we are in a file, for error messages."""

    def __init__(self, path: Path, index: int | None, record_id: str | None = None) -> None:
        self.path, self.index, self.record_id = path, index, record_id

    def fail(self, message: str, field: str | None = None) -> DatasetError:
        return DatasetError(str(self.path), message, self.index, self.record_id, field)


def id_key(sample_id: str) -> str:
    """The form in which two sample ids are one: Unicode NFC. Ids that differ only in how an
    accent is encoded (``é`` as one code point or as ``e`` + a combining accent) look the same in
    every report, export and join, so a dataset may not hold both: the readers refuse it rather
    than rewrite ids (a normalized id would no longer match the source it came from)."""
    return unicodedata.normalize("NFC", sample_id)


def duplicate_id(first_id: str, first_where: str, sample_id: str) -> str:
    """The message for `sample_id` meeting `first_id` (at `first_where`) under :func:`id_key`."""
    if first_id == sample_id:
        return f"duplicate id (first at {first_where})"
    return (f"id {ascii(sample_id)} is the same as {ascii(first_id)} ({first_where}) after Unicode "
            "NFC normalization (they differ only in how characters are encoded); rename one")


def _reasoning_block(block: dict[str, Any]) -> str:
    """Text of a reasoning block (Inspect's / Anthropic's shape); a redacted one keeps its summary."""
    if block.get("redacted"):
        return str(block.get("summary") or "[redacted reasoning]")
    text = block.get("reasoning", block.get("thinking", block.get("text")))
    return text if isinstance(text, str) else ""


def _content(raw: Any, ctx: RecordContext, field: str) -> tuple[str | None, str | None]:
    """Normalise message content (string, list of content blocks, or null) to (text, reasoning).

    Reasoning blocks (``{type: reasoning, reasoning}``) go to the reasoning, not into the answer;
    other non-text blocks (images, audio) are represented by their type only.
    """
    if raw is None or isinstance(raw, str):
        return raw, None
    if isinstance(raw, list):
        parts, reasoning = [], []
        for j, block in enumerate(raw):
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and block.get("type") in ("reasoning", "thinking"):
                reasoning.append(_reasoning_block(block))
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(block, dict) and block.get("type") not in (None, "text"):
                parts.append(f"[{block.get('type')}]")
            else:
                raise ctx.fail("content block must be a string or {type: text, text}", f"{field}[{j}]")
        return "\n".join(parts), ("\n\n".join(r for r in reasoning if r) or None) if reasoning else None
    raise ctx.fail(f"content must be a string, a list of text blocks, or null, not {type(raw).__name__}",
                   field)


def _tool_calls(raw: Any, ctx: RecordContext, field: str) -> tuple[ToolCall, ...]:
    """Accept both Needham's `{id, function: name, arguments}` and OpenAI's nested shape."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ctx.fail("tool_calls must be a list", field)
    calls = []
    for j, c in enumerate(raw):
        f = f"{field}[{j}]"
        if not isinstance(c, dict):
            raise ctx.fail("tool call must be an object", f)
        fn = c.get("function")
        if isinstance(fn, dict):
            name, args = fn.get("name"), fn.get("arguments", "")
        else:
            name, args = fn, c.get("arguments", "")
        if not isinstance(name, str) or not name:
            raise ctx.fail("tool call has no function name", f + ".function")
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False, sort_keys=True)
        calls.append(ToolCall(id=str(c.get("id") or f"call_{j}"), name=name, arguments=args))
    return tuple(calls)


def parse_messages(raw: Any, ctx: RecordContext, field: str) -> tuple[Message, ...]:
    """Validate a list of chat-message dicts (roles, content blocks, tool calls, reasoning)."""
    if not isinstance(raw, list):
        raise ctx.fail("must be a list of messages", field)
    if not raw:
        raise ctx.fail("has no messages", field)
    out = []
    for j, m in enumerate(raw):
        f = f"{field}[{j}]"
        if not isinstance(m, dict):
            raise ctx.fail("message must be an object", f)
        role = m.get("role")
        if role not in ROLES:
            raise ctx.fail(f"unknown role {role!r} (expected one of {', '.join(ROLES)})", f + ".role")
        if "content" not in m and not m.get("tool_calls"):
            raise ctx.fail("message has no content", f + ".content")
        content, reasoning = _content(m.get("content"), ctx, f + ".content")
        explicit = m.get("reasoning")
        if explicit is not None and not isinstance(explicit, str):
            raise ctx.fail("reasoning must be a string", f + ".reasoning")
        out.append(Message(
            role=role, content=content,
            tool_calls=_tool_calls(m.get("tool_calls"), ctx, f + ".tool_calls"),
            tool_call_id=m.get("tool_call_id"),
            reasoning="\n\n".join(r for r in (explicit, reasoning) if r) or None,
        ))
    if not any(m.role == "user" for m in out):
        raise ctx.fail("has no user message", field)
    return tuple(out)


@dataclass
class LoadedDataset:
    """A dataset's samples and notes for the user (e.g. samples an Inspect log lacks)."""

    samples: list[Sample]
    notes: list[str]
