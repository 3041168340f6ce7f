"""k-means sweep over k, the rule that picks k, and the second-level grouping.

Algorithm (chosen for speed on a 2-core CPU, see scripts/bench_taxonomy.py):
- One greedy k-means++ seeding of ``max(ks)`` centres is computed once; the sweep point for k
  starts Lloyd's algorithm (sklearn ``KMeans``, ``n_init=1``) from its first k centres. A prefix
  of a k-means++ seeding is itself a k-means++ seeding, so each k gets a standard init while the
  seeding cost, which dominates at k = 300, is paid once instead of 26 times.
  ``algorithm="minibatch"`` uses sklearn's MiniBatchKMeans from the same seeding instead.
- Identical feature texts are one point with a weight (their count).
- Inertia: weighted sum of squared distances to the closest centre (unit vectors, so
  ``||a-b||^2 = 2 - 2 cos``). Silhouette: on a seeded subsample of at most `silhouette_sample`
  points, over one precomputed distance matrix shared by every k.

k ranges (the paper: 50..300 step 10) are clipped to ``k <= n_points // 2`` (two distinct features
per cluster on average; larger k mostly makes singletons); when nothing is left, the sweep covers
2..max(2, n_points // 2) in at most 26 steps.

Final fit: the chosen k is refitted with `restarts` independent k-means++ seedings (seeds
seed+1..seed+restarts, sklearn ``KMeans``); the lowest inertia among them and the sweep's own fit
is kept. On synthetic groups this lifted the adjusted Rand index from 0.66-0.93 (one seeding,
depending on the seed, seeds 0-7) to 0.90-0.93 with 5 restarts.

k rules: ``knee`` (default) - the point of the inertia curve farthest below the chord joining its
ends, both axes scaled to [0, 1] (the "kneedle" criterion); ``silhouette`` - the best silhouette.

Second level: Ward agglomerative clustering of the (re-normalised) centroids into
``min(n_groups, k)`` groups; deterministic.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from tqdm.auto import tqdm

from harness.taxonomy import TaxonomyError

PAPER_K_RANGE = (50, 300, 10)
MIN_POINTS = 3  # fewer distinct features do not cluster (the build states them plainly instead)
K_RULES = ("knee", "silhouette")
ALGORITHMS = ("kmeans", "minibatch")


@dataclass(frozen=True)
class SweepPoint:
    k: int
    inertia: float
    silhouette: float | None
    n_iter: int
    seconds: float

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


@dataclass
class Sweep:
    points: list[SweepPoint]
    labels: dict[int, np.ndarray]
    centers: dict[int, np.ndarray]
    seed_seconds: float


def k_grid(n_points: int, k_min: int = PAPER_K_RANGE[0], k_max: int = PAPER_K_RANGE[1],
           k_step: int = PAPER_K_RANGE[2]) -> list[int]:
    """The k values to try, clipped to the data size (see the module docstring)."""
    if k_min < 2 or k_step < 1 or k_max < k_min:
        raise TaxonomyError(f"bad k range {k_min}..{k_max} step {k_step}: need 2 <= k_min <= "
                            f"k_max and step >= 1")
    if n_points < MIN_POINTS:
        raise TaxonomyError(f"{n_points} distinct feature(s): at least {MIN_POINTS} are needed to "
                            f"cluster")
    hi = max(2, n_points // 2)
    ks = [k for k in range(k_min, k_max + 1, k_step) if k <= hi]
    if ks:
        return ks
    return sorted({int(round(x)) for x in np.linspace(2, hi, min(26, hi - 1))})


def seed_centers(X: np.ndarray, k: int, weights: np.ndarray | None, seed: int) -> np.ndarray:
    """Greedy k-means++ seeding (sklearn's), k centres; its prefixes seed smaller k."""
    from sklearn.cluster import kmeans_plusplus  # sklearn: ~1.4 s, not at CLI start-up

    centers, _ = kmeans_plusplus(X, k, sample_weight=weights, random_state=seed)
    return centers


def _fit(X: np.ndarray, init: np.ndarray, weights: np.ndarray | None, seed: int,
         algorithm: str) -> tuple[np.ndarray, np.ndarray, float, int]:
    from sklearn.cluster import KMeans, MiniBatchKMeans  # sklearn: ~1.4 s, not at CLI start-up

    k = len(init)
    if algorithm == "kmeans":
        m = KMeans(k, init=init, n_init=1, random_state=seed).fit(X, sample_weight=weights)
    elif algorithm == "minibatch":
        m = MiniBatchKMeans(k, init=init, n_init=1, random_state=seed, batch_size=2048,
                            max_no_improvement=20).fit(X, sample_weight=weights)
    else:
        raise TaxonomyError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    labels = m.predict(X)  # minibatch's labels_ lag behind its final centres
    return labels, m.cluster_centers_.astype(np.float32), inertia(X, m.cluster_centers_, labels,
                                                                  weights), int(m.n_iter_)


def inertia(X: np.ndarray, centers: np.ndarray, labels: np.ndarray,
            weights: np.ndarray | None = None) -> float:
    """Weighted sum of squared distances of points to their assigned centres."""
    d = ((X - centers[labels]) ** 2).sum(axis=1)
    return float(d @ (weights if weights is not None else np.ones(len(X))))


class _Silhouette:
    """Silhouette on a fixed subsample with one precomputed distance matrix."""

    def __init__(self, X: np.ndarray, max_points: int, seed: int) -> None:
        from sklearn.metrics import pairwise_distances  # sklearn: ~1.4 s, not at CLI start-up

        n = len(X)
        self.idx = (np.sort(np.random.default_rng(seed).choice(n, max_points, replace=False))
                    if n > max_points else np.arange(n))
        self.D = pairwise_distances(X[self.idx]) if max_points > 0 else None

    def __call__(self, labels: np.ndarray) -> float | None:
        from sklearn.metrics import silhouette_score  # sklearn: ~1.4 s, not at CLI start-up

        if self.D is None:
            return None
        sub = labels[self.idx]
        if not 2 <= len(np.unique(sub)) <= len(sub) - 1:
            return None
        return float(silhouette_score(self.D, sub, metric="precomputed"))


def sweep(X: np.ndarray, ks: Sequence[int], weights: np.ndarray | None = None, seed: int = 0,
          algorithm: str = "kmeans", silhouette_sample: int = 2000, progress: bool = False) -> Sweep:
    """Fit k-means for every k in `ks` (see the module docstring); keeps labels and centres."""
    X = np.ascontiguousarray(X, dtype=np.float32)
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[0] < 1 or ks[-1] > len(X):
        raise TaxonomyError(f"k values {ks[:3]}..{ks[-1:]} do not fit {len(X)} points")
    t0 = time.perf_counter()
    seeds = seed_centers(X, ks[-1], weights, seed)
    seed_s = time.perf_counter() - t0
    sil = _Silhouette(X, silhouette_sample, seed)
    out = Sweep([], {}, {}, seed_s)
    for k in tqdm(ks, desc="k sweep", unit="k", disable=not progress, dynamic_ncols=True):
        t = time.perf_counter()
        labels, centers, iner, n_iter = _fit(X, seeds[:k], weights, seed, algorithm)
        out.points.append(SweepPoint(k, iner, sil(labels), n_iter, time.perf_counter() - t))
        out.labels[k], out.centers[k] = labels, centers
    return out


def refit(X: np.ndarray, k: int, weights: np.ndarray | None, seed: int, restarts: int,
          prior: tuple[np.ndarray, np.ndarray, float] | None = None
          ) -> tuple[np.ndarray, np.ndarray, float]:
    """Best of `prior` (labels, centres, inertia) and `restarts` fresh k-means++ fits at k."""
    best = prior
    X = np.ascontiguousarray(X, dtype=np.float32)
    for r in range(1, restarts + 1):
        init = seed_centers(X, k, weights, seed + r)
        labels, centers, iner, _ = _fit(X, init, weights, seed + r, "kmeans")
        if best is None or iner < best[2] - 1e-9:
            best = (labels, centers, iner)
    if best is None:
        raise TaxonomyError("refit needs restarts >= 1 or a prior fit")
    return best


def choose_k(points: Sequence[SweepPoint], rule: str = "knee") -> int:
    """The k picked by `rule` (see the module docstring); ties go to the smaller k."""
    if not points:
        raise TaxonomyError("empty sweep")
    if rule not in K_RULES:
        raise TaxonomyError(f"k rule must be one of {K_RULES}, got {rule!r}")
    pts = sorted(points, key=lambda p: p.k)
    if rule == "silhouette":
        scored = [p for p in pts if p.silhouette is not None]
        if not scored:
            raise TaxonomyError("no silhouette values (too few points); use --k-rule knee or --k")
        return max(scored, key=lambda p: (p.silhouette, -p.k)).k
    if len(pts) < 3:
        return pts[0].k
    k = np.array([p.k for p in pts], dtype=float)
    y = np.array([p.inertia for p in pts], dtype=float)
    xs = (k - k[0]) / (k[-1] - k[0])
    span = y.max() - y.min()
    ys = (y - y.min()) / span if span > 0 else np.zeros_like(y)
    chord = ys[0] + (ys[-1] - ys[0]) * xs
    gap = chord - ys  # how far each point lies below the chord
    return int(k[int(np.argmax(gap))])


def group_centroids(centers: np.ndarray, n_groups: int) -> np.ndarray:
    """Second level: Ward clustering of unit-normalised centroids into min(n_groups, k) groups."""
    from sklearn.cluster import AgglomerativeClustering  # sklearn: ~1.4 s, not at CLI start-up

    k = len(centers)
    n = min(n_groups, k)
    if n < 1:
        raise TaxonomyError(f"number of top-level categories must be >= 1, got {n_groups}")
    if n == k:
        return np.arange(k)
    c = centers / np.maximum(np.linalg.norm(centers, axis=1, keepdims=True), 1e-12)
    return AgglomerativeClustering(n_clusters=n, linkage="ward").fit_predict(c)
