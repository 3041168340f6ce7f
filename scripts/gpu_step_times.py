"""Measure the step times that calibrate the scheduling simulation (scripts/bench_scheduling.py).

On a CUDA machine, builds a randomly initialised model of a real shape (default: Llama-3-8B's,
bfloat16; no weights travel) and times, with HF transformers:
- one decode step for batch sizes B and per-sequence contexts L (a KV cache of B x L random keys
  and values, then one new token per sequence): the decode step-time model
  ``t = a + b*B + c*(B*L)`` is fitted to these by least squares;
- a prefill forward over N prompt tokens: ``p`` seconds per prefill token.
Writes JSON (every point, the fit, the device, versions) to ``--out``.

HF eager decoding has no CUDA graphs and no paged attention, so its step at small batch is
launch-bound and slower than vLLM's; the fit is an upper bound on vLLM's step time (the figure that
matters to the simulation is how the step grows with batch and context, not its floor).

    python scripts/gpu_step_times.py --out step_times.json     # ~3 min on one H100
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.bench_record import BenchRecord  # noqa: E402

SHAPES = {
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                      max_position_embeddings=32768, rope_theta=500000.0),
}


def _model(shape: str, dtype: torch.dtype) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**SHAPES[shape], torch_dtype=dtype)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(before)
    return model.eval()


def _cache(model: Any, batch: int, ctx: int, dtype: torch.dtype, kind: str) -> Any:
    """A cache holding `ctx` random positions per sequence. "dynamic": HF's default (each step
    concatenates, copying the whole cache); "static": preallocated to ctx + 1 (no copy: closer to
    a paged engine, which reads each cached token once per step)."""
    from transformers import DynamicCache, StaticCache

    cfg = model.config
    head = cfg.hidden_size // cfg.num_attention_heads
    cache = DynamicCache() if kind == "dynamic" else StaticCache(config=cfg, max_cache_len=ctx + 1)
    pos = torch.arange(ctx, device="cuda")
    for layer in range(cfg.num_hidden_layers):
        k = torch.randn(batch, cfg.num_key_value_heads, ctx, head, device="cuda", dtype=dtype) * 0.1
        cache.update(k, k.clone(), layer, {"cache_position": pos})
    return cache


def _time(fn: Any, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


@torch.inference_mode()
def decode_point(model: Any, batch: int, ctx: int, dtype: torch.dtype, reps: int, kind: str) -> float:
    cache = _cache(model, batch, ctx, dtype, kind)
    ids = torch.randint(0, model.config.vocab_size, (batch, 1), device="cuda")
    pos = torch.full((batch, 1), ctx, device="cuda")
    at = torch.tensor([ctx], device="cuda")

    def step() -> None:
        if kind == "dynamic":
            cache.crop(-1) if cache.get_seq_length() > ctx else None  # the same context every time
        model(input_ids=ids, position_ids=pos, cache_position=at, past_key_values=cache, use_cache=True)

    t = _time(step, reps)
    del cache
    torch.cuda.empty_cache()
    return t


@torch.inference_mode()
def prefill_point(model: Any, batch: int, length: int, reps: int) -> float:
    ids = torch.randint(0, model.config.vocab_size, (batch, length), device="cuda")
    return _time(lambda: model(input_ids=ids, use_cache=False, logits_to_keep=1), reps)


def decode_table(points: list[dict[str, Any]], cache: str) -> tuple[list[str], list[list[str]]]:
    """One cache kind's decode steps: a row per context, a column per batch size (ms; '-' not run)."""
    pts = [p for p in points if p["cache"] == cache]
    batches = sorted({p["batch"] for p in pts})
    at = {(p["context"], p["batch"]): p["seconds"] for p in pts}
    return (["decode step", *(f"B={b}" for b in batches)],
            [[f"context {c}", *(f"{at[c, b] * 1e3:.1f} ms" if (c, b) in at else "-" for b in batches)]
             for c in sorted({p["context"] for p in pts})])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="llama3-8b", choices=sorted(SHAPES))
    ap.add_argument("--batches", default="1,8,32,64,128,256")
    ap.add_argument("--contexts", default="512,2048,8192")
    ap.add_argument("--max-kv-tokens", type=int, default=300_000, help="skip B x L above this")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default="step_times.json")
    ap.add_argument("--caches", default="static,dynamic", help="cache kinds to time (see _cache)")
    a = ap.parse_args()
    record = BenchRecord("step_times", __file__)
    dtype = torch.bfloat16
    t0 = time.time()
    model = _model(a.shape, dtype)
    built = time.time() - t0
    decode_point(model, 8, 512, dtype, a.reps, "dynamic")  # warm-up (kernels, allocator)
    points = []
    for kind in a.caches.split(","):
        for ctx in [int(x) for x in a.contexts.split(",")]:
            for b in [int(x) for x in a.batches.split(",")]:
                if b * ctx > a.max_kv_tokens:
                    continue
                try:
                    t = decode_point(model, b, ctx, dtype, a.reps, kind)
                except Exception as e:  # report and go on: one cache kind may not work here
                    print(f"decode {kind} B={b} L={ctx}: failed: {type(e).__name__}: {e}", flush=True)
                    break
                points.append({"cache": kind, "batch": b, "context": ctx, "seconds": t})
                print(f"decode {kind:7s} B={b:4d} L={ctx:5d}: {t * 1e3:7.2f} ms", flush=True)
    prefill = []
    for b, n in ((1, 512), (1, 2048), (4, 2048), (1, 8192)):
        t = prefill_point(model, b, n, a.reps)
        prefill.append({"batch": b, "length": n, "seconds": t})
        print(f"prefill {b}x{n}: {t * 1e3:7.2f} ms ({t / (b * n) * 1e6:.2f} us/token)", flush=True)
    big = [p for p in prefill if p["batch"] * p["length"] >= 2048]
    per_tok = float(np.median([p["seconds"] / (p["batch"] * p["length"]) for p in big]))
    fits = {}
    for kind in sorted({p["cache"] for p in points}):
        pts = [p for p in points if p["cache"] == kind]
        x = np.array([[1.0, p["batch"], p["batch"] * p["context"]] for p in pts])
        y = np.array([p["seconds"] for p in pts])
        (a0, b0, c0), *_ = np.linalg.lstsq(x, y, rcond=None)
        fits[kind] = {"a": float(a0), "b": float(b0), "c": float(c0), "p": per_tok,
                      "max_rel_error": float(np.max(np.abs(x @ [a0, b0, c0] - y) / y))}
        print(f"fit {kind}: t = {a0 * 1e3:.2f} ms + {b0 * 1e6:.2f} us*B + {c0 * 1e9:.3f} ns*(B*L); "
              f"prefill {per_tok * 1e6:.2f} us/token; max rel. error {fits[kind]['max_rel_error']:.0%}")
    fit = fits
    for kind in sorted({p["cache"] for p in points}):
        print(f"\ndecode, {kind} cache\n" + record.table(f"decode {kind}", *decode_table(points, kind),
                                                          align="---:"))
    out = {"shape": a.shape, "dtype": "bfloat16", "engine": "transformers (sdpa, eager, DynamicCache)",
           "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "transformers": __import__("transformers").__version__, "python": platform.python_version(),
           "model_build_s": built, "decode": points, "prefill": prefill, "fit": fit}
    record.write(a.out, **out)


if __name__ == "__main__":
    main()
