"""The `logreg` probe (StandardScaler -> L2 logistic regression, classes weighted to balance,
unpenalised intercept; see models.py) fitted for every layer and many label vectors at once.

Per CV fold and layer, the label-independent pieces are computed once: the scaler (mean and
scale of the training rows) and an orthonormal basis of the standardised training rows (thin
SVD). With n training samples << d features, the L2 solution lies in that row space, so the
problem becomes an n-dimensional one (``Z = U S``) with the same penalty. A damped Newton
method then solves it for a whole batch of (label vector, layer) pairs with batched linear
algebra. The result equals sklearn's fit (tested to 1e-6 on the decision values); what changes is
the cost: a layer-selection null over 200 permutations x 31 layers is a few batched solves per
fold instead of ~30,000 separate fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

Split = tuple[np.ndarray, np.ndarray]


@dataclass
class FoldBasis:
    """Label-independent pieces of one CV fold for every layer: train/test coordinates in the
    basis of the standardised training rows, with a trailing column of ones (the intercept)."""

    train: np.ndarray  # (L, n_train, k + 1)
    test: np.ndarray   # (L, n_test, k + 1)
    tr: np.ndarray
    te: np.ndarray


def fold_bases(X: np.ndarray, splits: Sequence[Split]) -> list[FoldBasis]:
    """`X` is (L, n, d): one matrix per layer. One FoldBasis per split."""
    with threadpool_limits(1, user_api="blas"):
        return _fold_bases(np.asarray(X, dtype=np.float64), splits)


def _fold_bases(X: np.ndarray, splits: Sequence[Split]) -> list[FoldBasis]:
    out = []
    for tr, te in splits:
        Xtr, Xte = X[:, tr], X[:, te]
        mu = Xtr.mean(1, keepdims=True)
        sd = Xtr.std(1, keepdims=True)
        sd[sd == 0] = 1.0  # as StandardScaler: constant features are left unscaled
        Str, Ste = (Xtr - mu) / sd, (Xte - mu) / sd
        U, S, Vt = np.linalg.svd(Str, full_matrices=False)
        Ztr = U * S[:, None, :]
        Zte = Ste @ np.swapaxes(Vt, 1, 2)
        ones = lambda a: np.ones(a.shape[:2] + (1,))  # noqa: E731
        out.append(FoldBasis(np.concatenate([Ztr, ones(Ztr)], 2), np.concatenate([Zte, ones(Zte)], 2),
                             np.asarray(tr), np.asarray(te)))
    return out


def _objective(Z: np.ndarray, beta: np.ndarray, y: np.ndarray, c: np.ndarray, C: float) -> np.ndarray:
    m = np.einsum("lnk,plk->pln", Z, beta)
    loss = np.logaddexp(0.0, m) - y[:, None, :] * m  # log-loss with y in {0, 1}
    return C * (loss * c[:, None, :]).sum(2) + 0.5 * (beta[..., :-1] ** 2).sum(2)


def fit_decisions(basis: FoldBasis, Y: np.ndarray, C: float = 1.0, tol: float = 1e-10,
                  max_iter: int = 100) -> np.ndarray:
    """Held-out decision values (P, L, n_test) of the probe fitted on the fold's training rows,
    for each of the P label vectors `Y` (P, n) and each layer."""
    Z, Zte = basis.train, basis.test
    y = np.asarray(Y, dtype=np.float64)[:, basis.tr]
    P, (L, n, k) = len(y), Z.shape
    n1 = y.sum(1, keepdims=True)
    if ((n1 == 0) | (n1 == n)).any():
        raise ValueError("a training fold holds one class only")
    c = np.where(y == 1, n / (2 * n1), n / (2 * (n - n1)))  # class_weight="balanced"
    pen = np.ones(k)
    pen[-1] = 0.0  # the intercept is not penalised
    beta = np.zeros((P, L, k))
    f = _objective(Z, beta, y, c, C)
    for _ in range(max_iter):
        m = np.einsum("lnk,plk->pln", Z, beta)
        p = 1.0 / (1.0 + np.exp(-m))
        g = C * np.einsum("lnk,pln->plk", Z, c[:, None, :] * (p - y[:, None, :])) + pen * beta
        A = Z[None] * np.sqrt(C * c[:, None, :] * p * (1 - p))[..., None]
        H = np.swapaxes(A, 2, 3) @ A + np.diag(pen)
        H[..., -1, -1] += 1e-12  # keeps the intercept row invertible when all p are 0 or 1
        step = np.linalg.solve(H, g[..., None])[..., 0]
        t = np.ones((P, L))
        for _ in range(40):  # backtracking where the full step does not decrease the objective
            new = beta - t[..., None] * step
            fn = _objective(Z, new, y, c, C)
            bad = fn > f + 1e-12 * np.abs(f)
            if not bad.any():
                break
            t = np.where(bad, t / 2, t)
        beta, f = new, np.minimum(fn, f)
        if np.abs(t[..., None] * step).max() < tol:
            break
    return np.einsum("lnk,plk->pln", Zte, beta)


def oof_decisions(bases: Sequence[FoldBasis], Y: np.ndarray, n: int, C: float = 1.0,
                  chunk: int = 4) -> np.ndarray:
    """Out-of-fold decision values (P, L, n) for label vectors `Y` (P, n) over all folds, solving
    `chunk` label vectors at a time (memory: chunk x L x k^2 floats)."""
    Y = np.atleast_2d(Y)
    L = bases[0].train.shape[0]
    out = np.full((len(Y), L, n), np.nan)
    with threadpool_limits(1, user_api="blas"):  # many tiny matrices: threads only contend
        for b in bases:
            for i in range(0, len(Y), chunk):
                out[i:i + chunk, :, b.te] = fit_decisions(b, Y[i:i + chunk], C)
    return out
