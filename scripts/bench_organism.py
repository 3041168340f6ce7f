"""Benchmark model organisms: the time of `organism build`, `organism measure` and `validate`.

Each stage runs once as the CLI would (a complete organism directory is rebuilt only with
--fresh); the table gives wall seconds per stage. Default: a tiny random-init model (seconds);
--base smollm2 with the `make organism` recipe for the real one (tens of minutes on 2 cores).

Usage: PYTHONPATH=. python scripts/bench_organism.py [--base tiny|smollm2] [--out DIR] [--limit N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not an installed copy
from scripts.bench_record import BenchRecord  # noqa: E402

TINY = ["--train", "full", "--layers", "2", "--steps", "60", "--lr", "5e-3", "--batch-size", "8",
        "--verbalizations", "1"]


def make_organism_recipe(makefile: Path = Path(__file__).resolve().parents[1] / "Makefile") -> list[str]:
    """The recipe options of `make organism`'s `organism build` (the Makefile is their one source;
    --base and --cue are the bench's own)."""
    text = makefile.read_text().replace("\\\n", " ")
    words = next(ln for ln in text.splitlines()
                 if "evalaware organism build" in ln and not ln.lstrip().startswith("#")).split()
    opts = words[words.index("build") + 1: words.index("--out")]
    pairs = dict(zip(opts[::2], opts[1::2]))
    pairs.pop("--base"), pairs.pop("--cue")
    pairs["--strength"] = "1.0"  # $(ORGANISM_STRENGTH)'s default
    return [w for kv in pairs.items() for w in kv]


def _cli(args: list[str]) -> float:
    from click.testing import CliRunner

    from evalaware.main import cli

    t0 = time.perf_counter()
    res = CliRunner().invoke(cli, args)
    if res.exit_code != 0:
        raise SystemExit(f"{' '.join(args)}: {res.output} {res.exception!r}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="tiny", help="tiny (a random-init model) or a model name/path")
    ap.add_argument("--out", help="Working directory (default: a temporary one)")
    ap.add_argument("--limit", type=int, default=12, help="Pairs for measure and validate")
    ap.add_argument("--methods", default="logprob,logprob_question")
    ap.add_argument("--fresh", action="store_true", help="Delete an existing organism first")
    ap.add_argument("--json", help="The bench record (default: runs/bench/organism.json)")
    a = ap.parse_args()
    record = BenchRecord("organism", __file__)
    work = Path(a.out or tempfile.mkdtemp(prefix="bench-organism-"))
    work.mkdir(parents=True, exist_ok=True)
    if a.base == "tiny":
        from harness.models import assets
        from tests.helpers.tiny_model import build_tiny_model

        base = str(work / "tiny-base")
        if not Path(base).exists():
            build_tiny_model(base, assets.prepare("smollm2"), hidden=128)
        recipe = TINY
    else:
        base, recipe = a.base, make_organism_recipe()
    org = work / "organism"
    if a.fresh:
        shutil.rmtree(org, ignore_errors=True)
    rows = [("organism build", _cli(["organism", "build", "--base", base, "--cue", "graded", *recipe,
                                     "--no-progress", "--states-dir", "none", "--out", str(org)]))]
    rows.append(("organism build (again: cached)", _cli(["organism", "build", "--base", base, "--cue", "graded",
                                                         *recipe, "--no-progress", "--out", str(org)])))
    rows.append((f"organism measure ({a.limit} pairs)", _cli(["organism", "measure", "--organism", str(org),
                                                              "--limit", str(a.limit), "--bootstrap", "200",
                                                              "--no-progress"])))
    rows.append((f"validate {a.methods} ({a.limit} pairs, hf)",
                 _cli(["organism", "validate", "--base", base, "--organism", str(org), "--methods", a.methods,
                       "--limit", str(a.limit), "--bootstrap", "200", "--no-progress",
                       "--out", str(work / "validate")])))
    print(f"\nbase: {a.base}; work dir: {work}")
    print(f"{'stage':<48} {'seconds':>8}")
    for name, s in rows:
        print(f"{name:<48} {s:>8.1f}")
    record.add("stages", ["stage", "seconds"], [[name, f"{s:.1f}"] for name, s in rows])
    record.write(a.json, base=a.base, limit=a.limit, methods=a.methods, recipe=recipe, seconds_by_stage=dict(rows))


if __name__ == "__main__":
    main()
