"""Default token limits: one set for models that answer directly, one for models whose chat
template opens a reasoning block (Qwen3, DeepSeek-R1, gpt-oss), which spend hundreds to
thousands of tokens thinking before the answer.

| limit | used by | plain | reasoning model |
|---|---|---|---|
| `answer_tokens` | the model's answer to the sample (every method), the elicited reasoning trace | 256 | 4096 |
| `probe_tokens` | the answer to each binary / probability / motivation question | 160 | 2048 |
| `judge_tokens` | each judge verdict (motivation, reasoning) | 1024 | 4096 |

A limit given on the command line always wins. Whatever the limits, every record counts the
answers that stopped at the limit (`n_cut`), reports show the count and a run warns when more
than 10% of a method's answers were cut where it costs a reading (:mod:`harness.run.monitor`): a
cut answer is an empty or unparseable vote for a thinking model, and a cut trace lowers the
reasoning judge's hit rate. An answer to the sample cut with its text kept (`n_cut_context`) is
only context: the questions follow it as far as it went, so it gets a note, not a warning.
"""

from __future__ import annotations

from typing import Any

PLAIN = {"answer_tokens": 256, "probe_tokens": 160, "judge_tokens": 1024}
REASONING = {"answer_tokens": 4096, "probe_tokens": 2048, "judge_tokens": 4096}
_MARKERS = ("<think>", "<|channel|>")


def opens_reasoning(tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> bool:
    """The chat template knows a reasoning block and it is not switched off
    (``enable_thinking=False``)."""
    if (template_kwargs or {}).get("enable_thinking") is False:
        return False
    template = str(getattr(tokenizer, "chat_template", None) or "")
    return any(m in template for m in _MARKERS)


def default_token_limits(tokenizer: Any, template_kwargs: dict[str, Any] | None = None,
                         **given: int | None) -> dict[str, int]:
    """The three limits: those `given` (not None), the rest from the model's kind."""
    base = REASONING if opens_reasoning(tokenizer, template_kwargs) else PLAIN
    return {k: given.get(k) if given.get(k) is not None else v for k, v in base.items()}
