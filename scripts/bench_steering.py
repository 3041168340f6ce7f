"""Benchmark steering: steered vs unsteered throughput (HF, vLLM) and the cost of `steer build`.

For each backend, the same rendered demo prompts run unsteered and steered (a fixed-seed random
direction at --layers, alpha x the last-token residual norm), alternating, --repeats times each;
the table shows generated tokens/s (greedy, --max-tokens) and prompts/s of first-token logprobs,
best of the repeats, and steered/unsteered ratios measured side by side in this one process
(target on vLLM: steered >= 0.9x). On vLLM every switch re-installs the hooks and resets the
prefix cache, so both columns run without prefix-cache hits.

`steer build` cost: from a run with captured activations (--run) and from contrastive pairs
(the demo set's first --pairs eval/deploy prompts, captured on the fly with HF).

Usage: PYTHONPATH=. python scripts/bench_steering.py [--backends hf,vllm] [--run RUN]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not an installed copy
from scripts.bench_record import BenchRecord  # noqa: E402
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _steering(hf, prompt, layers, alpha):
    """A fixed-seed random direction per layer, alpha x the prompt's last-token residual norm."""
    import numpy as np

    from harness.backends.steered import Steering

    hs = hf.hidden_states([prompt], layers)[0]
    rng = np.random.default_rng(0)
    adds = {}
    for j, l in enumerate(layers):
        u = rng.standard_normal(hs.shape[-1])
        adds[l] = (alpha * float(np.linalg.norm(hs[j, -1])) * u / np.linalg.norm(u)).astype(np.float32)
    return Steering(adds, label={"bench": True, "alpha": alpha})


def _time(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def bench_backend(backend, prompts, steering, max_tokens, repeats):
    from harness.backends.base import GenerationRequest, SamplingParams
    from harness.backends.steered import SteeredBackend

    reqs = [GenerationRequest(tuple(p), SamplingParams(max_tokens=max_tokens)) for p in prompts]
    steered = SteeredBackend(backend, steering)
    best: dict[str, float] = {}
    for _ in range(repeats):
        for name, b in (("unsteered", backend), ("steered", steered)):
            t, gens = _time(lambda: b.generate(reqs))
            toks = sum(len(g.token_ids) for g in gens)
            best[f"gen_{name}"] = max(best.get(f"gen_{name}", 0.0), toks / t)
            t, _ = _time(lambda: b.next_token_logprobs(prompts))
            best[f"lp_{name}"] = max(best.get(f"lp_{name}", 0.0), len(prompts) / t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--backends", default="hf,vllm")
    ap.add_argument("--n", type=int, default=32, help="prompts (demo samples)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--layers", default="8,12,16")
    ap.add_argument("--alpha", type=float, default=0.25)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--run", help="run directory with captured activations (for build cost)")
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--json", help="the bench record (default: runs/bench/steering.json)")
    args = ap.parse_args()
    record = BenchRecord("steering", __file__)

    import torch

    from harness.backends.hf.backend import HFBackend
    from harness.data.readers import load_dataset
    from harness.core.sample import sample_view
    from harness.core.render import Renderer

    if args.threads:
        torch.set_num_threads(args.threads)
    layers = [int(x) for x in args.layers.split(",")]
    samples = load_dataset("demo")[: args.n]
    hf = HFBackend(args.model, batch_size=8)
    r = Renderer(hf.tokenizer)
    prompts = [r.render(sample_view(s, "first_turn")) for s in samples]
    steering = _steering(hf, prompts[0], layers, args.alpha)
    rows: dict[str, dict[str, float]] = {}
    if "hf" in args.backends:
        rows["hf"] = bench_backend(hf, prompts, steering, args.max_tokens, args.repeats)
    build: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="bench-steer-"))
    pairs_file = tmp / "pairs.jsonl"
    ev = [s for s in load_dataset("demo") if s.label == "eval"][: args.pairs]
    de = [s for s in load_dataset("demo") if s.label == "deploy"][: args.pairs]
    pairs_file.write_text("".join(json.dumps({"eval": a.messages[0].content,
                                              "deploy": b.messages[0].content}) + "\n"
                                  for a, b in zip(ev, de)))
    from probes.steering.build import build_from_pairs, build_from_run

    build["pairs_s"], _ = _time(lambda: build_from_pairs(pairs_file, hf, tmp / "pv"))
    if args.run:
        from harness.runlog import RunLog
        from probes.activations.store import ActivationStore
        from probes.steering.build import steerable_layers

        st = RunLog(args.run, create=False)
        ids = steerable_layers(ActivationStore(st, "default").settings or {})
        st.close()
        build["run_s"], vec = _time(lambda: build_from_run(args.run, tmp / "rv", layers=ids))
        build["run_layers"] = len(vec.layers)
        build["run_samples"] = len(vec.meta["train_ids"]) + len(vec.meta["heldout_ids"])
    hf.close()
    if "vllm" in args.backends:
        from harness.backends.vllm.backend import VLLMBackend

        t0 = time.perf_counter()
        vl = VLLMBackend(args.model, dtype="float32", max_model_len=2048)
        start = time.perf_counter() - t0
        rows["vllm"] = bench_backend(vl, prompts, steering, args.max_tokens, args.repeats)
        rows["vllm"]["startup_s"] = start
        vl.close()

    print(f"\nsteered vs unsteered, {args.model}, {len(prompts)} demo prompts, layers {layers}, "
          f"alpha {args.alpha}, best of {args.repeats}")
    print(f"{'backend':<8} {'gen tok/s unsteered':>20} {'steered':>9} {'ratio':>6} "
          f"{'logprob prompts/s unsteered':>28} {'steered':>9} {'ratio':>6}")
    for name, b in rows.items():
        print(f"{name:<8} {b['gen_unsteered']:>20.1f} {b['gen_steered']:>9.1f} "
              f"{b['gen_steered'] / b['gen_unsteered']:>6.2f} {b['lp_unsteered']:>28.2f} "
              f"{b['lp_steered']:>9.2f} {b['lp_steered'] / b['lp_unsteered']:>6.2f}")
    print(f"steer build from {args.pairs} pairs (HF capture, all layers): {build['pairs_s']:.1f} s")
    if "run_s" in build:
        print(f"steer build from a run's activations ({build['run_samples']} samples, "
              f"{build['run_layers']} layers): {build['run_s']:.2f} s")
    record.add("steering", ["backend", "gen tok/s unsteered", "steered", "ratio", "logprob prompts/s unsteered",
                            "steered", "ratio"],
               [[name, f"{b['gen_unsteered']:.1f}", f"{b['gen_steered']:.1f}",
                 f"{b['gen_steered'] / b['gen_unsteered']:.2f}", f"{b['lp_unsteered']:.2f}",
                 f"{b['lp_steered']:.2f}", f"{b['lp_steered'] / b['lp_unsteered']:.2f}"] for name, b in rows.items()])
    record.add("build", ["what", "s"], [[f"from {args.pairs} pairs", f"{build['pairs_s']:.1f}"]]
               + ([["from a run's activations", f"{build['run_s']:.2f}"]] if "run_s" in build else []))
    record.write(args.json, rows=rows, build=build)


if __name__ == "__main__":
    main()
