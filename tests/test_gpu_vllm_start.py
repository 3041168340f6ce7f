"""scripts/gpu_vllm_start.py (issue 49's check for a lent GPU) stays importable and answers
--help here; its report fails the run on any failed check, and a check that raises fails alone."""

from __future__ import annotations


import pytest

from tests.helpers.scripts import load_script

def _load():
    return load_script("gpu_vllm_start")


def test_help_and_report(capsys):
    mod = _load()
    with pytest.raises(SystemExit) as done:
        mod.main(["--help"])
    assert done.value.code == 0 and "--expect-runner" in capsys.readouterr().out
    report = mod.Report()
    report.check("a", True, "fine")
    report.guarded("b", lambda: 1 / 0)
    report.guarded("c", lambda: report.line("INFO", "c", "ran"))
    assert [(r["status"], r["check"]) for r in report.rows] == [("PASS", "a"), ("FAIL", "b"), ("INFO", "c")]
    assert report.failed
    assert "FAIL b: ZeroDivisionError" in capsys.readouterr().out
