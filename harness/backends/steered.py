"""A steered backend: the same Backend contract, with vectors added to the residual stream.

:class:`Steering` says what is added where (``{layer id: vector}``, positions ``all`` or
``generated``) and carries a label (vector hash, control, alpha) for the store. A
:class:`SteeredBackend` wraps any backend that can steer (hf, vllm) and applies the steering to
every call; its identity (hence every cache key of the call cache) gains a ``steering`` entry, so
each condition is cached and resumable on its own. A null steering (alpha = 0, or no layers) adds
nothing, installs no hook and keeps the inner identity: it reuses the unsteered cache and
reproduces unsteered outputs exactly.

Layer ids follow :mod:`harness.backends.hooks`: id ``i`` (1..L-1) is the residual stream entering block
``i``. Positions: ``all`` adds at every token (prompt and generated); ``generated`` only at
tokens computed on top of a KV cache, i.e. after the prompt (HF only: vLLM refuses it, its hook
cannot tell prompt tokens from generated ones in a mixed batch). With ``generated``, first-token
logprobs are unsteered by definition (the first answer token is predicted at the last prompt
position).
"""

from __future__ import annotations

import hashlib
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, ContextManager

import numpy as np

from harness.core.errors import BackendError
from harness.backends.base import Backend, Capabilities, WrappedBackend

POSITIONS = ("all", "generated")


@dataclass(frozen=True)
class Steering:
    """Vectors to add: ``additions[layer]`` has shape (hidden,), already scaled."""

    additions: dict[int, np.ndarray]
    positions: str = "all"
    label: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.positions not in POSITIONS:
            raise BackendError(f"steering positions {self.positions!r}: use all or generated")
        sizes = {np.asarray(v).shape for v in self.additions.values()}
        if len(sizes) > 1 or any(len(s) != 1 for s in sizes):
            raise BackendError(f"steering vectors must be 1-d and of one size, got {sizes}")

    @property
    def is_null(self) -> bool:
        """True when nothing would be added (no layers, or all-zero vectors)."""
        return not any(np.any(np.asarray(v) != 0) for v in self.additions.values())

    def arrays(self) -> dict[int, np.ndarray]:
        return {int(l): np.ascontiguousarray(v, dtype=np.float32) for l, v in
                sorted(self.additions.items())}

    def digest(self) -> str:
        """sha256 of the exact float32 vectors, their layers and the positions."""
        h = hashlib.sha256(self.positions.encode())
        for layer, v in self.arrays().items():
            h.update(f"|{layer}|".encode())
            h.update(v.tobytes())
        return h.hexdigest()

    def key(self) -> dict[str, Any]:
        """What enters the backend identity (and so every cache key)."""
        return {**self.label, "positions": self.positions, "layers": sorted(self.additions),
                "sha256": self.digest()}


class SteeredBackend(WrappedBackend):
    """`inner` with `steering` applied to every call (see the module docstring)."""

    def __init__(self, inner: Backend, steering: Steering) -> None:
        super().__init__(inner)
        self.steering_spec = steering
        if not steering.is_null:
            inner.check_steering(steering)  # refuse early, with the backend's reason

    @property
    def identity(self) -> dict[str, Any]:
        if self.steering_spec.is_null:
            return self.inner.identity
        return {**self.inner.identity, "steering": self.steering_spec.key()}

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        """The inner backend's, but not streaming when steered: the engine holds one steering at
        a time, so steered calls must not share a batch with other callers'."""
        caps = self.inner.capabilities
        return caps if self.steering_spec.is_null else replace(caps, streaming=False)

    def around_call(self) -> ContextManager[None]:
        """Every model call (generation, logprobs, likelihoods, hidden states) runs steered."""
        if self.steering_spec.is_null:
            return nullcontext()
        return self.inner.steering(self.steering_spec)
