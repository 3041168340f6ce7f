"""Steering inside a vLLM engine: the backend's side (:class:`VLLMSteering`, mixed into
:class:`harness.backends.vllm.backend.VLLMBackend`) and the worker's side (:class:`SteeringWorkerExtension`).

The extension is passed as ``worker_extension_cls`` to ``LLM(...)`` (mixed with the scoring
read-back in :mod:`harness.backends.vllm.extension`); vLLM then mixes it into
every worker, and ``LLM.collective_rpc("evalaware_steer_set", args=(...,))`` runs its methods
there. The hooks are the ones HF uses (:func:`harness.backends.hooks.add_steering_hooks`) on the worker's
model: vLLM's Llama-style layers return ``(hidden_states, residual)`` whose sum is the residual
stream, so the vector is added to ``hidden_states``. The vector broadcasts over vLLM's flattened
token batch, so steered generation keeps continuous batching. Hooks run in eager mode only
(compiled graphs and CUDA graphs would not call them): the backend refuses to steer an engine that
is not eager.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch

from harness.backends.hooks import add_steering_hooks

from harness.core.errors import BackendError


class VLLMSteering:
    """The backend's side: check a steering, and install it in the workers lazily (only when it
    differs from the installed one; the prefix cache is reset then, its KV blocks having been
    computed under the old steering). Needs ``self.llm`` and ``self.model_name``."""

    llm: Any
    model_name: str

    def _init_steering(self) -> None:
        self._steer_wanted: Any = None  # Steering to apply on the next request, or None
        self._steer_current: str | None = None  # digest of the steering installed in the workers

    def check_steering(self, steering: Any) -> None:
        if steering.positions != "all":
            raise BackendError("vllm steers all positions only (its hook cannot tell prompt from "
                               "generated tokens in a mixed batch); use --positions all or "
                               "--backend hf")
        if not self.llm.llm_engine.model_config.enforce_eager:
            raise BackendError("vllm steering needs an eager engine (compiled and CUDA graphs skip "
                               "the hooks); start the backend with enforce_eager=True")
        n = int(self.llm.llm_engine.model_config.hf_config.num_hidden_layers)
        bad = sorted(l for l in steering.additions if not 1 <= l < n)
        if bad:
            raise BackendError(f"cannot steer at layer ids {bad}: {self.model_name} has steerable "
                               f"layers 1..{n - 1}")

    @contextmanager
    def steering(self, steering: Any) -> Iterator[None]:
        """Requests inside are steered (installed on the next request, see :meth:`_sync_steering`)."""
        self.check_steering(steering)
        before, self._steer_wanted = self._steer_wanted, steering
        try:
            yield
        finally:
            self._steer_wanted = before

    def _sync_steering(self) -> None:
        want = self._steer_wanted
        digest = want.digest() if want is not None and not want.is_null else None
        if digest == self._steer_current:
            return
        adds = {int(l): v.tolist() for l, v in want.arrays().items()} if digest else {}
        self._rpc("evalaware_steer_set", adds)
        self.driver.call(self.llm.reset_prefix_cache)
        self._steer_current = digest


class SteeringWorkerExtension:
    """Methods mixed into vLLM workers (names prefixed to avoid clashing with the worker's)."""

    def _evalaware_model(self) -> Any:
        runner: Any = getattr(self, "model_runner")
        return runner.get_model() if hasattr(runner, "get_model") else runner.model

    def evalaware_steer_set(self, additions: dict[int, list[float]]) -> int:
        """Replace any installed steering with `additions` ({layer id: vector}); returns the
        number of hooks installed. An empty dict removes steering."""
        for h in getattr(self, "_evalaware_handles", []):
            h.remove()
        self._evalaware_handles: list[Any] = []
        if additions:
            vecs = {int(l): torch.tensor(v, dtype=torch.float32) for l, v in additions.items()}
            self._evalaware_handles = add_steering_hooks(self._evalaware_model(), vecs)
        return len(self._evalaware_handles)
