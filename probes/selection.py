"""Honest layer choice: the reported probe is the best of many layers, so its AUROC is compared
with a null that also takes the best layer.

Under each label permutation the logreg probe is fitted at every layer on the same CV folds, and
the null statistic is the *maximum* out-of-fold AUROC over layers; the p-value of the selected
layer's AUROC is (1 + #null maxima >= observed) / (1 + permutations). Without this, the best of
31 layers of pure noise looks like signal (AUROC ~0.6 against a single-layer null of ~0.5).

Permutations respect the groups of the CV scheme and its folds. The folds stay those of the
observed labels, so fitting can reuse each fold's label-independent pieces (batched_logreg.py).
Stratified schemes (grouped, random) chose those folds to balance the observed labels, so labels
are permuted *within* each held-out fold: label-pure groups (single samples under random CV)
swap labels with the pure groups of their fold, and mixed groups shuffle labels among their own
samples. Every fold keeps its class balance, as the observed one has, and the null keeps the
group structure grouped CV sees. (A global permutation on fixed stratified folds unbalances
them, which lifts the null and makes the test conservative: on the noise test its mean best-layer
AUROC was 0.75 against 0.66 observed.) Leave-one-family-out folds do not depend on the labels,
so there pure families swap labels across all families. A permutation that would leave a
training fold with one class is drawn again.

The null tests whether the chosen layer's AUROC beats chance; the AUROC itself, read at the layer
chosen on the same folds, is optimistic. :func:`nested_best_layer` gives the honest estimate of
the procedure "take the best layer": in each outer fold the layer is chosen by inner CV on that
fold's training samples alone, fitted there and scored on the held-out fold (`probes train
--layer best` reports it).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from harness.core.errors import EvalAwareError
from harness.stats.metrics import roc_auc_rows

from probes.batched_logreg import Split, fold_bases, oof_decisions
from probes.models import make_probe


def permute_labels(y: np.ndarray, rng: np.random.Generator,
                   groups: Sequence[str] | None = None,
                   blocks: Sequence[int] | None = None) -> np.ndarray:
    """One permutation of `y`. Units are `groups` (each sample its own unit without them):
    label-pure units exchange labels with the pure units of the same block (all units when
    `blocks` is None), mixed units shuffle labels among their own samples."""
    y = np.asarray(y)
    g = np.asarray(groups if groups is not None else np.arange(len(y))).astype(str)
    b = np.zeros(len(y), dtype=int) if blocks is None else np.asarray(blocks)
    out = y.copy()
    pure: dict[int, list[np.ndarray]] = {}
    for u in dict.fromkeys(g.tolist()):
        ix = np.flatnonzero(g == u)
        if len(set(y[ix].tolist())) == 1:
            pure.setdefault(int(b[ix[0]]), []).append(ix)
        else:
            out[ix] = rng.permutation(y[ix])
    for units in pure.values():
        for ix, lab in zip(units, rng.permutation(np.array([y[u[0]] for u in units], dtype=y.dtype))):
            out[ix] = lab
    return out


def permutations(y: np.ndarray, n_perm: int, seed: int, groups: Sequence[str] | None,
                 splits: Sequence[Split], within_folds: bool = True, max_tries: int = 1000
                 ) -> np.ndarray:
    """`n_perm` permuted label vectors (rows) under which every training fold keeps both classes;
    `within_folds`: permute inside each held-out fold (for folds stratified on the labels)."""
    rng = np.random.default_rng(seed)
    blocks = None
    if within_folds:
        blocks = np.zeros(len(y), dtype=int)
        for k, (_, te) in enumerate(splits):
            blocks[te] = k
    out = []
    for _ in range(max_tries * max(n_perm, 1)):
        if len(out) == n_perm:
            break
        yp = permute_labels(y, rng, groups, blocks)
        if all(0 < yp[tr].sum() < len(tr) for tr, _ in splits):
            out.append(yp)
    if len(out) < n_perm:
        raise ValueError("could not draw label permutations that keep both classes in training")
    return np.asarray(out, dtype=np.int64).reshape(n_perm, len(y))


def layer_aurocs(X: np.ndarray, y: np.ndarray, splits: Sequence[Split], C: float = 1.0
                 ) -> tuple[np.ndarray, np.ndarray, list]:
    """Out-of-fold decisions (L, n) and AUROCs (L,) of the logreg probe at every layer of `X`
    (L, n, d), and the fold bases for reuse by `max_layer_null`."""
    bases = fold_bases(X, splits)
    dec = oof_decisions(bases, np.asarray(y)[None], len(y), C)[0]
    return dec, roc_auc_rows(np.asarray(y)[None], dec), bases


def best_index(aurocs: np.ndarray) -> int:
    """The index of the highest AUROC (undefined ones never chosen; ties: the lowest index)."""
    a = np.asarray(aurocs, dtype=float)
    return int(np.argmax(np.where(np.isfinite(a), a, -np.inf)))


def layer_decisions(X: np.ndarray, y: np.ndarray, splits: Sequence[Split], probe: str = "logreg", C: float = 1.0,
                    seed: int = 0) -> np.ndarray:
    """Out-of-fold decisions (L, n) of `probe` at every layer of `X` (L, n, d) on `splits`
    (the batched solver for logreg; a fit per fold and layer otherwise)."""
    if probe == "logreg":
        return layer_aurocs(X, y, splits, C)[0]
    from harness.stats.cv import oof_scores

    return np.stack([oof_scores(lambda: make_probe(probe, C, seed), Xl, np.asarray(y), splits)[0] for Xl in X])


def nested_best_layer(X: np.ndarray, y: np.ndarray, outer: Sequence[Split],
                      inner: Callable[[np.ndarray], Sequence[Split]], probe: str = "logreg", C: float = 1.0,
                      seed: int = 0) -> tuple[np.ndarray, list[int]]:
    """(out-of-fold decisions (n,), the layer index chosen in each outer fold) of "the best layer"
    as a procedure: per outer fold, `inner(tr)` splits the training samples (indices into `tr`),
    the layer with the highest inner out-of-fold AUROC is chosen (ties: the lower), the probe is
    fitted on the whole training side at that layer and scores the held-out side, which no choice
    saw. `X` is (L, n, d)."""
    y = np.asarray(y)
    dec = np.full(len(y), np.nan)
    chosen = []
    for k, (tr, te) in enumerate(outer):
        try:
            inner_splits = inner(tr)
        except EvalAwareError as e:  # say which outer fold's training side its inner folds split
            raise EvalAwareError(f"nested CV, the inner folds of outer fold {k} of {len(outer)} ({len(tr)} "
                                 f"training samples): {e}") from None
        inner_dec = layer_decisions(X[:, tr], y[tr], inner_splits, probe, C, seed)
        best = best_index(roc_auc_rows(np.broadcast_to(y[tr], inner_dec.shape), inner_dec))
        chosen.append(best)
        whole = np.concatenate([tr, te])
        local = (np.arange(len(tr)), np.arange(len(tr), len(whole)))
        dec[te] = layer_decisions(X[best:best + 1][:, whole], y[whole], [local], probe, C, seed)[0, len(tr):]
    return dec, chosen


def max_layer_null(bases: list, y: np.ndarray, observed: np.ndarray, layers: Sequence[int],
                   splits: Sequence[Split], n_perm: int = 200, seed: int = 0,
                   groups: Sequence[str] | None = None, C: float = 1.0,
                   within_folds: bool = True) -> dict[str, Any]:
    """The selected layer (highest observed AUROC; ties: the lower layer) against the null of
    the best layer under `n_perm` permutations. `observed` holds the per-layer AUROCs."""
    t0 = time.perf_counter()
    y = np.asarray(y)
    best = best_index(observed)
    how = "within folds" if within_folds else "across folds"
    res: dict[str, Any] = {"selection": f"best of {len(layers)} layers (max-over-layers null, "
                                        f"permuted {how})",
                           "selected_layer": int(layers[best]), "observed": float(observed[best]),
                           "n_layers": len(layers), "n_perm": n_perm}
    if n_perm <= 0:
        return {**res, "p_value": None, "null_mean": None, "null_q95": None, "seconds": 0.0}
    Y = permutations(y, n_perm, seed, groups, splits, within_folds)
    dec = oof_decisions(bases, Y, len(y), C)  # (P, L, n)
    P, L, n = dec.shape
    aucs = roc_auc_rows(np.repeat(Y, L, axis=0), dec.reshape(P * L, n)).reshape(P, L)
    null = np.nanmax(aucs, axis=1)
    res.update(p_value=float((1 + np.sum(null >= observed[best] - 1e-12)) / (1 + P)),
               null_mean=float(null.mean()), null_q95=float(np.quantile(null, 0.95)),
               null_lo=float(np.quantile(null, 0.025)), null_hi=float(np.quantile(null, 0.975)),
               seconds=time.perf_counter() - t0)
    return res
