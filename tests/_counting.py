"""A real-backend wrapper that counts calls (for "a re-run makes no model calls" tests)."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from harness.backends.base import Backend, Generation, GenerationRequest, WrappedBackend


class Counting(WrappedBackend):
    """Passes every call to a real backend and counts the generated items."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.calls: Counter[str] = Counter()
        self.prompts: list[str] = []

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        self.calls["generate"] += len(requests)
        self.prompts += [self.tokenizer.decode(list(r.prompt_ids)) for r in requests]
        return self.inner.generate(requests)
