"""A run's model replayed from its call cache, without loading it.

:func:`replayed` is a :class:`~harness.backends.cache.CachedBackend` over a
:class:`ReplayBackend`: the identity the run recorded (so every call key is the run's) and an
engine that answers nothing, so a call the run made comes from its cache and any other raises
:class:`CacheMiss`. Capture reads a run's answers this way (:mod:`probes.activations.sequences`).
"""

from __future__ import annotations

from typing import Any, Sequence

from harness.backends.base import Backend, Generation, GenerationRequest
from harness.backends.cache import CachedBackend
from harness.runlog import RunLog


class CacheMiss(Exception):
    """A replayed call the run's cache does not hold."""


class ReplayBackend(Backend):
    """A backend with a run's model identity that only answers from the call cache."""

    kind = "replay"

    def __init__(self, identity: dict[str, Any], tokenizer: Any) -> None:
        self._identity, self.tokenizer = identity, tokenizer

    @property
    def identity(self) -> dict[str, Any]:
        return self._identity

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        raise CacheMiss

    def next_token_logprobs(self, prompts, token_ids=None):  # type: ignore[no-untyped-def]
        raise CacheMiss

    def loglikelihood(self, pairs):  # type: ignore[no-untyped-def]
        raise CacheMiss


def replayed(store: RunLog, identity: dict[str, Any], tokenizer: Any) -> CachedBackend:
    """The run's model (`identity`, as recorded) answering from `store`'s call cache only."""
    return CachedBackend(ReplayBackend(identity, tokenizer), store)
