"""Baselines evaluated on the same splits as the probes.

- ``tfidf``: TF-IDF (word 1-2 grams) of the prompt transcript -> logistic regression. Surface
  style alone; on the Needham et al. data it reached AUROC 0.94 (vs ~0.71 for an honest probe).
- ``length``: log prompt length in tokens -> logistic regression (0.59 there).
- ``shuffled``: the activation probe trained on permuted labels, several permutations: the null.
  For grouped/leave-one-family-out CV on label-pure groups, whole groups swap labels: under
  those schemes even a useless feature scores below 0.5 (holding out a group moves its class
  mean away from it), and the group-level null shows that floor.
- ``human``: the dataset's real human P(eval) (annotations with a named source, such as Needham
  et al.'s eval_author1/2) used directly as a score (no training); no row when the dataset
  carries none (an author's guess is never loaded as one).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from harness.metrics import roc_auc

from .cv import Split, auroc_ci, oof_scores

BASELINES: tuple[str, ...] = ("tfidf", "length", "shuffled", "human")


def tfidf_model(C: float = 10.0) -> Pipeline:
    return Pipeline([("tfidf", TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True,
                                               min_df=1, max_features=50000)),
                     ("clf", LogisticRegression(C=C, max_iter=5000, class_weight="balanced"))])


def char_tfidf_model(C: float = 10.0) -> Pipeline:
    """Case-sensitive character 2-5-gram TF-IDF -> logistic regression: sees casing,
    punctuation and layout that the word model (lowercased) cannot."""
    return Pipeline([("tfidf", TfidfVectorizer(analyzer="char", ngram_range=(2, 5), lowercase=False,
                                               sublinear_tf=True, min_df=1, max_features=100000)),
                     ("clf", LogisticRegression(C=C, max_iter=5000, class_weight="balanced"))])


def length_model() -> Pipeline:
    return Pipeline([("log", FunctionTransformer(lambda x: np.log1p(np.asarray(x, dtype=float)))),
                     ("scaler", StandardScaler()),
                     ("clf", LogisticRegression(max_iter=1000, class_weight="balanced"))])


def evaluate_baseline(name: str, splits: Sequence[Split], y: np.ndarray, texts: Sequence[str],
                      lengths: np.ndarray, n_boot: int, seed: int) -> dict[str, Any] | None:
    """One baseline's OOF AUROC and CI (None if it does not apply)."""
    if name == "tfidf":
        s, folds = oof_scores(tfidf_model, list(texts), y, splits)
    elif name == "length":
        s, folds = oof_scores(length_model, np.asarray(lengths, dtype=float)[:, None], y, splits)
    else:
        raise ValueError(name)
    return {**auroc_ci(y, s, n_boot, seed), "fold_auroc_mean": _mean(folds)}


def permute_labels(y: np.ndarray, rng: np.random.Generator,
                   groups: Sequence[str] | None = None) -> np.ndarray:
    """Permuted labels. With `groups` whose labels are all pure, whole groups swap labels, so the
    null keeps the label-pure structure that grouped CV sees (a plain permutation would not)."""
    if groups is not None:
        g = np.asarray(groups)
        uniq = list(dict.fromkeys(g.tolist()))
        lab = {u: set(y[g == u].tolist()) for u in uniq}
        if all(len(v) == 1 for v in lab.values()):
            new = dict(zip(uniq, rng.permutation([lab[u].pop() for u in uniq])))
            return np.array([new[x] for x in g.tolist()], dtype=y.dtype)
    return rng.permutation(y)


def shuffled_null(make: Callable[[], Any], X: np.ndarray, y: np.ndarray,
                  splits_for: Callable[[np.ndarray], Sequence[Split]], n_perm: int = 20,
                  seed: int = 0, groups: Sequence[str] | None = None) -> dict[str, Any]:
    """AUROC of the probe on permuted labels: mean and the 2.5-97.5% range over permutations
    (group-level permutations when `groups` are given and label-pure)."""
    rng = np.random.default_rng(seed)
    aucs = []
    for _ in range(n_perm):
        yp = permute_labels(y, rng, groups)
        s, _ = oof_scores(make, X, yp, splits_for(yp))
        aucs.append(roc_auc(yp, s))
    a = np.asarray([np.nan if v is None else v for v in aucs], dtype=float)
    return {"auroc": float(np.mean(a)), "ci_lo": float(np.quantile(a, 0.025)),
            "ci_hi": float(np.quantile(a, 0.975)), "n_perm": n_perm}


def human_baseline(y: np.ndarray, human: np.ndarray, n_boot: int, seed: int) -> dict[str, Any] | None:
    ok = np.isfinite(human)
    if ok.sum() < 2 or len(set(y[ok].tolist())) < 2:
        return None
    return {**auroc_ci(y[ok], human[ok], n_boot, seed), "n": int(ok.sum())}


def _mean(v: Sequence[float | None]) -> float | None:
    """Mean of the defined values (None if none is)."""
    a = [x for x in v if x is not None]
    return float(np.mean(a)) if a else None
