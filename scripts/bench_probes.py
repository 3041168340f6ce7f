"""Benchmark activation capture and probe sweeps on SmolLM2 over the 96-sample demo dataset.

Measures
- capture throughput (samples/s, tokens/s, MB/s written) for prompt + answer sequences,
- bytes per sample in the shards vs the theoretical n_layers x hidden x 2 bytes per vector,
- per-layer probe sweep time over every layer with grouped CV (target < 60 s),
- the full table (three CV schemes, baselines) for reference,
- the layer-selection null (logreg at every layer under each of --n-perm permutations, grouped
  CV): the batched solver against sklearn fits one by one (timed on --sk-perms permutations and
  scaled to --n-perm), side by side in one run.

Usage: PYTHONPATH=. python scripts/bench_probes.py [--out DIR] [--answer-tokens 64]
       PYTHONPATH=. python scripts/bench_probes.py --null-only   # synthetic SmolLM2-shaped
                                                   # activations (96 x 31 layers x 576), no model
The run directory (answers cached) is reused when --out is given and already exists.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # harness and tests/helpers from this checkout
from scripts.bench_record import BenchRecord  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="run directory (default: a temporary one)")
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--answer-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--layers", default="all")
    ap.add_argument("--pooling", default="last_prompt,mean_prompt,mean_answer")
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16", "fp32"])
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's own choice; "
                    "1 was ~2.5x faster than 2 on a shared, oversubscribed 2-core machine)")
    ap.add_argument("--json", help="the bench record (default: runs/bench/probes.json)")
    ap.add_argument("--n-perm", type=int, default=200, help="permutations of the selection null")
    ap.add_argument("--sk-perms", type=int, default=2,
                    help="permutations timed with sklearn one fit at a time (then scaled)")
    ap.add_argument("--null-only", action="store_true",
                    help="only the null benchmark, on synthetic activations shaped like SmolLM2's")
    args = ap.parse_args()
    record = BenchRecord("probes", __file__)
    if args.null_only:
        rng = np.random.default_rng(0)
        groups = [f"c{i % 18}" for i in range(96)]
        y = np.array([int(g[1:]) % 2 for g in groups])
        X = rng.normal(size=(31, 96, 576)) + rng.normal(size=(31, 18, 576))[:, np.arange(96) % 18]
        null_rows = bench_null(X, y, groups, args.n_perm, args.sk_perms)
        print_table(null_rows)
        record.add("null", ["what", "figure"], null_rows)
        record.write(args.json, null=dict(null_rows))
        return

    import torch

    from harness.backends.hf.backend import HFBackend
    from harness.data.readers import load_dataset
    from harness.methods.base import MethodConfig
    from harness.runlog import RunLog
    from probes.activations.store import ActivationStore
    from probes.activations.capture import capture, parse_layers, parse_poolings
    from evalaware.probes import summary_lines
    from tests.helpers.probe_runs import answer_run
    from probes.train import EvalConfig, evaluate

    if args.threads:
        torch.set_num_threads(args.threads)
    run = Path(args.out or tempfile.mkdtemp(prefix="bench-probes-")) / "run"
    backend = HFBackend(args.model, batch_size=args.batch_size)
    samples = load_dataset("demo")
    t0 = time.perf_counter()
    answer_run(run, samples, backend, MethodConfig(answer_tokens=args.answer_tokens),
               batch_size=args.batch_size).close()
    t_answers = time.perf_counter() - t0

    eng = backend.hidden_layout()
    layers = parse_layers(args.layers, eng.n_layers)
    pools = parse_poolings(args.pooling)
    name = f"bench-{args.layers.replace(':', '')}-{args.dtype}-{int(time.time())}"
    store = RunLog(run, create=False)
    summ = capture(store, backend, layers, pools, dtype=args.dtype, name=name,
                   batch_size=args.batch_size, progress=False)
    st = summ.stats
    mb = st["shard_bytes"] / 1e6

    t0 = time.perf_counter()
    sweep = evaluate(store, name, EvalConfig(poolings=[pools[0]], schemes=("grouped",),
                                             baselines=(), n_boot=1000), progress=False)
    t_sweep = time.perf_counter() - t0
    t0 = time.perf_counter()
    full = evaluate(store, name, EvalConfig(n_boot=1000), progress=False)
    t_full = time.perf_counter() - t0

    n_vec_layers = len(layers)
    itemsize = 4 if args.dtype == "fp32" else 2
    per_vec = n_vec_layers * eng.hidden_size * itemsize
    rows = [
        ("model", f"{args.model} ({eng.n_layers} blocks, hidden {eng.hidden_size}), torch "
                  f"{torch.__version__}, {torch.get_num_threads()} threads"),
        ("samples / tokens captured", f"{summ.samples_captured} / {summ.tokens} "
                                      f"(answers: {args.answer_tokens} max new tokens, "
                                      f"generated in {t_answers:.0f} s, not counted)"),
        ("layers x poolings", f"{n_vec_layers} x {len(pools)} ({', '.join(pools)})"),
        ("capture time", f"{summ.seconds:.1f} s"),
        ("capture throughput", f"{summ.samples_per_s:.2f} samples/s, "
                               f"{summ.tokens / summ.seconds:.0f} tokens/s, "
                               f"{mb / summ.seconds:.3f} MB/s written"),
        ("shards", f"{st['shards']} files, {mb:.2f} MB"),
        ("bytes per sample", f"{st['bytes_per_sample']:.0f} (payload {st['theoretical_bytes_per_sample']:.0f} "
                             f"= vectors x {n_vec_layers} layers x {eng.hidden_size} x {itemsize} B)"),
        ("theoretical per pooling", f"{per_vec} B = {n_vec_layers} x {eng.hidden_size} x {itemsize}"),
        ("shard overhead", f"{100 * st['overhead']:.2f}% (target < 5%)"),
        ("SQLite index (approx.)", f"{st['index_bytes_approx'] / 1e3:.0f} kB "
                                   f"({st['index_bytes_approx'] / max(st['samples'], 1):.0f} B/sample)"),
        ("probe sweep, grouped CV", f"{t_sweep:.1f} s for {n_vec_layers} layers x 2 probes "
                                    f"({pools[0]}; 1000 bootstrap resamples each; target < 60 s)"),
        ("full eval", f"{t_full:.1f} s ({len(pools)} poolings x 3 CV schemes x 2 probes x "
                      f"{n_vec_layers} layers + tfidf/tfidf_char/length/human baselines + "
                      f"selection null, 200 permutations; of which null "
                      f"{full.timing['null_s']:.1f} s)"),
    ]
    w = max(len(k) for k, _ in rows)
    print()
    for k, v in rows:
        print(f"{k:<{w}}  {v}")
    for line in summary_lines(full):
        print(line)
    ids, Xd = ActivationStore(store, name).load(pools[0])
    by_id = {s.id: s for s in store.samples()}
    y = np.array([int(by_id[i].label == "eval") for i in ids])
    null_rows = bench_null(np.stack([Xd[l] for l in sorted(Xd)]), y,
                           [str(by_id[i].metadata.category) for i in ids], args.n_perm, args.sk_perms)
    print_table(null_rows)
    record.add("capture", ["what", "figure"], rows)
    record.add("null", ["what", "figure"], null_rows)
    record.write(args.json, null=dict(null_rows), capture_s=summ.seconds, samples_per_s=summ.samples_per_s,
                 tokens=summ.tokens, mb_per_s=mb / summ.seconds, stats=st, sweep_grouped_s=t_sweep,
                 full_eval_s=t_full, rows=full.rows)
    store.close()


def bench_null(X: np.ndarray, y: np.ndarray, groups: list[str], n_perm: int,
               sk_perms: int) -> list[tuple[str, str]]:
    """Time the max-over-layers null: batched solver vs sklearn fits one at a time."""
    from harness.stats.cv import make_splits, oof_scores
    from probes.models import make_probe
    from probes.selection import layer_aurocs, max_layer_null, permutations

    L, n, d = X.shape
    splits = make_splits("grouped", y, groups, groups)
    t0 = time.perf_counter()
    _, per_layer, bases = layer_aurocs(X, y, splits)
    t_obs = time.perf_counter() - t0
    t0 = time.perf_counter()
    sel = max_layer_null(bases, y, per_layer, list(range(L)), splits, n_perm, 0, groups)
    t_null = time.perf_counter() - t0
    Y = permutations(y, sk_perms, 0, groups, splits)
    t0 = time.perf_counter()
    for yp in Y:
        for layer in range(L):
            oof_scores(lambda: make_probe("logreg"), X[layer], yp, splits)
    t_sk = (time.perf_counter() - t0) / sk_perms * n_perm
    return [("null: shape", f"{n} samples x {L} layers x {d} dims, {len(splits)} grouped folds, "
                            f"{n_perm} permutations"),
            ("null: observed sweep (batched, all layers)", f"{t_obs:.1f} s"),
            ("null: batched solver", f"{t_null:.1f} s  (p = {sel['p_value']:.3f}, selected layer "
                                     f"{sel['selected_layer']})"),
            ("null: sklearn one fit at a time", f"{t_sk:.0f} s (timed on {sk_perms} permutations, "
                                                f"scaled to {n_perm})"),
            ("null: ratio sklearn / batched", f"{t_sk / t_null:.1f}x")]


def print_table(rows: list[tuple[str, str]]) -> None:
    w = max(len(k) for k, _ in rows)
    print()
    for k, v in rows:
        print(f"{k:<{w}}  {v}")


if __name__ == "__main__":
    main()
