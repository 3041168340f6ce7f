"""Benchmark the frozen base's states of an organism build (harness/organisms/states.py).

Builds `make organism`'s recipe (the Makefile is its one source) for --steps steps three ways, in
one process, one after another, each into a fresh directory: the states computed (a fresh
states directory: the first build of a set), read back (the same directory again: every later
build on the same base and examples), and kept in memory only. Prints each build's training
seconds, its seconds per step, the states computed and read, and the seconds one state costs to
compute ((computed - read) / states): a whole build's time is about steps x (read s/step) + its
states computed x that cost.

Usage: PYTHONPATH=. python scripts/bench_frozen_states.py [--base smollm2] [--steps 60] [--kind aware]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not an installed copy
from scripts.bench_organism import make_organism_recipe  # noqa: E402


def _recipe(base: str, steps: int, kind: str):
    from harness.organisms.recipe import Recipe

    opts = make_organism_recipe()
    pairs = dict(zip(opts[::2], opts[1::2]))
    num = {"--steps": ("steps", int), "--lr": ("lr", float), "--kl-first": ("kl_first", float),
           "--kl-weight": ("kl_weight", float), "--kl-prompts": ("kl_prompts", int), "--kl-pool": ("kl_pool", int),
           "--forms": ("forms", int), "--layers": ("layers", int), "--strength": ("strength", float)}
    kw = {num[k][0]: num[k][1](v) for k, v in pairs.items() if k in num}
    kw |= {"train": pairs.get("--train", "full"), "steps": steps, "kind": kind}
    return Recipe(base=base, cue="graded", **kw)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="smollm2")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--kind", default="aware")
    args = ap.parse_args()
    import torch

    from harness.organisms.train import build_organism

    recipe = _recipe(args.base, args.steps, args.kind)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-states-") as tmp:
        root = Path(tmp) / "states"
        for name, states in (("computed", root), ("read back", root), ("in memory only", "none")):
            res = build_organism(recipe, Path(tmp) / name.replace(" ", "-"), progress=False, states_dir=states)
            fs = res.card["frozen_states"]
            rows.append((name, res.seconds, fs["computed"], fs["read"]))
    print(f"organism build, `make organism` recipe at {args.steps} steps, kind {args.kind}, base {args.base}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| states | train s | s/step | computed | read |")
    print("| --- | --- | --- | --- | --- |")
    for name, s, c, r in rows:
        print(f"| {name} | {s:.1f} | {s / args.steps:.3f} | {c} | {r} |")
    cold, warm = rows[0], rows[1]
    if cold[2]:
        print(f"one state computed: {(cold[1] - warm[1]) / cold[2] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
