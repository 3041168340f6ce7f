"""Baselines evaluated on the same splits as the probes.

- ``tfidf``: TF-IDF (word 1-2 grams, lowercased) of the prompt transcript -> logistic
  regression. Surface style alone; on the Needham et al. data it reached AUROC 0.94 (vs ~0.71
  for an honest probe).
- ``tfidf_char``: TF-IDF of character 2-5-grams, case-sensitive, -> logistic regression: sees
  casing, punctuation and formatting cues the word baseline lowercases away (0.96-0.98 on the old
  demo set under grouped CV).
- ``length``: log prompt length in tokens -> logistic regression (0.59 there).
- ``shuffled``: the logreg probe on permuted labels at *every* layer, keeping the best layer
  per permutation: the null for the selected layer (selection.py). For grouped/leave-one-family-
  out CV on label-pure groups, whole groups swap labels: under those schemes even a useless
  feature scores below 0.5 (holding out a group moves its class mean away from it), and the
  group-level null shows that floor.
- ``human``: the dataset's real human P(eval) (annotations with a named source, such as Needham
  et al.'s eval_author1/2) used directly as a score (no training); no row when the dataset
  carries none (an author's guess is never loaded as one).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

from harness.stats.cv import Split, auroc_ci, oof_scores

BASELINES: tuple[str, ...] = ("tfidf", "tfidf_char", "length", "shuffled", "human")


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
                      lengths: np.ndarray, n_boot: int, seed: int,
                      groups: Sequence[str] | None = None) -> dict[str, Any] | None:
    """One baseline's OOF AUROC and CI (bootstrap of whole `groups` when given)."""
    if name in ("tfidf", "tfidf_char"):
        s, folds = oof_scores(tfidf_model if name == "tfidf" else char_tfidf_model, list(texts), y, splits)
    elif name == "length":
        s, folds = oof_scores(length_model, np.asarray(lengths, dtype=float)[:, None], y, splits)
    else:
        raise ValueError(name)
    return {**auroc_ci(y, s, n_boot, seed, groups), "fold_auroc_mean": mean_defined(folds)}


def human_baseline(y: np.ndarray, human: np.ndarray, n_boot: int, seed: int,
                   groups: Sequence[str] | None = None) -> dict[str, Any] | None:
    ok = np.isfinite(human)
    if ok.sum() < 2 or len(set(y[ok].tolist())) < 2:
        return None
    g = None if groups is None else np.asarray(groups)[ok]
    return {**auroc_ci(y[ok], human[ok], n_boot, seed, g), "n": int(ok.sum())}


def mean_defined(v: Sequence[float | None]) -> float | None:
    """Mean of the defined values (None if none is)."""
    a = [x for x in v if x is not None]
    return float(np.mean(a)) if a else None
