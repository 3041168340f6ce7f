"""Paired statistics for positive controls: two models scored on the same samples, and samples
that come in pairs (the same prompt with and without a planted cue, or with one factor switched:
:func:`paired_effect`).

Every interval resamples whole groups (categories, or pairs) with the same bootstrap weights for
both models, so a difference between models keeps the pairing (:func:`bootstrap_weights`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from harness.stats.metrics import Interval, interval_weighted, roc_auc, roc_auc_weighted_rows, weighted_mean_rows


def _ci(v: Interval | None) -> list[float] | None:
    return None if v is None else [round(v.lo, 4), round(v.hi, 4)]


def _put(out: dict[str, Any], key: str, v: Interval | None) -> None:
    """`key` = the rounded interval and `key_method` = the rule that made it (None without one)."""
    out[key], out[f"{key}_method"] = _ci(v), None if v is None else v.method


def paired_auroc(y: Sequence[int], s_a: Sequence[float], s_b: Sequence[float], groups: Sequence[Any],
                 n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """AUROC of two score vectors on the same samples (label `y`), each with a group-bootstrap
    interval, and their difference b - a with an interval from the same resamples."""
    y = np.asarray(y, dtype=int)
    a, b = np.asarray(s_a, dtype=float), np.asarray(s_b, dtype=float)
    auc_a, auc_b = roc_auc(y, a), roc_auc(y, b)
    out: dict[str, Any] = {"n": int(len(y)), "n_groups": len(set(map(str, groups))),
                           "auroc_a": auc_a, "auroc_b": auc_b,
                           "diff": None if auc_a is None or auc_b is None else auc_b - auc_a}
    for key in ("auroc_a_ci", "auroc_b_ci", "diff_ci"):
        _put(out, key, None)
    if auc_a is None or auc_b is None or not n_boot:
        return out
    kw: dict[str, Any] = dict(n=n_boot, seed=seed, groups=list(groups), strata=y)
    _put(out, "auroc_a_ci", interval_weighted(lambda W: roc_auc_weighted_rows(y, a, W), len(y),
                                              bounds=(0.0, 1.0), **kw))
    _put(out, "auroc_b_ci", interval_weighted(lambda W: roc_auc_weighted_rows(y, b, W), len(y),
                                              bounds=(0.0, 1.0), **kw))
    _put(out, "diff_ci", interval_weighted(
        lambda W: roc_auc_weighted_rows(y, b, W) - roc_auc_weighted_rows(y, a, W), len(y),
        bounds=(-1.0, 1.0), **kw))
    return out


def auroc_minus_best(y: Sequence[int], score: Sequence[float], baselines: dict[str, Sequence[float]],
                     groups: Sequence[Any] | None, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """A method's AUROC minus the best of several baselines' (the surface predictors), all on the
    same samples, with a paired interval of the difference (:func:`interval_weighted`: the
    cluster-jackknife t under 50 units, else the percentile bootstrap): every weighting (a unit of
    whole `groups`, or a sample without, left out or resampled) weighs the method and every
    baseline alike, and the best baseline is chosen again under each, so choosing the maximum of k
    predictors is part of the interval. {n, n_groups, auroc, best, best_auroc, diff, diff_ci,
    diff_ci_method}."""
    y = np.asarray(y, dtype=int)
    s = np.asarray(score, dtype=float)
    B = {k: np.asarray(v, dtype=float) for k, v in baselines.items()}
    aucs = {k: roc_auc(y, v) for k, v in B.items()}
    aucs = {k: v for k, v in aucs.items() if v is not None}
    auc = roc_auc(y, s)
    best = max(aucs, key=lambda k: aucs[k]) if aucs else None
    out: dict[str, Any] = {"n": int(len(y)), "n_groups": len(set(map(str, groups))) if groups is not None else int(len(y)),
                           "auroc": auc, "best": best, "best_auroc": aucs.get(best) if best else None,
                           "diff": None if auc is None or best is None else auc - aucs[best], "diff_ci": None}
    if out["diff"] is None or not n_boot:
        return out

    def diff(W: np.ndarray) -> np.ndarray:
        surface = np.max(np.vstack([roc_auc_weighted_rows(y, B[k], W) for k in aucs]), axis=0)
        return roc_auc_weighted_rows(y, s, W) - surface

    _put(out, "diff_ci", interval_weighted(diff, len(y), n_boot, seed,
                                           None if groups is None else list(groups), strata=y))
    return out


def within_pair_differences(pairs: Sequence[str], labels: Sequence[int], scores: Sequence[float]
                            ) -> tuple[list[str], np.ndarray]:
    """(pair ids, score(cue side) - score(no-cue side)) for every pair with both sides scored;
    `labels` 1 marks the cue side. A pair with a missing or doubled side is left out."""
    by: dict[str, dict[int, list[float]]] = {}
    for p, l, s in zip(pairs, labels, scores):
        if s is not None and np.isfinite(s):
            by.setdefault(str(p), {}).setdefault(int(l), []).append(float(s))
    ids = [p for p, d in by.items() if len(d.get(1, [])) == 1 and len(d.get(0, [])) == 1]
    return ids, np.array([by[p][1][0] - by[p][0][0] for p in ids], dtype=float)


def mean_with_ci(values: Sequence[float], groups: Sequence[Any] | None, n_boot: int = 1000,
                 seed: int = 0, bounds: tuple[float, float] | None = None) -> dict[str, Any]:
    """Mean of `values` with an interval resampling `groups` (:func:`bootstrap_weighted`; `bounds`:
    the mean's range, e.g. (0, 1) for a share, which the interval then respects)."""
    v = np.asarray(values, dtype=float)
    out: dict[str, Any] = {"n": int(len(v)), "mean": float(v.mean()) if len(v) else None}
    _put(out, "ci", interval_weighted(lambda W: weighted_mean_rows(W, v), len(v), n_boot, seed,
                                      None if groups is None else list(groups), bounds=bounds)
         if len(v) and n_boot else None)
    return out


def rate_with_ci(hits: Sequence[bool], groups: Sequence[Any] | None, n_boot: int = 1000,
                 seed: int = 0) -> dict[str, Any]:
    """Share of True in `hits` with a group-resampled interval inside [0, 1], and the count."""
    out = mean_with_ci([float(h) for h in hits], groups, n_boot, seed, bounds=(0.0, 1.0))
    out["k"] = int(sum(bool(h) for h in hits))
    out["rate"] = out.pop("mean")
    return out


def paired_effect(deltas: Sequence[float], groups: Sequence[Any], pairs: Sequence[Any],
                  n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Mean within-pair change (`deltas`, one per pair) with a two-stage percentile bootstrap
    interval: categories (`groups`) drawn with replacement, then pairs within each drawn
    category (:func:`harness.stats.metrics.bootstrap_weights` with `subgroups`)."""
    v = np.asarray(deltas, dtype=float)
    out: dict[str, Any] = {"n": int(len(v)), "n_groups": len(set(map(str, groups))),
                           "mean": float(v.mean()) if len(v) else None}
    _put(out, "ci", interval_weighted(lambda W: weighted_mean_rows(W, v), len(v), n_boot, seed,
                                      list(groups), subgroups=list(pairs)) if len(v) and n_boot else None)
    return out
