"""Resume: a run killed with SIGKILL mid-way and re-run recomputes nothing that finished and
ends with exactly the records of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.data.readers import load_dataset, write_jsonl


def _cmd(model: Path, data: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "evalaware.main", "run", "--model", str(model), "--backend", "hf",
            "--dataset", str(data), "--methods", "binary", "--out", str(out), "--batch-size", "2",
            "--hf-batch-size", "1", "--answer-tokens", "24", "--probe-tokens", "12", "--no-progress"]


def _state(out: Path) -> tuple[set[str], dict[str, str]]:
    db = sqlite3.connect(out / "store.sqlite")
    keys = {r[0] for r in db.execute("SELECT key FROM calls")}
    recs = {r[0]: r[1] for r in db.execute("SELECT sample_id, record FROM results")}
    logged = {r[0] for r in db.execute("SELECT DISTINCT sample_id FROM model_calls")}
    db.close()
    # records and the roles of their model calls commit together: never one without the other
    assert logged == set(recs)
    return keys, recs


def _count_results(out: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{out / 'store.sqlite'}?mode=ro", uri=True, timeout=1)
        n = db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        db.close()
        return n
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_kill9_then_resume(tmp_path, tiny_model_dir):
    data = tmp_path / "d.jsonl"
    samples = load_dataset("demo")
    write_jsonl(samples[:6] + samples[-6:], data)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}

    killed_run = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(tiny_model_dir, data, killed_run), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and _count_results(killed_run) < 4:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    keys1, recs1 = _state(killed_run)
    assert 4 <= len(recs1) < 12, "the run was not interrupted mid-way"
    assert len(keys1) > 0

    subprocess.run(_cmd(tiny_model_dir, data, killed_run), env=env, check=True, capture_output=True)
    keys2, recs2 = _state(killed_run)
    manifest = json.loads((killed_run / "manifest.json").read_text())
    # Zero repeated calls: the resumed run computed exactly the calls that were not cached.
    assert sum(manifest["calls"]["model_calls"].values()) == len(keys2 - keys1)
    assert {k: recs2[k] for k in recs1} == recs1  # finished records untouched

    clean_run = tmp_path / "clean"
    subprocess.run(_cmd(tiny_model_dir, data, clean_run), env=env, check=True, capture_output=True)
    keys3, recs3 = _state(clean_run)
    assert recs3 == recs2 and keys3 == keys2

    # A third run is pure cache: no model calls at all.
    subprocess.run(_cmd(tiny_model_dir, data, clean_run), env=env, check=True, capture_output=True)
    m3 = json.loads((clean_run / "manifest.json").read_text())
    assert m3["calls"]["model_calls"] == {}


def test_other_model_refused(tmp_path, tiny_model_dir, hf_tiny):
    from harness.core.errors import StoreError
    from harness.run.loop import run_methods
    from harness.runlog import RunLog

    samples = load_dataset("demo")[:1]
    RunLog(tmp_path / "r").set_meta("model_identity", {"backend": "hf", "weights_sha256": "other"})
    with pytest.raises(StoreError, match="different model"):
        run_methods(samples, ["binary"], hf_tiny, tmp_path / "r", progress=False)
