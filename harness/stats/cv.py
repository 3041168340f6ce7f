"""Cross-validation schemes, out-of-fold scores, AUROC and bootstrap confidence intervals.

Each source category of the Needham et al. data (and of our first demo set) holds one label, so a
random split puts samples of the same source on both sides and a probe can score well by
recognising the source. The honest default is ``grouped`` (stratified, grouped by category);
``lofo`` leaves one family out at a time; ``crossed`` holds out a category fold and a family fold
at once (a cue's phrasing family and a topic both unseen: :func:`crossed_splits`); ``random`` is
reported for comparison and labelled leaky. AUROC is computed on the pooled out-of-fold scores
(held-out folds may hold one class) with harness.stats.metrics (one AUROC and one bootstrap for the whole project).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from sklearn.model_selection import LeaveOneGroupOut, StratifiedGroupKFold, StratifiedKFold

from harness.core.errors import EvalAwareError
from harness.stats.metrics import auroc_interval, roc_auc

SCHEMES: dict[str, str] = {
    "grouped": "stratified k-fold grouped by category (default; honest)",
    "crossed": "held out by category and family at once: each test cell is the categories of one fold x the "
               "families of one fold, trained on neither (honest; grouped where the families are the categories)",
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
        splits = _grouped(y, groups, n_splits, seed)
    elif scheme == "crossed":
        splits = crossed_splits(y, groups, families, n_splits, seed)
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
            held = sorted(set(np.asarray(families if scheme in ("lofo", "crossed") else groups)[te].tolist()))
            raise EvalAwareError(f"{scheme} CV: holding out {held[:3]} leaves one class in "
                                 f"training; choose another family/group key")
    return splits


def _grouped(y: np.ndarray, groups: Sequence[str], n_splits: int, seed: int, what: str = "groups") -> list[Split]:
    """Stratified k-fold grouped by `groups` (fewer folds where there are fewer groups or samples)."""
    n_groups = len(set(groups))
    # sklearn refuses more folds than the larger class has samples: fewer folds instead
    k = min(n_splits, n_groups, int(np.bincount(y.astype(int)).max()))
    if k < 2:
        raise EvalAwareError(f"grouped CV needs at least 2 {what}, found {n_groups}")
    return list(StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed)
                .split(np.arange(len(y)), y, np.asarray(groups)))


def crossed_splits(y: np.ndarray, groups: Sequence[str], families: Sequence[str], n_splits: int = 5,
                   seed: int = 0) -> list[Split]:
    """Train/test pairs held out by group (category) and family at once: categories and families
    are each dealt into stratified grouped folds; test cell (i, j) is the samples of category fold
    i and family fold j, trained on the samples of neither (so no test sample shares its category
    or its family with a training sample). Every sample is tested once; where the families are
    the groups (no family field), this is grouped CV."""
    g, f = [str(x) for x in groups], [str(x) for x in families]
    if len(set(zip(g, f))) == len(set(g)) == len(set(f)):  # one partition: nothing to cross
        return _grouped(y, g, n_splits, seed)
    fold_g, fold_f = np.zeros(len(y), int), np.zeros(len(y), int)
    for fold, keys, what, s in ((fold_g, g, "categories", seed), (fold_f, f, "families", seed + 1)):
        for k, (_, te) in enumerate(_grouped(y, keys, n_splits, s, what)):
            fold[te] = k
    out = []
    for i in range(int(fold_g.max()) + 1):
        for j in range(int(fold_f.max()) + 1):
            te = np.flatnonzero((fold_g == i) & (fold_f == j))
            if len(te):
                out.append((np.flatnonzero((fold_g != i) & (fold_f != j)), te))
    return out


def oof_scores(make: Callable[[], Any], X: Any, y: np.ndarray, splits: Sequence[Split]
               ) -> tuple[np.ndarray, list[float | None]]:
    """Out-of-fold decision scores and per-fold AUROCs (None where a fold holds one class)."""
    y = np.asarray(y)
    scores = np.full(len(y), np.nan)
    fold_auc = []
    for tr, te in splits:
        est = make().fit(_take(X, tr), y[tr])
        s = np.asarray(est.decision_function(_take(X, te)), dtype=np.float64)
        scores[te] = s
        fold_auc.append(roc_auc(y[te], s))
    return scores, fold_auc


def _take(X: Any, idx: np.ndarray) -> Any:
    if isinstance(X, np.ndarray):
        return X[idx]
    return [X[i] for i in idx]


def auroc_ci(y: np.ndarray, s: np.ndarray, n_boot: int, seed: int = 0,
             groups: Sequence[str] | None = None) -> dict[str, Any]:
    """{"auroc", "ci_lo", "ci_hi", "ci_method"} of scores `s` (None where undefined), with the
    harness's interval (:func:`harness.stats.metrics.auroc_interval`: over samples, or whole
    groups when `groups` are given); ``ci_method`` names the rule that made it."""
    iv = auroc_interval(y, s, n=n_boot, seed=seed, groups=groups)
    return {"auroc": roc_auc(y, s), "ci_lo": iv.lo if iv else None, "ci_hi": iv.hi if iv else None,
            "ci_method": iv.method if iv else None}
