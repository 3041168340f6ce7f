"""Structured output for the hf backend: xgrammar's transformers logits processor, with each
grammar compiled once per tokenizer (the same library vLLM uses; see
:class:`harness.backends.base.StructuredOutput`)."""

from __future__ import annotations

from typing import Any, Sequence

import xgrammar as xgr
from xgrammar.contrib.hf import LogitsProcessor

from harness.backends.base import StructuredOutput


class GrammarProcessors:
    """Logits processors for one tokenizer; the grammar's stop tokens are `stop_ids`."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: Sequence[int]) -> None:
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                  stop_token_ids=list(stop_ids))
        self._compiler = xgr.GrammarCompiler(info)
        self._compiled: dict[str, Any] = {}

    def processors(self, structured: StructuredOutput) -> list[Any]:
        """The processor list for one ``generate()`` call (a processor keeps per-row matcher
        state, so it is made anew each call; the compiled grammar is reused)."""
        compiled = self._compiled.get(structured.grammar)
        if compiled is None:
            compiled = self._compiled[structured.grammar] = \
                self._compiler.compile_grammar(structured.grammar)
        return [LogitsProcessor(compiled)]
