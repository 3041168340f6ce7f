"""Install benchmark (issue 47): the Makefile's install step with pip alone vs pip for torch then uv
for the rest, each into a fresh virtual environment, and whether both resolve the same versions.

    python scripts/bench_install.py --json docs/bench/install.json --note "alone, pip cache warm"

Each side: `python -m venv`, then
- pip: `pip install torch==2.13.0`, `pip install -e ".[cpu,assets,test,inspect]"` (pip byte-compiles
  all it installs, one file after another);
- uv, as the Makefile does: `pip install --no-compile --no-deps torch==2.13.0` (pip: it follows this
  machine's pip configuration, where the CPU wheel lies), `pip install uv`, `uv pip install
  --compile-bytecode -e ...` (torch's dependencies come with it), `compileall -j 0` over torch.
Both sides end byte-compiled. The record keeps both `pip freeze` lists.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_record import BenchRecord  # noqa: E402

EXTRAS = ".[cpu,assets,test,inspect]"
UV_VERSION = "0.13.9"
STEPS = ("venv", "torch (pip)", "installer", "the rest", "compile torch")


def timed(cmd: list[str]) -> float:
    """Seconds `cmd` ran in the project root (it must exit 0)."""
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def freeze(python: Path) -> list[str]:
    """`pip freeze` of one environment, without the project itself and the installer uv."""
    out = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    return sorted(x for x in out.splitlines() if x and not x.startswith(("-e ", "evalaware", "uv==", "uv @")))


def install(venv: Path, installer: str) -> tuple[dict[str, float], list[str]]:
    """Install the project into a fresh `venv` with `installer` ("pip" or "uv"): (seconds per step, freeze)."""
    py = venv / "bin" / "python"
    pip = [str(py), "-m", "pip", "-q", "--disable-pip-version-check", "install"]
    steps = {"venv": timed([sys.executable, "-m", "venv", str(venv)])}
    if installer == "pip":
        steps["torch (pip)"] = timed([*pip, "torch==2.13.0"])
        steps["installer"] = 0.0
        steps["the rest"] = timed([*pip, "-e", EXTRAS])
        steps["compile torch"] = 0.0
    else:
        steps["torch (pip)"] = timed([*pip, "--no-compile", "--no-deps", "torch==2.13.0"])
        steps["installer"] = timed([*pip, f"uv=={UV_VERSION}"])
        steps["the rest"] = timed([str(venv / "bin" / "uv"), "pip", "install", "-q", "--compile-bytecode",
                                   "--python", str(py), "-e", EXTRAS])
        torch_dir = subprocess.run([str(py), "-c", "import importlib.util as u, os; "
                                    "print(os.path.dirname(u.find_spec('torch').origin))"],
                                   capture_output=True, text=True, check=True).stdout.strip()
        t0 = time.perf_counter()  # compileall exits 1 over torch's few files that do not compile
        subprocess.run([str(py), "-m", "compileall", "-q", "-j", "0", torch_dir], stdout=subprocess.DEVNULL)
        steps["compile torch"] = time.perf_counter() - t0
    return steps, freeze(py)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=None, help="the record (default: runs/bench/install.json)")
    ap.add_argument("--note", default="", help="the machine's state, kept in the record")
    args = ap.parse_args(argv)
    record = BenchRecord("install", __file__, argv)
    rows, frozen = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
        for installer in ("pip", "uv"):
            steps, frozen[installer] = install(Path(tmp) / installer, installer)
            rows.append([installer, *(f"{steps[k]:.1f}" for k in STEPS),
                         f"{sum(steps.values()):.1f}", len(frozen[installer])])
    same = frozen["pip"] == frozen["uv"]
    for row in rows:
        row.append("yes" if same else "no")
    print(record.table("install", ["installer", *(f"{k} s" for k in STEPS), "total s", "packages",
                                   "same versions"], rows))
    if not same:
        only = sorted(set(frozen["pip"]) ^ set(frozen["uv"]))
        print("differ:", ", ".join(only))
    record.write(args.json, freeze=frozen, same_versions=same, note=args.note, nice=os.nice(0))


if __name__ == "__main__":
    main()
