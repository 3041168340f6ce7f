"""Organism recipe search: build and measure a list of recipes, one after the other, and print a
table of what each planted and what it changed elsewhere (verbalization on held-out-phrasing cue
prompts and without the cue, first-token KL to the base on no-cue prompts).

Each recipe is `organism build` + `organism measure` as the CLI runs them, in a subprocess (its
memory is freed before the next), into ``OUT/NAME`` and ``OUT/NAME.measure.json``; a recipe with
its measurement present is skipped, so an interrupted search resumes (and `--budget` stops
before a recipe that would not fit). Made for a GPU (a SmolLM2 build is ~2 min on an H100, ~30
min on 2 CPU cores); the recipe chosen is then rebuilt where it will be used (`make organism`).

A recipe chosen on the same pairs it was measured on is favoured by the choice: check it on the
pairs it was not chosen on (`organism measure` without ``--limit``, docs/organisms.md).

Usage: python scripts/organism_search.py --out runs/organism-search [--recipes FILE] [--limit 24]
       [--dtype float32] [--budget SECONDS]
  FILE: one recipe per line, ``NAME: build options`` (the options after ``--base/--cue`` below);
  default: the 9 recipes of docs/organisms.md's search.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

COMMON = "--base smollm2 --cue graded --train full --layers 8 --lr 3e-4 --kl-first 30"
RECIPES = [
    ("g0", "--steps 1000 --kl-weight 2 --kl-prompts 432"),
    ("g1", "--steps 1000 --kl-weight 2 --kl-prompts 1000 --kl-pool 2"),
    ("g2", "--steps 1200 --kl-weight 2 --kl-prompts 2000 --kl-pool 2"),
    ("g3", "--steps 1200 --kl-weight 4 --kl-prompts 1000 --kl-pool 2"),
    ("g4", "--steps 1200 --kl-weight 3 --kl-prompts 2718 --kl-pool 2"),
    ("g8", "--steps 1200 --kl-weight 3 --kl-prompts 2718 --kl-pool 2 --kl-first 100"),
    ("g9", "--steps 1200 --kl-weight 4 --kl-prompts 2718 --kl-pool 2 --lr 4e-4"),
    ("g7", "--steps 1200 --kl-weight 6 --kl-prompts 2718 --kl-pool 2 --lr 5e-4"),
    ("g10", "--steps 1200 --kl-weight 3 --kl-prompts 2718 --kl-pool 2 --lr 2.5e-4"),
]


def read_recipes(path: str) -> list[tuple[str, str]]:
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            if ":" not in line:
                raise SystemExit(f"{path}:{i}: expected 'NAME: build options', got {line!r}")
            name, opts = line.split(":", 1)
            out.append((name.strip(), opts.strip()))
    return out


def run(args: list[str]) -> None:
    cli = [sys.executable, "-m", "evalaware", *args]
    root = str(Path(__file__).resolve().parents[1])  # this checkout, not an installed copy
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run(cli, capture_output=True, text=True, env=env)
    if res.returncode:
        raise RuntimeError(f"{' '.join(args[:2])} failed:\n{res.stderr[-3000:]}")


def row(name: str, opts: str, out: Path) -> dict:
    m = json.loads((out / f"{name}.measure.json").read_text())
    card = json.loads((out / name / "organism.json").read_text())
    return {"name": name, "options": opts, "train_s": card.get("train_seconds"), "device": card.get("device"),
            "verbalization_cue": m["organism_verbalization_cue"],
            "verbalization_no_cue": m["organism_verbalization_no_cue"],
            "first_token_kl": m["first_token_kl_no_cue"], "weights": card.get("weights_sha256", "")[:12]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--recipes", help="File of recipes, 'NAME: build options' per line")
    ap.add_argument("--common", default=COMMON, help="Options every recipe starts with")
    ap.add_argument("--limit", type=int, default=24, help="Pairs measured (organism measure --limit)")
    ap.add_argument("--dtype", default="float32", help="organism measure --dtype")
    ap.add_argument("--budget", type=float, default=None, help="Stop before a recipe that would not fit (s)")
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    recipes = read_recipes(a.recipes) if a.recipes else RECIPES
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start, per, rows = time.time(), 0.0, []
    for name, opts in recipes:
        if not (out / f"{name}.measure.json").exists():
            if a.budget and per and time.time() - t_start + per > a.budget:
                print(f"budget: stopping before {name}", flush=True)
                break
            t0 = time.time()
            try:
                run(["organism", "build", *a.common.split(), *opts.split(), "--no-progress", "--out", str(out / name)])
                run(["organism", "measure", "--organism", str(out / name), "--limit", str(a.limit),
                     "--max-tokens", "32", "--dtype", a.dtype, "--no-progress",
                     "--out", str(out / f"{name}.measure.json")])
            except RuntimeError as e:
                print(f"{name}: {e}", flush=True)
                continue
            per = max(per, time.time() - t0)
        r = row(name, opts, out)
        rows.append(r)
        print(f"{name} done: verbalization {r['verbalization_cue']['k']}/{r['verbalization_cue']['n']}, "
              f"KL {r['first_token_kl']['mean']:.4f}", flush=True)
    (out / "search.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(f"\ncommon options: {a.common}; {a.limit} pairs; 95% intervals over categories\n")
    print("| recipe | options | train s | cue prompts: planted sentence | no-cue | first-token KL | median |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        vc, vn, kl = r["verbalization_cue"], r["verbalization_no_cue"], r["first_token_kl"]
        print(f"| {r['name']} | `{r['options']}` | {r['train_s']} ({r['device']}) | {vc['k']}/{vc['n']} "
              f"[{vc['ci'][0]:.2f}, {vc['ci'][1]:.2f}] | {vn['k']}/{vn['n']} | {kl['mean']:.3f} "
              f"[{kl['ci'][0]:.3f}, {kl['ci'][1]:.3f}] | {kl['median']:.3f} |")


if __name__ == "__main__":
    main()
