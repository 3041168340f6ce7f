"""A real-backend wrapper that counts calls (for "a re-run makes no model calls" tests)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from harness.backends.base import Backend, Generation, GenerationRequest


class Counting(Backend):
    """Passes every call to a real backend and counts the generated items."""

    def __init__(self, inner: Backend) -> None:
        self.inner, self.kind, self.tokenizer = inner, inner.kind, inner.tokenizer
        self.calls: Counter[str] = Counter()
        self.prompts: list[str] = []

    @property
    def identity(self) -> dict[str, Any]:
        return self.inner.identity

    def __getattr__(self, name: str) -> Any:  # model_info, settings, ... (for the manifest)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        self.calls["generate"] += len(requests)
        self.prompts += [self.tokenizer.decode(list(r.prompt_ids)) for r in requests]
        return self.inner.generate(requests)

    def next_token_logprobs(self, prompts, token_ids=None):
        return self.inner.next_token_logprobs(prompts, token_ids)

    def loglikelihood(self, pairs):
        return self.inner.loglikelihood(pairs)
