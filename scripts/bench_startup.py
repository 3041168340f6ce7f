"""Start-up benchmark (issue 47): wall time of `evalaware --help` and a few other start-ups, each a
fresh interpreter (subprocess), median of `--runs`; ``python -c "import torch"`` beside them as the
reference of what an eager backend import costs, ``python -c pass`` as the floor.

    python scripts/bench_startup.py --runs 7 --json docs/bench/startup.json
    git archive 414d77b | tar -x -C /tmp/before     # an older tree, timed beside this one:
    python scripts/bench_startup.py --also /tmp/before --also-label 414d77b

On a loaded machine run it niced with the load said in `--note` (the record keeps the load average).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_record import BenchRecord  # noqa: E402

CASES: tuple[tuple[str, list[str]], ...] = (
    ("python -c pass", ["-c", "pass"]),
    ("evalaware --help", ["-m", "evalaware", "--help"]),
    ("evalaware show --help", ["-m", "evalaware", "show", "--help"]),
    ("import evalaware.main", ["-c", "import evalaware.main"]),
    ("import torch (reference)", ["-c", "import torch"]),
)


def wall_times(args: list[str], runs: int, tree: Path = ROOT) -> list[float]:
    """Seconds of `runs` fresh interpreters running `args` in `tree` (each must exit 0)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *args], cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


def cli_module(tree: Path) -> str:
    """The command line's package in `tree`: evalaware/, or harness/cli/ in trees before it moved."""
    return "evalaware" if (tree / "evalaware" / "main.py").exists() else "harness.cli"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="runs per command (default 7)")
    ap.add_argument("--json", type=Path, default=None, help="the record (default: runs/bench/startup.json)")
    ap.add_argument("--note", default="", help="the machine's state, kept in the record")
    ap.add_argument("--also", type=Path, default=None,
                    help="another tree of this project (e.g. an older commit, git archive'd): its --help timed too")
    ap.add_argument("--also-label", default="other tree", help="how its rows are labelled (e.g. its commit)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    record = BenchRecord("startup", __file__, argv)
    wall_times(["-c", "import evalaware.main"], 1)  # warm the file cache once, not timed
    cases = [(label, case, ROOT) for label, case in CASES]
    if args.also:
        cli = cli_module(args.also)
        wall_times(["-c", f"import {cli}.main"], 1, args.also)
        cases[2:2] = [(f"evalaware --help at {args.also_label}", ["-m", cli, "--help"], args.also),
                      (f"import {cli}.main at {args.also_label}", ["-c", f"import {cli}.main"], args.also)]
    rows, raw = [], {}
    for label, case, tree in cases:
        times = wall_times(case, args.runs, tree)
        raw[label] = [round(t, 3) for t in times]
        rows.append([label, f"{statistics.median(times):.2f}", f"{min(times):.2f}", f"{max(times):.2f}", args.runs])
    print(record.table("start-up", ["command", "median s", "min s", "max s", "runs"], rows))
    record.write(args.json, runs=raw, note=args.note, nice=os.nice(0))


if __name__ == "__main__":
    main()
