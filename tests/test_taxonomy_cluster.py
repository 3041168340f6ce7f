"""k grid, k-means sweep, k rules, second-level grouping; recovery of known groups with the real
MiniLM embedder."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from harness.taxonomy import TaxonomyError
from harness.taxonomy.cluster import (SweepPoint, choose_k, group_centroids, inertia, k_grid, refit,
                                      sweep)


def blobs(n_groups=6, per=30, dim=64, spread=0.15, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(n_groups, dim))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    y = np.repeat(np.arange(n_groups), per)
    X = centers[y] + rng.normal(scale=spread / np.sqrt(dim), size=(len(y), dim))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32), y


def test_k_grid_paper_range_clipped_and_fallback():
    assert k_grid(10_000) == list(range(50, 301, 10)) and len(k_grid(10_000)) == 26
    assert k_grid(200) == [50, 60, 70, 80, 90, 100]          # k <= n // 2
    small = k_grid(64)                                        # nothing of 50..300 fits
    assert small[0] == 2 and small[-1] == 32 and len(small) <= 26 and small == sorted(set(small))
    assert k_grid(3) == [2]
    with pytest.raises(TaxonomyError, match="at least 3"):
        k_grid(2)
    with pytest.raises(TaxonomyError, match="bad k range"):
        k_grid(100, k_min=50, k_max=40)
    with pytest.raises(TaxonomyError, match="bad k range"):
        k_grid(100, k_min=1)


def pts(ks, ys, sil=None):
    return [SweepPoint(k, y, s, 1, 0.0) for k, y, s in zip(ks, ys, sil or [None] * len(ks))]


def test_knee_rule_picks_the_elbow():
    ks = list(range(2, 12))
    ys = [100, 70, 45, 25, 12, 11, 10, 9, 8, 7]  # elbow at k=6
    assert choose_k(pts(ks, ys)) == 6
    # order of points does not matter
    assert choose_k(list(reversed(pts(ks, ys)))) == 6
    assert choose_k(pts([50, 60], [3.0, 2.0])) == 50 and choose_k(pts([7], [1.0])) == 7


def test_silhouette_rule_and_errors():
    p = pts([2, 3, 4, 5], [4, 3, 2, 1], [0.1, 0.5, 0.5, 0.2])
    assert choose_k(p, "silhouette") == 3  # tie -> smaller k
    with pytest.raises(TaxonomyError, match="no silhouette"):
        choose_k(pts([2, 3], [1, 0]), "silhouette")
    with pytest.raises(TaxonomyError, match="k rule"):
        choose_k(p, "gap")
    with pytest.raises(TaxonomyError, match="empty"):
        choose_k([])


def test_sweep_recovers_blobs_and_is_deterministic():
    X, y = blobs()
    ks = [2, 4, 6, 8, 10]
    a, b = sweep(X, ks, seed=3), sweep(X, ks, seed=3)
    assert [p.k for p in a.points] == ks
    assert [p.inertia for p in a.points] == [p.inertia for p in b.points]
    assert all(np.array_equal(a.labels[k], b.labels[k]) for k in ks)
    assert adjusted_rand_score(y, a.labels[6]) > 0.95
    inert = [p.inertia for p in a.points]
    assert inert[0] > inert[2] > inert[-1]
    # inertia is the weighted sum of squared distances to the assigned centres
    assert a.points[2].inertia == pytest.approx(inertia(X, a.centers[6], a.labels[6]), rel=1e-5)
    sil = {p.k: p.silhouette for p in a.points}
    assert max(sil, key=lambda k: sil[k]) == 6 and choose_k(a.points) == 6


def test_minibatch_close_to_kmeans_and_weights_count():
    X, y = blobs(seed=1)
    km, mb = sweep(X, [6], seed=0), sweep(X, [6], seed=0, algorithm="minibatch")
    assert mb.points[0].inertia <= 1.1 * km.points[0].inertia
    assert adjusted_rand_score(y, mb.labels[6]) > 0.9
    w = np.ones(len(X))
    w[:30] = 5.0  # group 0 counts five times
    assert inertia(X, km.centers[6], km.labels[6], w) > inertia(X, km.centers[6], km.labels[6])
    with pytest.raises(TaxonomyError, match="algorithm"):
        sweep(X, [6], algorithm="dbscan")
    with pytest.raises(TaxonomyError, match="do not fit"):
        sweep(X[:5], [6])


def test_refit_never_worse_than_prior():
    X, _ = blobs(n_groups=8, spread=0.6, seed=2)
    sw = sweep(X, [8], seed=0)
    prior = (sw.labels[8], sw.centers[8], sw.points[0].inertia)
    labels, centers, best = refit(X, 8, None, 0, 3, prior)
    assert best <= prior[2] and best == pytest.approx(inertia(X, centers, labels), rel=1e-5)
    assert refit(X, 8, None, 0, 3, prior)[2] == best  # deterministic


def test_group_centroids_recovers_parent_groups():
    rng = np.random.default_rng(0)
    parents = rng.normal(size=(3, 32))
    children = np.concatenate([p + 0.05 * rng.normal(size=(4, 32)) for p in parents])
    lab = group_centroids(children, 3)
    assert adjusted_rand_score(np.repeat([0, 1, 2], 4), lab) == 1.0
    assert list(group_centroids(children[:2], 15)) == [0, 1]  # fewer clusters than groups
    with pytest.raises(TaxonomyError):
        group_centroids(children, 0)


def test_real_embeddings_of_known_groups_are_recovered():
    """MiniLM embeddings of 8 x 8 hand-written cue paraphrases: the sweep's k rules find k = 8
    and the final fit recovers the groups (ARI > 0.8; observed 0.90-0.93 over seeds 0-7)."""
    from harness.taxonomy.embed import get_embedder
    from tests.helpers.taxonomy_texts import GROUPS

    texts = [t for g in GROUPS.values() for t in g]
    y = np.repeat(np.arange(len(GROUPS)), 8)
    X = get_embedder().encode(texts)
    sw = sweep(X, range(2, 33), seed=0)
    assert choose_k(sw.points) == 8 and choose_k(sw.points, "silhouette") == 8
    for seed in (0, 1):
        s = sweep(X, [8], seed=seed)
        labels, _, _ = refit(X, 8, None, seed, 5, (s.labels[8], s.centers[8], s.points[0].inertia))
        assert adjusted_rand_score(y, labels) > 0.8
    # a shuffled order gives the same partition (embeddings do not depend on batch order)
    perm = np.random.default_rng(0).permutation(len(texts))
    Xp = get_embedder().encode([texts[i] for i in perm])
    np.testing.assert_allclose(Xp, X[perm], atol=1e-5)
