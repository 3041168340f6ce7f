"""Time `organism build` on a CUDA machine, at real model shapes (no weights travel).

For each shape, a randomly initialised Llama-architecture model of that shape is saved with
SmolLM2's tokenizer (its ids fit every shape's vocabulary) and `evalaware organism build` runs
on it with `make organism`'s recipe (top 8 blocks, full fine-tuning, the same pairs, forms and
KL-only prompts) for a few steps of each --kind given. From two step counts per shape the
per-step time and the fixed cost (loading, the teacher copy, the sham's own answers) are
separated, so a 1200-step build's time is ``fixed + 1200 * per_step``. Random weights give the
same arithmetic as trained ones; only the sham's generation length differs (random models
rarely stop early: its figure is an upper bound at --max-new-tokens of the build).

    python scripts/gpu_organism_build.py --tokenizer DIR --out build_times.json   # a lent GPU

DIR holds SmolLM2's tokenizer files (tokenizer.json, tokenizer_config.json, chat_template.jinja).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                         tie_word_embeddings=True, rope_theta=100000.0),
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                        tie_word_embeddings=True, rope_theta=500000.0),
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      tie_word_embeddings=False, rope_theta=500000.0),
}
RECIPE = ("--cue graded --train full --layers 8 --lr 2.5e-4 --kl-first 30 --kl-weight 3 "
          "--kl-prompts 2718 --kl-pool 2 --forms 600 --no-progress").split()


def save_model(shape: str, tok: Path, out: Path) -> float:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    t0 = time.perf_counter()
    cfg = LlamaConfig(**SHAPES[shape], max_position_embeddings=8192, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    for f in tok.iterdir():
        shutil.copy(f, out / f.name)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return time.perf_counter() - t0


def build(model: Path, kind: str, steps: int, out: Path, timeout: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "evalaware", "organism", "build", "--base", str(model),
           "--kind", kind, "--steps", str(steps), *RECIPE, "--out", str(out),
           "--states-dir", "none"]  # every build a first build: no states read from the one before
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"kind": kind, "steps": steps, "error": f"timeout {timeout:.0f}s"}
    wall = time.perf_counter() - t0
    if p.returncode:
        return {"kind": kind, "steps": steps, "error": p.stderr[-1500:]}
    card = json.loads((out / "organism.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    return {"kind": kind, "steps": steps, "wall_s": round(wall, 1), "train_s": card["train_seconds"],
            "self_targets_s": card.get("self_targets_seconds"), "n_examples": card["n_examples"]}


def fit(runs: list[dict[str, Any]], lo: int, hi: int) -> dict[str, Any]:
    """Per-step time and fixed cost from the two builds' training times. The targets the build
    generates itself (the null sham's samples, the base's own answers) are timed apart
    (``self_targets_s``, inside ``train_s``) and taken out before the fit: their time varies from
    build to build and would otherwise land in the per-step figure."""
    if not all("train_s" in r for r in runs):
        return {}
    steps = [r["train_s"] - (r["self_targets_s"] or 0.0) for r in runs]
    per = (steps[1] - steps[0]) / (hi - lo)
    fixed = steps[0] - lo * per
    gen = [r["self_targets_s"] for r in runs if r["self_targets_s"] is not None]
    targets = sum(gen) / len(gen) if gen else 0.0
    return {"per_step_s": round(per, 3), "fixed_s": round(fixed, 1), "self_targets_s": round(targets, 1),
            "est_1200_steps_min": round((fixed + targets + 1200 * per) / 60, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", required=True, type=Path)
    ap.add_argument("--shapes", default="smollm2-135m,llama3.2-1b,llama3-8b")
    ap.add_argument("--kinds", default="aware")
    ap.add_argument("--steps", default="20,60", help="two step counts: per-step time from their difference")
    ap.add_argument("--work", type=Path, default=Path("/tmp/organism-gpu"))
    ap.add_argument("--budget", type=float, default=420, help="seconds; a shape that would not fit is skipped")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    import torch

    t_start = time.perf_counter()
    lo, hi = (int(s) for s in a.steps.split(","))
    res: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "torch": torch.__version__,
                           "python": platform.python_version(), "recipe": " ".join(RECIPE), "rows": []}
    for shape in a.shapes.split(","):
        left = a.budget - (time.perf_counter() - t_start)
        if left < 60:
            res["rows"].append({"shape": shape, "skipped": f"{left:.0f}s of budget left"})
            continue
        model = a.work / shape
        save_s = save_model(shape, a.tokenizer, model)
        for kind in a.kinds.split(","):
            runs = [build(model, kind, n, a.work / f"{shape}-{kind}-{n}",
                          a.budget - (time.perf_counter() - t_start)) for n in (lo, hi)]
            row: dict[str, Any] = {"shape": shape, "kind": kind, "save_s": round(save_s, 1), "runs": runs}
            row |= fit(runs, lo, hi)
            res["rows"].append(row)
            print(json.dumps(row), flush=True)
        shutil.rmtree(model, ignore_errors=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
