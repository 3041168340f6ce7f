"""scripts/bench_record.py (issue 38, item 5): every benchmark writes one JSON record -- commit,
machine, load, command, date and each table it printed -- and every benchmark script writes one."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path

import pytest

from scripts.bench_record import BenchRecord, markdown

ROOT = Path(__file__).resolve().parents[1]
BENCHES = sorted(p for p in (ROOT / "scripts").glob("bench_*.py") if p.name != "bench_record.py") + [
    ROOT / "scripts" / "gpu_step_times.py"]


def test_the_record_holds_where_when_and_what_was_printed(tmp_path):
    rec = BenchRecord("x", "/anywhere/scripts/bench_x.py", ["--limit", "4"])
    printed = rec.table("speed", ["row", "s", "tok/s"], [["stream", "120.9", 96.0], ["batch", "129.0", 90.0]])
    rec.add("stages", ["stage", "seconds"], [("build", "1.5")])
    path = rec.write(tmp_path / "deep" / "x.json", rows=[{"row": "stream", "seconds": 120.93}])
    got = json.loads(path.read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert got["commit"]["sha"] == head and isinstance(got["commit"]["dirty"], bool)
    assert got["machine"]["cpus"] == os.cpu_count() and "gpu" in got["machine"] and "cpu_model" in got["machine"]
    assert len(got["load"]["start"]) == 3 and len(got["load"]["end"]) == 3
    assert got["command"] == ["python", "scripts/bench_x.py", "--limit", "4"]
    assert got["name"] == "x" and got["date"][:4].isdigit() and got["rows"][0]["seconds"] == 120.93
    # the figures are the printed table, cell for cell
    lines = printed.splitlines()
    assert lines[:2] == ["| row | s | tok/s |", "|---|---|---|"]
    assert [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]] == got["figures"]["speed"]["rows"]
    assert got["figures"]["speed"]["rows"] == [["stream", "120.9", "96.0"], ["batch", "129.0", "90.0"]]
    assert got["figures"]["stages"] == {"header": ["stage", "seconds"], "rows": [["build", "1.5"]]}


def test_a_table_recorded_twice_is_refused():
    rec = BenchRecord("x", "scripts/bench_x.py", [])
    rec.add("t", ["a"], [["1"]])
    with pytest.raises(ValueError, match="bench record 'x': table 't' recorded twice"):
        rec.add("t", ["a"], [["2"]])
    assert markdown(["a", "b"], [[1, 2]], align="---:") == "| a | b |\n|---:|---:|\n| 1 | 2 |"


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: p.name)
def test_every_benchmark_script_writes_a_record(path):
    """Each bench script makes a BenchRecord, records a table and writes it."""
    tree = ast.parse(path.read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    names = {n.func.id for n in calls if isinstance(n.func, ast.Name)}
    attrs = {n.func.attr for n in calls if isinstance(n.func, ast.Attribute)}
    assert "BenchRecord" in names, path.name
    assert "write" in attrs and attrs & {"add", "table"}, path.name


CLOCKS = {"monotonic", "perf_counter", "time", "process_time", "monotonic_ns", "perf_counter_ns", "time_ns"}


def wall_clock_asserts(source: str) -> list[int]:
    """Lines of `source` whose assert reads a clock (``time.monotonic()`` and the like), directly or
    through a name assigned from one: a timing belongs in a benchmark's record, not in a test."""
    tree = ast.parse(source)

    def reads_clock(node: ast.AST, timed: set[str]) -> bool:
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in CLOCKS
                   and isinstance(n.func.value, ast.Name) and n.func.value.id == "time"
                   or isinstance(n, ast.Name) and n.id in timed for n in ast.walk(node))

    timed: set[str] = set()
    for n in ast.walk(tree):  # names holding a clock reading or a difference of them
        if isinstance(n, ast.Assign) and reads_clock(n.value, set()):
            timed |= {t.id for t in n.targets if isinstance(t, ast.Name)}
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assert) and reads_clock(n.test, timed)]


def test_no_test_asserts_a_wall_clock_limit():
    found = {p.name: wall_clock_asserts(p.read_text()) for p in sorted((ROOT / "tests").glob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_wall_clock_check_finds_the_asserts_it_replaced():
    assert wall_clock_asserts("import time\nt = time.monotonic()\nf()\nassert time.monotonic() - t < 5\n") == [4]
    assert wall_clock_asserts("t0 = time.perf_counter()\nelapsed = time.perf_counter() - t0\n"
                              "assert elapsed < 1\n") == [3]
    # a deadline that only stops a wait is no assert on time
    assert wall_clock_asserts("deadline = time.time() + 300\nwhile time.time() < deadline:\n    pass\n"
                              "assert n == 4\n") == []
