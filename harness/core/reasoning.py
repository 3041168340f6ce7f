"""Split a completion into reasoning and answer, per model family.

- ``<think> ... </think> answer`` (Qwen3, DeepSeek-R1, and our elicited-thinking prompts). A
  completion cut off inside ``<think>`` has reasoning and an empty answer. Qwen3/R1 templates
  open ``<think>`` in the prompt, so a lone ``</think>`` also marks the split.
- gpt-oss harmony: ``<|channel|>analysis<|message|>...<|end|>`` holds the reasoning and
  ``<|channel|>final<|message|>...`` the answer.
Anything else has no reasoning.
"""

from __future__ import annotations

import re

_HARMONY = re.compile(r"<\|channel\|>(\w+)(?:[^<]*)<\|message\|>(.*?)(?=<\|end\|>|<\|return\|>|<\|start\|>|$)",
                      re.S)


def split_reasoning(text: str) -> tuple[str | None, str]:
    """Return (reasoning or None, answer)."""
    if "<|channel|>" in text:
        analysis, final = [], []
        for channel, body in _HARMONY.findall(text):
            (analysis if channel == "analysis" else final if channel == "final" else analysis).append(body)
        return ("\n".join(analysis).strip() if analysis else None), "\n".join(final).strip()
    if "</think>" in text:
        head, _, tail = text.partition("</think>")
        return head.replace("<think>", "", 1).strip(), tail.strip()
    if "<think>" in text:  # unterminated: all reasoning, no answer
        before, _, after = text.partition("<think>")
        return after.strip(), before.strip()
    return None, text.strip()


def reasoning_ended(text: str) -> bool:
    """False for a completion whose reasoning block was opened and never closed (``<think>``
    without ``</think>``; harmony without a ``final`` channel): cut inside its reasoning, it has
    no final answer. True otherwise (closed, or no reasoning at all)."""
    if "<|channel|>" in text:
        return any(channel == "final" for channel, _ in _HARMONY.findall(text))
    return "</think>" in text or "<think>" not in text
