"""The demo's model steps under both run-loop schedules (issue 46): `evalaware run` with the
demo's own arguments, `--schedule stream` and `--schedule batch`, each into a fresh run
directory (no call cache to hit), alternated A B, B A, ... so a drift of the machine's speed
falls on both, and the ratio taken pair by pair.

Each run is a whole `evalaware run` process. Its engine start is read from the line the run
prints ("model: ... ready in X s"); the model steps are the process's wall time minus that start
(they include the Python start-up and writing results.jsonl and summary.json, a few seconds, the
same for both schedules). The two schedules make the same calls; each pair's run directories are
compared (call keys, records; the largest difference of a number that differs).

Measure it alone on the machine (nothing else running):

    make bench-demo-schedule                 # the demo's arguments from the Makefile, 2 pairs
    python scripts/bench_demo_schedule.py --repeats 2 --json runs/bench/demo_schedule.json -- \\
        --model smollm2 --backend vllm --dataset demo --methods binary,logprob,logprob_question \\
        --constrain --answer-tokens 128 --probe-tokens 96
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scripts.bench_record import BenchRecord  # noqa: E402
from scripts.bench_stream_vllm import _same  # noqa: E402  (call keys and records of two run directories)

SCHEDULES = ("stream", "batch")
_READY = re.compile(r"model: .*? ready in ([0-9.]+) s")


def engine_start(output: str) -> float | None:
    """The model's start-up time from a run's output, or None where the line is missing."""
    m = _READY.search(output)
    return float(m.group(1)) if m else None


def order(repeat: int) -> tuple[str, ...]:
    """The schedules of pair `repeat`: stream first on even pairs, batch first on odd ones."""
    return SCHEDULES if repeat % 2 == 0 else SCHEDULES[::-1]


def run_once(run_args: Sequence[str], schedule: str, out: Path) -> dict[str, Any]:
    """One `evalaware run` process: its wall seconds, engine start and model steps."""
    cmd = [sys.executable, "-m", "evalaware.main", "run", *run_args, "--schedule", schedule,
           "--out", str(out)]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        raise SystemExit(f"bench_demo_schedule: `{' '.join(cmd)}` exited {p.returncode}:\n" + "\n".join(tail))
    start = engine_start(p.stderr + p.stdout)
    if start is None:
        raise SystemExit(f"bench_demo_schedule: no 'ready in' line in the output of `{' '.join(cmd)}`")
    return {"schedule": schedule, "wall_s": wall, "engine_start_s": start, "model_steps_s": wall - start}


def _spread(values: Sequence[float]) -> str:
    """Median [min, max] of `values`, one decimal."""
    return f"{statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


def table(runs: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """One row per schedule (median [min, max] over its runs), then the paired ratio of the model
    steps, stream / batch (runs are in pairs: the i-th stream and i-th batch run)."""
    by = {s: [r for r in runs if r["schedule"] == s] for s in SCHEDULES}
    rows: list[list[Any]] = [[s, len(rs), _spread([r["wall_s"] for r in rs]),
                              _spread([r["engine_start_s"] for r in rs]),
                              _spread([r["model_steps_s"] for r in rs])] for s, rs in by.items()]
    ratios = [a["model_steps_s"] / b["model_steps_s"] for a, b in zip(by["stream"], by["batch"])]
    rows.append(["stream / batch (paired)", len(ratios), "", "",
                 f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}]"])
    return ["schedule", "runs", "wall s", "engine start s", "model steps s"], rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2, help="pairs of runs (stream + batch each)")
    ap.add_argument("--keep", help="keep the run directories under this directory (default: a temporary one)")
    ap.add_argument("--json", help="write every figure here (default: runs/bench/demo_schedule.json)")
    ap.add_argument("run_args", nargs=argparse.REMAINDER,
                    help="after --: the `evalaware run` arguments (the demo's), without --out/--schedule")
    a = ap.parse_args()
    run_args = a.run_args[1:] if a.run_args[:1] == ["--"] else a.run_args
    if not run_args or any(x in ("--out", "--schedule") for x in run_args):
        ap.error("give the run's arguments after --, without --out and --schedule")
    if a.repeats < 1:
        ap.error("--repeats: at least 1")
    record = BenchRecord("demo_schedule", __file__)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(a.keep or tmp)
        runs, same = [], []
        for i in range(a.repeats):
            for s in order(i):
                runs.append(r := run_once(run_args, s, base / f"{s}-{i}"))
                print(f"pair {i + 1}/{a.repeats}: {s}: wall {r['wall_s']:.1f} s, engine start "
                      f"{r['engine_start_s']:.1f} s, model steps {r['model_steps_s']:.1f} s", file=sys.stderr)
            same.append(_same(base / f"stream-{i}", base / f"batch-{i}"))
    print(f"`evalaware run {' '.join(run_args)}`, --schedule stream vs batch, {a.repeats} pair(s), "
          f"alternated; load average {record.load_start[0]:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end\n")
    print(record.table("schedules", *table(runs), align="---:"))
    for i, d in enumerate(same):
        diff = d["differing fields (max abs difference)"]
        print(f"\npair {i + 1}: same call keys {d['call keys']}, same records {d['records']}"
              + "".join(f"; {k} differs by at most {v:.3g}" for k, v in sorted(diff.items())))
    record.write(a.json, run_args=run_args, repeats=a.repeats, runs=runs, same=same)


if __name__ == "__main__":
    main()
