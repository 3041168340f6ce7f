"""Benchmark the taxonomy tool: embedding throughput and the k-means sweep.

For each size (default 1,000 and 10,000 distinct synthetic features, MiniLM embeddings):
- the product's sweep (one shared k-means++ seeding, Lloyd per k, silhouette on a 2,000-point
  subsample) over the paper's 26 k values 50..300 step 10, with `kmeans` and `minibatch`;
- a naive baseline (sklearn KMeans(n_init=1) seeded anew for every k) on `--naive-ks`;
- inertia quality: the sweep's inertia divided by a full KMeans(n_init=--ref-n-init) at `--ref-ks`
  (1.00 = as good as the reference; below 1 = better).

Usage: python scripts/bench_taxonomy.py [--sizes 1000 10000] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # harness and tests/helpers from this checkout

from harness.taxonomy.cluster import k_grid, sweep  # noqa: E402
from harness.taxonomy.embed import get_embedder  # noqa: E402
from harness.taxonomy.threads import limit_threads  # noqa: E402
from tests.helpers.taxonomy_texts import feature_texts  # noqa: E402
from scripts.bench_record import BenchRecord  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--algorithms", nargs="+", default=["kmeans", "minibatch"])
    ap.add_argument("--naive-ks", type=int, nargs="*", default=[50, 150, 300])
    ap.add_argument("--ref-ks", type=int, nargs="*", default=[50, 150, 300])
    ap.add_argument("--ref-n-init", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="torch/BLAS/OpenMP threads (product default 1)")
    ap.add_argument("--json", help="The bench record (default: runs/bench/taxonomy.json).")
    ap.add_argument("--reuse-embeddings", metavar="NPY",
                    help="Load embeddings from this .npy if it exists (else embed and save there); "
                         "the embedding columns then show the run that made the file.")
    args = ap.parse_args()
    record = BenchRecord("taxonomy", __file__)
    with limit_threads(args.threads):
        res = run(args)
    record.add("sweep", *report(res, args))
    record.write(args.json, **res)


def run(args: argparse.Namespace) -> dict:
    """Embed, sweep, baseline and reference fits for every size; returns the measurements."""
    res: dict = {"cpus": os.cpu_count(), "threads": args.threads, "load_before": os.getloadavg(),
                 "sizes": {}}
    t = time.perf_counter()
    emb = get_embedder()
    res["embedder_load_s"] = time.perf_counter() - t
    texts, _ = feature_texts(max(args.sizes), seed=args.seed)
    saved = np.load(args.reuse_embeddings) if args.reuse_embeddings and \
        os.path.exists(args.reuse_embeddings) else None
    for n in sorted(args.sizes):
        row: dict = {}
        t = time.perf_counter()
        X = saved[:n] if saved is not None and len(saved) >= n else emb.encode(texts[:n])
        row["embed_s"] = time.perf_counter() - t
        row["embed_per_s"] = float("nan") if saved is not None else n / row["embed_s"]
        if args.reuse_embeddings and saved is None and n == max(args.sizes):
            np.save(args.reuse_embeddings, X)
        ks = k_grid(n)
        row["ks"] = [ks[0], ks[-1], len(ks)]
        for algo in args.algorithms:
            t = time.perf_counter()
            sw = sweep(X, ks, seed=args.seed, algorithm=algo)
            row[algo] = {"sweep_s": time.perf_counter() - t, "seeding_s": sw.seed_seconds,
                         "inertia": {p.k: p.inertia for p in sw.points}}
        naive = {}
        for k in (k for k in args.naive_ks if k in ks):
            t = time.perf_counter()
            m = KMeans(k, n_init=1, random_state=args.seed).fit(X)
            naive[k] = {"s": time.perf_counter() - t, "inertia": float(m.inertia_)}
        row["naive"] = naive
        ref = {}
        for k in (k for k in args.ref_ks if k in ks):
            t = time.perf_counter()
            ref[k] = {"inertia": float(KMeans(k, n_init=args.ref_n_init, random_state=args.seed)
                                       .fit(X).inertia_), "s": time.perf_counter() - t}
        row["reference"] = ref
        res["sizes"][n] = row
        print(f"done n={n}", flush=True)
    res["load_after"] = os.getloadavg()
    return res


def report(res: dict, args: argparse.Namespace) -> tuple[list[str], list[list[str]]]:
    """Print the table; return its header and cells (for the bench record)."""
    header = ["features", "embed/s", "k values", "algorithm", "sweep s", "seed s",
              *(f"I/Iref@{k}" for k in args.ref_ks)]
    cells: list[list[str]] = []
    print(f"\ncpus={res['cpus']} threads={res['threads']}  load avg before={res['load_before'][0]:.1f} "
          f"after={res['load_after'][0]:.1f}  embedder load {res['embedder_load_s']:.1f}s")
    print(f"{'features':>9} {'embed/s':>8} {'k values':>13} {'algorithm':>10} {'sweep s':>8} "
          f"{'seed s':>7} " + " ".join(f"{'I/Iref@' + str(k):>10}" for k in args.ref_ks))
    for n, row in res["sizes"].items():
        lo, hi, cnt = row["ks"]
        for algo in args.algorithms:
            r = row[algo]
            ratios = " ".join(f"{r['inertia'][k] / row['reference'][k]['inertia']:>10.4f}"
                              if k in row["reference"] else f"{'-':>10}" for k in args.ref_ks)
            emb = "reused" if row["embed_per_s"] != row["embed_per_s"] else f"{row['embed_per_s']:.0f}"
            print(f"{n:>9} {emb:>8} {f'{lo}..{hi} ({cnt})':>13} {algo:>10} "
                  f"{r['sweep_s']:>8.1f} {r['seeding_s']:>7.1f} {ratios}")
            cells.append([str(n), emb, f"{lo}..{hi} ({cnt})", algo, f"{r['sweep_s']:.1f}",
                          f"{r['seeding_s']:.1f}", *ratios.split()])
        nv = row["naive"]
        if nv:
            total = sum(v["s"] for v in nv.values())
            ratios = " ".join(f"{nv[k]['inertia'] / row['reference'][k]['inertia']:>10.4f}"
                              if k in nv and k in row["reference"] else f"{'-':>10}" for k in args.ref_ks)
            print(f"{n:>9} {'':>8} {f'{len(nv)} of {cnt} ks':>13} {'naive':>10} {total:>8.1f} "
                  f"{'':>7} {ratios}   (KMeans n_init=1 per k; x{cnt / len(nv):.1f} for all ks ~ "
                  f"{total * cnt / len(nv):.0f}s)")
            cells.append([str(n), "", f"{len(nv)} of {cnt} ks", "naive", f"{total:.1f}", "", *ratios.split()])
        ref_s = sum(v["s"] for v in row["reference"].values())
        if row["reference"]:
            print(f"{n:>9} {'':>8} {'':>13} {'reference':>10} {ref_s:>8.1f}  (KMeans n_init="
                  f"{args.ref_n_init} at {sorted(row['reference'])})")
            cells.append([str(n), "", "", "reference", f"{ref_s:.1f}", "", *["-"] * len(args.ref_ks)])
    return header, cells


if __name__ == "__main__":
    main()
