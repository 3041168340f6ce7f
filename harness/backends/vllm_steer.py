"""vLLM worker extension that adds steering vectors inside the engine's model.

Passed as ``worker_extension_cls`` to ``LLM(...)``; vLLM then mixes this class into every worker,
and ``LLM.collective_rpc("evalaware_steer_set", args=(...,))`` runs its methods there. The hooks
are the ones HF uses (:func:`probes.hooks.add_steering_hooks`) on the worker's model: vLLM's
Llama-style layers return ``(hidden_states, residual)`` whose sum is the residual stream, so the
vector is added to ``hidden_states``. The vector broadcasts over vLLM's flattened token batch, so
steered generation keeps continuous batching. Hooks run in eager mode only (compiled graphs and
CUDA graphs would not call them): the backend refuses to steer an engine that is not eager.
"""

from __future__ import annotations

from typing import Any

QUALNAME = "harness.backends.vllm_steer.SteeringWorkerExtension"


class SteeringWorkerExtension:
    """Methods mixed into vLLM workers (names prefixed to avoid clashing with the worker's)."""

    def _evalaware_model(self) -> Any:
        runner: Any = getattr(self, "model_runner")
        return runner.get_model() if hasattr(runner, "get_model") else runner.model

    def evalaware_steer_set(self, additions: dict[int, list[float]]) -> int:
        """Replace any installed steering with `additions` ({layer id: vector}); returns the
        number of hooks installed. An empty dict removes steering."""
        import torch

        from probes.hooks import add_steering_hooks

        for h in getattr(self, "_evalaware_handles", []):
            h.remove()
        self._evalaware_handles: list[Any] = []
        if additions:
            vecs = {int(l): torch.tensor(v, dtype=torch.float32) for l, v in additions.items()}
            self._evalaware_handles = add_steering_hooks(self._evalaware_model(), vecs)
        return len(self._evalaware_handles)
