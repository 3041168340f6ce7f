"""Cross-validation schemes, out-of-fold scores, AUROC and bootstrap confidence intervals.

Each source category of the Needham et al. data (and of our first demo set) holds one label, so a
random split puts samples of the same source on both sides and a probe can score well by
recognising the source. The honest default is ``grouped`` (stratified, grouped by category);
``lofo`` leaves one family out at a time; ``random`` is reported for comparison and labelled
leaky. AUROC is computed on the pooled out-of-fold scores (held-out folds may hold one class).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from scipy.stats import rankdata
from sklearn.model_selection import LeaveOneGroupOut, StratifiedGroupKFold, StratifiedKFold

from harness.errors import EvalAwareError

SCHEMES: dict[str, str] = {
    "grouped": "stratified k-fold grouped by category (default; honest)",
    "lofo": "leave one family out (honest)",
    "random": "stratified random k-fold (LEAKY: same source on both sides)",
}
Split = tuple[np.ndarray, np.ndarray]


def make_splits(scheme: str, y: np.ndarray, groups: Sequence[str], families: Sequence[str],
                n_splits: int = 5, seed: int = 0) -> list[Split]:
    """Train/test index pairs; every training side must hold both classes."""
    y = np.asarray(y)
    idx = np.arange(len(y))
    if len(set(y.tolist())) < 2:
        raise EvalAwareError("labels hold one class only; a probe needs eval and deploy samples")
    if scheme == "grouped":
        n_groups = len(set(groups))
        k = min(n_splits, n_groups)
        if k < 2:
            raise EvalAwareError(f"grouped CV needs at least 2 groups, found {n_groups}")
        splits = list(StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
                      .split(idx, y, np.asarray(groups)))
    elif scheme == "lofo":
        if len(set(families)) < 2:
            raise EvalAwareError("leave-one-family-out needs at least 2 families")
        splits = list(LeaveOneGroupOut().split(idx, y, np.asarray(families)))
    elif scheme == "random":
        k = min(n_splits, int(np.bincount(y.astype(int)).min()))
        if k < 2:
            raise EvalAwareError("random CV needs at least 2 samples of each class")
        splits = list(StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(idx, y))
    else:
        raise EvalAwareError(f"unknown CV scheme {scheme!r}; use {', '.join(SCHEMES)}")
    for tr, te in splits:
        if len(set(y[tr].tolist())) < 2:
            held = sorted(set(np.asarray(families if scheme == "lofo" else groups)[te].tolist()))
            raise EvalAwareError(f"{scheme} CV: holding out {held[:3]} leaves one class in "
                                 f"training; choose another family/group key")
    return splits


def oof_scores(make: Callable[[], Any], X: Any, y: np.ndarray, splits: Sequence[Split]
               ) -> tuple[np.ndarray, list[float]]:
    """Out-of-fold decision scores and per-fold AUROCs (NaN where a fold holds one class)."""
    y = np.asarray(y)
    scores = np.full(len(y), np.nan)
    fold_auc = []
    for tr, te in splits:
        est = make().fit(_take(X, tr), y[tr])
        s = np.asarray(est.decision_function(_take(X, te)), dtype=np.float64)
        scores[te] = s
        fold_auc.append(auroc(y[te], s))
    return scores, fold_auc


def _take(X: Any, idx: np.ndarray) -> Any:
    if isinstance(X, np.ndarray):
        return X[idx]
    return [X[i] for i in idx]


def auroc(y: np.ndarray, s: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half); NaN if one class is missing."""
    y = np.asarray(y).astype(bool)
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    r = rankdata(np.asarray(s, dtype=np.float64))
    return float((r[y].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def bootstrap_auroc(y: np.ndarray, s: np.ndarray, n_boot: int = 1000, seed: int = 0,
                    groups: Sequence[str] | None = None, level: float = 0.95
                    ) -> tuple[float, float]:
    """Percentile bootstrap CI of AUROC; resamples samples, or whole groups when given."""
    y, s = np.asarray(y).astype(bool), np.asarray(s, dtype=np.float64)
    if n_boot <= 0 or y.all() or (~y).all():
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    if groups is None:
        idx = rng.integers(0, len(y), size=(n_boot, len(y)))
        aucs = _auroc_rows(y[idx], s[idx])
    else:
        g = np.asarray(groups)
        uniq = np.unique(g)
        members = [np.flatnonzero(g == u) for u in uniq]
        aucs = []
        for _ in range(n_boot):
            pick = rng.integers(0, len(uniq), size=len(uniq))
            ix = np.concatenate([members[p] for p in pick])
            aucs.append(auroc(y[ix], s[ix]))
        aucs = np.asarray(aucs)
    aucs = aucs[np.isfinite(aucs)]
    if not len(aucs):
        return float("nan"), float("nan")
    a = (1 - level) / 2
    return float(np.quantile(aucs, a)), float(np.quantile(aucs, 1 - a))


def _auroc_rows(y: np.ndarray, s: np.ndarray) -> np.ndarray:
    """AUROC of each row of (y, s) matrices, vectorised; NaN for single-class rows."""
    r = rankdata(s, axis=1)
    n1 = y.sum(1).astype(np.float64)
    n0 = y.shape[1] - n1
    with np.errstate(invalid="ignore", divide="ignore"):
        out = ((r * y).sum(1) - n1 * (n1 + 1) / 2.0) / (n1 * n0)
    out[(n1 == 0) | (n0 == 0)] = np.nan
    return out
