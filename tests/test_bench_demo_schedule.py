"""scripts/bench_demo_schedule.py (issue 46): the demo's run under both schedules, alternated,
the engine start read off the run's own line, the ratio taken pair by pair. The `evalaware run`
processes are replaced by a recorder here (a real one starts vLLM: `make bench-demo-schedule`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.backends.registry import open_backend
from scripts import bench_demo_schedule as B


def test_engine_start_is_read_from_the_line_the_run_prints(capsys, monkeypatch):
    class Fake:
        identity = {"dtype": "float32"}
        device = "cpu"

    monkeypatch.setattr("harness.backends.registry.make_backend", lambda *a, **k: Fake())
    open_backend("vllm", "smollm2")
    line = capsys.readouterr().err
    assert B.engine_start("progress...\n" + line + "binary: 10/96") == pytest.approx(float(line.split()[-2]))
    assert B.engine_start("no such line") is None


def test_pairs_alternate_and_the_ratio_is_paired():
    assert [B.order(i) for i in range(3)] == [("stream", "batch"), ("batch", "stream"), ("stream", "batch")]
    runs = [{"schedule": s, "wall_s": w + 30, "engine_start_s": 30.0, "model_steps_s": w}
            for s, w in (("stream", 100.0), ("batch", 200.0), ("batch", 100.0), ("stream", 150.0))]
    header, rows = B.table(runs)
    assert header[-1] == "model steps s"
    assert rows[0] == ["stream", 2, "155.0 [130.0, 180.0]", "30.0 [30.0, 30.0]", "125.0 [100.0, 150.0]"]
    assert rows[1][0] == "batch" and rows[1][-1] == "150.0 [100.0, 200.0]"
    # pair by pair: 100/200 and 150/100, median 1.0 (the ratio of the medians would be 0.83)
    assert rows[2] == ["stream / batch (paired)", 2, "", "", "1.00 [0.50, 1.50]"]


def test_main_runs_the_demo_arguments_alternated_and_prints_a_markdown_table(tmp_path, monkeypatch, capsys):
    calls: list[tuple[list[str], str, Path]] = []

    def fake_run(args: Any, schedule: str, out: Path) -> dict[str, Any]:
        calls.append((list(args), schedule, out))
        steps = 100.0 if schedule == "stream" else 110.0
        return {"schedule": schedule, "wall_s": steps + 30, "engine_start_s": 30.0, "model_steps_s": steps}

    monkeypatch.setattr(B, "run_once", fake_run)
    monkeypatch.setattr(B, "_same", lambda a, b: {"call keys": True, "records": False,
                                                   "differing fields (max abs difference)": {".score": 4e-6}})
    demo = ["--model", "smollm2", "--dataset", "demo", "--constrain"]
    monkeypatch.setattr(sys, "argv", ["bench", "--repeats", "2", "--keep", str(tmp_path),
                                      "--json", str(tmp_path / "r.json"), "--", *demo])
    B.main()
    assert [(a, s, o.name) for a, s, o in calls] == [(demo, "stream", "stream-0"), (demo, "batch", "batch-0"),
                                                     (demo, "batch", "batch-1"), (demo, "stream", "stream-1")]
    out = capsys.readouterr().out
    assert "| stream / batch (paired) | 2 |  |  | 0.91 [0.91, 0.91] |" in out
    assert "pair 1: same call keys True, same records False; .score differs by at most 4e-06" in out
    rec = json.loads((tmp_path / "r.json").read_text())
    assert rec["figures"]["schedules"]["rows"][2][-1] == "0.91 [0.91, 0.91]" and rec["run_args"] == demo
    monkeypatch.setattr(sys, "argv", ["bench", "--", "--out", "x"])
    with pytest.raises(SystemExit):
        B.main()
