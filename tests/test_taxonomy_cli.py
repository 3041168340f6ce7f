"""`evalaware taxonomy`: --run reuse makes zero model calls; bad input gives one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import cli
from harness.store import Store
from harness.taxonomy.synthetic import motivation_records

REPO = Path(__file__).resolve().parents[1]
FAST = ["--restarts", "1", "--categories", "5", "--no-progress"]


@pytest.fixture()
def run_dir(tmp_path):
    recs, samples = motivation_records(40, seed=2)
    store = Store(tmp_path / "run")
    store.put_samples(samples)
    store.put_results("motivation", recs)
    store.close()
    return tmp_path / "run"


def invoke(*args):
    res = CliRunner().invoke(cli, ["taxonomy", *map(str, args)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def calls(run):
    s = Store(run, create=False)
    try:
        return sum(s.count_calls().values())
    finally:
        s.close()


def load(out):
    t = json.loads((Path(out) / "taxonomy.json").read_text())
    return t, t.pop("manifest")


def test_run_reuse_without_model_makes_no_calls(run_dir, tmp_path):
    before = calls(run_dir)
    out = invoke("--run", run_dir, "--out", tmp_path / "tax", *FAST)
    assert "model calls made: 0" in out and calls(run_dir) == before
    t, man = load(tmp_path / "tax")
    assert t["namer"] is None and man["calls"] == {"naming": {"model_calls": {}, "cache_hits": {}}}
    assert man["run_dir"] == str(run_dir) and "packages" in man
    for f in ("taxonomy.md", "taxonomy.html", "sweep.png", "sizes.png"):
        assert (tmp_path / "tax" / f).stat().st_size > 0


def test_run_reuse_with_naming_model_is_cached(run_dir, tmp_path, tiny_model_dir):
    args = ["--run", run_dir, "--model", tiny_model_dir, "--backend", "hf", "--name-tokens", "4", *FAST]
    before = calls(run_dir)
    invoke(*args, "--out", tmp_path / "a")
    t1, m1 = load(tmp_path / "a")
    made = m1["calls"]["naming"]["model_calls"]["generate"]
    assert made == len(t1["clusters"]) + len([c for c in t1["categories"] if c["id"] != "T00"])
    assert calls(run_dir) == before + made
    # second time: every answer and every embedding from the run's store
    out = invoke(*args, "--out", tmp_path / "b")
    t2, m2 = load(tmp_path / "b")
    assert "model calls made: 0" in out and calls(run_dir) == before + made
    assert m2["calls"]["naming"] == {"model_calls": {}, "cache_hits": {"generate": made}}
    assert m2["texts_embedded"] == 0 and t2 == t1


def run_main(*args, cwd=REPO):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "harness.cli", "taxonomy", *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_bad_input_one_line_errors(tmp_path, run_dir):
    r = run_main("--run", tmp_path / "missing", "--out", tmp_path / "o")
    assert r.returncode == 2 and "not a run directory" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    empty = tmp_path / "empty"
    Store(empty).close()
    r = run_main("--run", empty, "--out", tmp_path / "o")
    assert r.returncode == 2 and "no 'motivation' records" in r.stderr
    r = run_main("--run", run_dir, "--out", tmp_path / "o", "--k", "100000", "--no-progress")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: --k 100000")
    r = run_main("--run", run_dir, "--out", tmp_path / "o", "--embedder", tmp_path / "nope")
    assert r.returncode == 2 and "not a known embedding asset" in r.stderr
    assert not (tmp_path / "o" / "taxonomy.json").exists()
    for args, msg in [(["--out", tmp_path / "o"], "exactly one of --dataset"),
                      (["--run", run_dir, "--dataset", "demo", "--out", tmp_path / "o"], "exactly one"),
                      (["--dataset", "demo", "--out", tmp_path / "o"], "--dataset needs --model")]:
        r = run_main(*args)
        assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_dataset_mode_runs_motivation_then_reuse_is_free(tmp_path, tiny_model_dir):
    from harness.methods import available

    if "motivation" not in available():
        pytest.skip("the motivation method (issue 4) is not on this branch yet")
    args = ["--model", tiny_model_dir, "--backend", "hf", "--name-tokens", "4", *FAST]
    res = CliRunner().invoke(cli, ["taxonomy", "--dataset", "demo", "--limit", "4",
                                   "--out", str(tmp_path / "t"), *map(str, args)])
    run = tmp_path / "t" / "run"
    store = Store(run, create=False)
    assert len(store.results("motivation")) == 4
    store.close()
    made = calls(run)
    assert made > 0
    res2 = CliRunner().invoke(cli, ["taxonomy", "--run", str(run), "--out", str(tmp_path / "t2"),
                                    *map(str, args)])
    assert calls(run) == made  # nothing new, whether or not the tiny model's judge found evidence
    assert (res.exit_code == 0) == (res2.exit_code == 0)
