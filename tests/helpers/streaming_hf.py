"""A streaming backend over a real HF model, for the streaming run loop's tests: every request
goes through :class:`harness.backends.stream.EngineDriver`; one engine step generates everything
queued since the last step (in one `generate` call on the model), so requests of many callers
share a batch. Scoring calls run on the driver thread (the model is used by one thread only).
`steps` records how many requests each step ran."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from harness.backends.base import Backend, Generation, GenerationRequest, WrappedBackend
from harness.backends.stream import Callers, EngineDriver


class _HFSteps:
    paced = False

    def __init__(self, hf: Backend) -> None:
        self.hf = hf
        self.queued: list[tuple[str, GenerationRequest]] = []
        self.n = 0
        self.steps: list[int] = []

    def add(self, prompts: Sequence[Any], params: Sequence[Any]) -> list[str]:
        ids = []
        for p, sp in zip(prompts, params):
            self.n += 1
            ids.append(str(self.n))
            self.queued.append((str(self.n), GenerationRequest(tuple(p), sp)))
        return ids

    def step(self) -> list[tuple[str, Any]]:
        batch, self.queued = self.queued, []
        self.steps.append(len(batch))
        return list(zip([i for i, _ in batch], self.hf.generate([r for _, r in batch])))

    def has_unfinished(self) -> bool:
        return bool(self.queued)

    def abort(self, ids: Sequence[str]) -> None:
        self.queued = [(i, r) for i, r in self.queued if i not in set(ids)]


class StreamingHF(WrappedBackend):
    """`inner` (an HF backend) behind an engine driver; declares `streaming`."""

    def __init__(self, inner: Backend, capacity: int = 64, callers: Callers | None = None) -> None:
        super().__init__(inner)
        self.engine = _HFSteps(inner)
        self.driver = EngineDriver(self.engine, callers, name="hf-steps")
        self._caps = replace(inner.capabilities, streaming=True, capacity=capacity)

    @property
    def capabilities(self):  # type: ignore[override]
        return self._caps

    @property
    def callers(self) -> Callers:
        return self.driver.callers

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return self.driver.run([r.prompt_ids for r in requests], [r.params for r in requests])

    def _on_driver(self, name: str, *args: Any) -> Any:
        return self.driver.call(getattr(self.inner, name), *args)

    def next_token_logprobs(self, prompts, token_ids=None):  # type: ignore[no-untyped-def]
        return self._on_driver("next_token_logprobs", prompts, token_ids)

    def next_token_view(self, prompts, token_ids, top_k):  # type: ignore[no-untyped-def]
        return self._on_driver("next_token_view", prompts, token_ids, top_k)

    def next_token_logmass(self, prompts, token_ids):  # type: ignore[no-untyped-def]
        return self._on_driver("next_token_logmass", prompts, token_ids)

    def next_token_logmasses(self, prompts, token_sets):  # type: ignore[no-untyped-def]
        return self._on_driver("next_token_logmasses", prompts, token_sets)

    def loglikelihood(self, pairs):  # type: ignore[no-untyped-def]
        return self._on_driver("loglikelihood", pairs)

    def continuation_scores(self, pairs, token_ids):  # type: ignore[no-untyped-def]
        return self._on_driver("continuation_scores", pairs, token_ids)
