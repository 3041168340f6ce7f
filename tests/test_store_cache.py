"""Run log and call cache: content addressing, hits, integrity on failure."""

from __future__ import annotations

import numpy as np
import pytest

from harness.backends.base import GenerationRequest, SamplingParams
from harness.backends.cache import CachedBackend, call_key
from harness.core.errors import StoreError
from harness.core.sample import Message, Sample, SampleMeta
from harness.core.records import Record
from harness.runlog import RunLog, decode_value, encode_value


def test_value_encoding_roundtrip():
    a = np.random.default_rng(0).normal(size=(3, 7)).astype(np.float32)
    np.testing.assert_array_equal(decode_value(encode_value(a)), a)
    assert decode_value(encode_value({"x": [1, "é"]})) == {"x": [1, "é"]}


def test_key_depends_on_every_part():
    ident = {"backend": "hf", "weights_sha256": "abc", "dtype": "float32"}
    base = call_key(ident, "generate", {"prompt": [1, 2], "params": {"seed": 0}})
    assert base == call_key(dict(ident), "generate", {"prompt": [1, 2], "params": {"seed": 0}})
    assert base != call_key({**ident, "weights_sha256": "abd"}, "generate", {"prompt": [1, 2], "params": {"seed": 0}})
    assert base != call_key(ident, "generate", {"prompt": [1, 3], "params": {"seed": 0}})
    assert base != call_key(ident, "generate", {"prompt": [1, 2], "params": {"seed": 1}})
    assert base != call_key(ident, "loglikelihood", {"prompt": [1, 2], "params": {"seed": 0}})


def test_cached_backend_hits_and_misses(tmp_path, hf_tiny):
    store = RunLog(tmp_path / "run")
    cb = CachedBackend(hf_tiny, store)
    p1, p2 = (1, 9690, 198, 2683), (1, 9690, 198, 77)
    lp = cb.next_token_logprobs([p1, p2, p1])
    assert cb.misses["next_token_logprobs"] == 2 and cb.hits["next_token_logprobs"] == 1
    again = CachedBackend(hf_tiny, RunLog(tmp_path / "run")).next_token_logprobs([p2, p1])
    np.testing.assert_array_equal(again, lp[[1, 0]])
    reqs = [GenerationRequest(p1, SamplingParams(max_tokens=4))] * 2
    g = cb.generate(reqs)
    assert cb.misses["generate"] == 1 and g[0] == g[1]
    ll = cb.loglikelihood([(p1, (5, 6)), (p2, (5,))])
    assert ll == pytest.approx(hf_tiny.loglikelihood([(p1, (5, 6)), (p2, (5,))]))
    assert store.count_calls() == {"next_token_logprobs": 2, "generate": 1, "loglikelihood": 2}


class Boom(Exception):
    pass


def test_failed_batch_leaves_store_consistent(tmp_path, hf_tiny):
    store = RunLog(tmp_path / "run")
    with pytest.raises(Boom):
        with store.transaction():
            store.put_results("m", [Record("s", "m", "eval", "eval", 1.0, 1, 0)])
            raise Boom()
    assert store.results() == [] and store.done_ids("m") == set()


def _sample(i: int, text: str = "hi") -> Sample:
    return Sample(f"c:{i}", (Message("user", text),), "eval", SampleMeta("c"))


def test_changed_sample_refused(tmp_path):
    store = RunLog(tmp_path / "run")
    store.put_samples([_sample(1), _sample(2)])
    store.put_samples([_sample(1), _sample(3)])  # new samples are fine
    assert [s.id for s in store.samples()] == ["c:1", "c:2", "c:3"]
    with pytest.raises(StoreError, match="differs"):
        store.put_samples([_sample(1, "changed")])
    with pytest.raises(StoreError, match="not a run directory"):
        RunLog(tmp_path / "nothing", create=False)
