"""The one worker extension the vLLM backend starts its engine with (``worker_extension_cls``):
steering's methods (:mod:`harness.backends.vllm.steer`) and the scoring read-back
(:mod:`harness.backends.vllm.reduce`)."""

from __future__ import annotations

from harness.backends.vllm.reduce import ScoringWorkerExtension
from harness.backends.vllm.steer import SteeringWorkerExtension


class EvalawareWorkerExtension(SteeringWorkerExtension, ScoringWorkerExtension):
    """Mixed into every vLLM worker."""

    def evalaware_threads(self) -> int:
        """The worker's intra-op thread count (recorded in a run's manifest)."""
        import torch

        return torch.get_num_threads()


def worker_extension_qualname() -> str:
    return f"{EvalawareWorkerExtension.__module__}.{EvalawareWorkerExtension.__qualname__}"
