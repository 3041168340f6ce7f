"""`export --format csv` (issue 40): one row per sample x method with the main fields."""

from __future__ import annotations

import csv
import io
import json

from click.testing import CliRunner

from evalaware.main import cli
from harness.data.readers import load_dataset
from harness.runlog import RunLog
from harness.runlog.export import CSV_FIELDS


def _run(tmp_path):
    samples = load_dataset("demo")[:4]
    recs = []
    for i, s in enumerate(samples):
        recs.append({"sample_id": s.id, "method": "binary", "label": s.label, "prediction": "eval",
                     "score": 0.25 * i, "n_valid": 5, "n_invalid": 0,
                     "category": "=HYPERLINK(\"http://x\")" if i == 0 else s.metadata.category,
                     "agentic": False, "eval_type": "", "n_turns": 1,
                     "details": {"votes": [{"k": k} for k in range(5)]}})
    recs.append({**recs[1], "method": "logprob", "prediction": None, "score": None, "n_valid": 0,
                 "details": {"error": "no_signal"}})
    with RunLog(tmp_path / "run") as st:
        st.put_samples(samples)
        st.put_results("binary", recs[:4])
        st.put_results("logprob", recs[4:])
    return tmp_path / "run"


def test_csv_export_has_one_row_per_sample_and_method(tmp_path):
    run = _run(tmp_path)
    res = CliRunner().invoke(cli, ["export", str(run), "--out", str(tmp_path / "r.csv")])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(open(tmp_path / "r.csv", encoding="utf-8")))
    assert tuple(rows[0]) == CSV_FIELDS and len(rows) == 5
    by = {(r["method"], r["sample_id"]): r for r in rows}
    lp = next(r for r in rows if r["method"] == "logprob")
    assert lp["error"] == "no_signal" and lp["score"] == "" and lp["prediction"] == ""
    assert {r["n_votes"] for r in rows if r["method"] == "binary"} == {"5"}
    assert sorted(float(r["score"]) for r in rows if r["method"] == "binary") == [0.0, 0.25, 0.5, 0.75]
    # a cell a spreadsheet would run as a formula is shown as text
    assert any(r["category"].startswith("'=HYPERLINK") for r in by.values())


def test_csv_to_standard_output_and_jsonl_default(tmp_path):
    run = _run(tmp_path)
    res = CliRunner().invoke(cli, ["export", str(run), "--out", "-", "--format", "csv"])
    assert res.exit_code == 0, res.output
    assert list(csv.DictReader(io.StringIO(res.stdout)))[0]["method"] in ("binary", "logprob")
    assert "5 records -> standard output" in res.stderr
    res = CliRunner().invoke(cli, ["export", str(run)])
    assert res.exit_code == 0 and (run / "results.jsonl").exists()
    assert len([json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]) == 5
