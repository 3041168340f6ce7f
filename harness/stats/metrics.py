"""The statistics: AUROC, Brier, ECE, kappa, Pearson, TPR at a fixed FPR, the cluster-robust
slope and the (cluster) bootstrap, on arrays; summaries of method records over these are
:mod:`harness.stats.summaries`.

Conventions
- Truth y = 1 for "eval", 0 for "deploy". `score` is the method's P(eval)-like number (label probability
  of binary/probability, share of "aware" verdicts, logprob P(eval), probe output); records without a
  score are left out of the score-based metrics (AUROC, Brier, ECE) and counted.
- Brier: ``brier`` is the standard squared error mean((p - y)^2) (= sklearn's
  ``brier_score_loss``). The paper's footnote calls |y - p| "Brier"; that is ``abs_brier``.
- ECE (as in Needham et al. 2025): 10 equal-width bins of P(eval), sum over bins of
  (n_bin / n) * |share of eval in bin - mean P(eval) in bin|. Bins are right-closed
  ((0.1, 0.2], ...; the first is [0, 0.1]), exactly as sklearn's ``calibration_curve``.
- Cohen's kappa between two methods uses the samples both decided (prediction not None);
  undefined (None) when chance agreement is 1 (both methods constant and equal).
- AUROC: scikit-learn's ``roc_auc_score`` (ties count half); None with only one class present.
  `roc_auc_rows` / `roc_auc_weighted_rows` are vectorised equivalents for permutations and
  bootstrap resamples. Harness and probes both use these (harness/stats/cv.py has no AUROC of its own).
- Bootstrap: `bootstrap_weights` draws every resample as a row of draw counts, of samples or,
  given groups, of whole groups (cluster bootstrap), within label strata where given (a
  single-label group is replaced by one of its label, so no resample loses a class);
  `bootstrap_ci` (any statistic) and `bootstrap_auroc` (vectorised) share those draws.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

Record = Mapping[str, Any]
Y = {"eval": 1, "deploy": 0}


# --- basic metrics on arrays ------------------------------------------------------------------

def roc_auc(y: Sequence[int], s: Sequence[float],
            weights: Sequence[float] | None = None) -> float | None:
    """Area under the ROC curve of scores `s` for binary truth `y` (ties count half), with
    optional sample weights: scikit-learn's ``roc_auc_score``. None with only one class present
    (the one convention for an undefined AUROC, in harness and probes alike)."""
    from sklearn.metrics import roc_auc_score  # sklearn: ~1.4 s, not at CLI start-up

    y, s = np.asarray(y, dtype=int), np.asarray(s, dtype=float)
    w = None if weights is None else np.asarray(weights, dtype=float)
    present = y if w is None else y[w > 0]
    if len(present) == 0 or present.min() == present.max():
        return None
    return float(roc_auc_score(y, s, sample_weight=w))


#: No AUROC from fewer scored samples than this per class (the report's coverage-gated rows and the
#: benchmarks): with 10 per class the 95% bootstrap interval of an AUROC near 0.75 is already
#: about ±0.2 wide.
MIN_AUROC_PER_CLASS = 10


def gated_roc_auc(y: Sequence[int], s: Sequence[float | None],
                  min_per_class: int = MIN_AUROC_PER_CLASS) -> tuple[float | None, int, int]:
    """(AUROC, eval n, deploy n) over the samples with a score; AUROC None when either class has
    fewer than `min_per_class` of them."""
    ys = [int(a) for a, b in zip(y, s) if b is not None]
    n_eval, n_deploy = sum(ys), len(ys) - sum(ys)
    if min(n_eval, n_deploy) < min_per_class:
        return None, n_eval, n_deploy
    return roc_auc(ys, [float(b) for b in s if b is not None]), n_eval, n_deploy


def roc_auc_rows(y: np.ndarray, s: np.ndarray) -> np.ndarray:
    """AUROC of each row of (y, s) matrices of shape (rows, n), vectorised (Mann-Whitney with
    mid-ranks, equal to ``roc_auc_score`` per row); NaN for rows holding one class."""
    from scipy.stats import rankdata  # scipy: ~0.5 s, not at CLI start-up

    y, s = np.atleast_2d(np.asarray(y).astype(bool)), np.atleast_2d(np.asarray(s, dtype=float))
    y = np.broadcast_to(y, s.shape)
    r = rankdata(s, axis=1)
    n1 = y.sum(1).astype(np.float64)
    n0 = y.shape[1] - n1
    with np.errstate(invalid="ignore", divide="ignore"):
        out = ((r * y).sum(1) - n1 * (n1 + 1) / 2.0) / (n1 * n0)
    out[(n1 == 0) | (n0 == 0)] = np.nan
    return out


def _level_counts(y: Sequence[int], s: Sequence[float], W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted counts of positives and negatives per distinct score (ascending), per row of W."""
    y, s = np.asarray(y).astype(bool), np.asarray(s, dtype=float)
    W = np.atleast_2d(np.asarray(W, dtype=float))
    order = np.argsort(s, kind="mergesort")
    ss, ys, Ws = s[order], y[order], W[:, order]
    starts = np.flatnonzero(np.r_[True, ss[1:] != ss[:-1]])  # one column per distinct score
    return np.add.reduceat(Ws * ys, starts, axis=1), np.add.reduceat(Ws * ~ys, starts, axis=1)


def tpr_at_fpr_weighted_rows(y: Sequence[int], s: Sequence[float], W: np.ndarray,
                             fpr: float) -> np.ndarray:
    """`tpr_at_fpr` under each row of sample weights, vectorised; NaN where a row weighs one class."""
    P, N = _level_counts(y, s, W)
    tp = np.cumsum(P[:, ::-1], axis=1)  # thresholds from the highest score down
    fp = np.cumsum(N[:, ::-1], axis=1)
    n1, n0 = tp[:, -1:], fp[:, -1:]
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = fp / n0 <= fpr + 1e-12
        out = np.where(ok, tp / n1, 0.0).max(1)
    out[(n1[:, 0] <= 0) | (n0[:, 0] <= 0)] = np.nan
    return out


def roc_auc_weighted_rows(y: Sequence[int], s: Sequence[float], W: np.ndarray) -> np.ndarray:
    """AUROC of fixed (y, s) under each row of sample weights `W` (rows, n), vectorised: the
    bootstrap's AUROC (a resample is a weight row of draw counts). Equals
    ``roc_auc_score(y, s, sample_weight=W[b])`` per row; NaN where a row weighs one class."""
    P, N = _level_counts(y, s, W)
    below = np.cumsum(N, axis=1) - N
    n1, n0 = P.sum(1), N.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (P * (below + 0.5 * N)).sum(1) / (n1 * n0)
    out[(n1 <= 0) | (n0 <= 0)] = np.nan
    return out


def within_group_counts(y: Sequence[int], s: Sequence[float], groups: Sequence[Any]
                        ) -> dict[str, tuple[float, int]]:
    """{group: (concordant comparisons, comparable pairs)} of the groups holding both classes: a
    comparison is a positive and a negative of the same group, concordant where the positive
    scores higher (ties count half). Groups with one class compare nothing and are left out."""
    y, s = np.asarray(y, dtype=int), np.asarray(s, dtype=float)
    g = np.asarray(groups, dtype=object).astype(str)
    out: dict[str, tuple[float, int]] = {}
    for k in dict.fromkeys(g.tolist()):
        m = g == k
        pos, neg = s[m & (y == 1)], s[m & (y == 0)]
        if len(pos) and len(neg):
            d = pos[:, None] - neg[None, :]
            out[k] = (float((d > 0).sum() + 0.5 * (d == 0).sum()), int(d.size))
    return out


def within_group_auroc_rows(y: Sequence[int], s: Sequence[float], groups: Sequence[Any],
                            W: np.ndarray) -> np.ndarray:
    """The stratified AUROC (positives compared with negatives of their own group only: the sum
    over groups of concordant comparisons over the sum of comparable pairs) under each row of
    weights `W`, a group weighing the mean of its items' weights (a resample of whole groups
    draws a group w times: its comparisons count w times); NaN where a row compares nothing."""
    counts = within_group_counts(y, s, groups)
    g = np.asarray(groups, dtype=object).astype(str)
    W = np.atleast_2d(np.asarray(W, dtype=float))
    num, den = np.zeros(W.shape[0]), np.zeros(W.shape[0])
    for k, (conc, comp) in counts.items():
        w = W[:, g == k].mean(axis=1)
        num, den = num + w * conc, den + w * comp
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / den
    out[den <= 0] = np.nan
    return out


def within_group_permutation_p(y: Sequence[int], s: Sequence[float], groups: Sequence[Any], n_perm: int = 2000,
                               seed: int = 0) -> tuple[float, float] | None:
    """One-sided permutation p-values of the stratified AUROC (:func:`within_group_auroc_rows`):
    (above, below) its observed value, the labels permuted within each group (`n_perm` seeded
    permutations; p = (1 + #permuted >= observed) / (1 + n_perm), and likewise <=). Each group keeps
    its count of positives, so its comparable pairs are fixed and a group's concordant count is its
    positives' midrank sum less n1 (n1 + 1) / 2. None where nothing is compared."""
    from scipy.stats import rankdata  # scipy: ~0.5 s, not at CLI start-up

    y, s = np.asarray(y, dtype=int), np.asarray(s, dtype=float)
    g = np.asarray(groups, dtype=object).astype(str)
    rng = np.random.default_rng(seed)
    obs, perm, den = 0.0, np.zeros(n_perm), 0
    for k in dict.fromkeys(g.tolist()):
        m = g == k
        yk, sk = y[m], s[m]
        n1 = int(yk.sum())
        if n1 == 0 or n1 == len(yk):
            continue
        r = rankdata(sk)  # mid-ranks: ties share their mean rank
        base = n1 * (n1 + 1) / 2
        obs += float((yk * r).sum()) - base
        perm += (rng.permuted(np.tile(yk, (n_perm, 1)), axis=1) * r).sum(1) - base
        den += n1 * (len(yk) - n1)
    if den == 0 or n_perm <= 0:
        return None
    eps = 1e-9 * den
    return ((1 + int((perm >= obs - eps).sum())) / (1 + n_perm), (1 + int((perm <= obs + eps).sum())) / (1 + n_perm))


def brier(y: Sequence[int], p: Sequence[float]) -> float | None:
    """Mean squared error of P(eval) (the standard Brier score)."""
    y, p = np.asarray(y, dtype=float), np.asarray(p, dtype=float)
    return float(np.mean((p - y) ** 2)) if len(y) else None


def abs_brier(y: Sequence[int], p: Sequence[float]) -> float | None:
    """Mean |y - p|: what the paper's footnote calls the Brier score."""
    y, p = np.asarray(y, dtype=float), np.asarray(p, dtype=float)
    return float(np.mean(np.abs(p - y))) if len(y) else None


def calibration_bins(y: Sequence[int], p: Sequence[float], n_bins: int = 10) -> list[dict[str, Any]]:
    """Reliability-diagram data: per non-empty bin, its edges, count, mean P(eval), share eval."""
    y, p = np.asarray(y, dtype=float), np.asarray(p, dtype=float)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    ids = np.searchsorted(edges[1:-1], p)
    out = []
    for b in range(n_bins):
        m = ids == b
        if m.any():
            out.append({"lo": float(edges[b]), "hi": float(edges[b + 1]), "n": int(m.sum()),
                        "mean_p": float(p[m].mean()), "frac_eval": float(y[m].mean())})
    return out


def ece(y: Sequence[int], p: Sequence[float], n_bins: int = 10) -> float | None:
    """Expected calibration error with equal-width bins (see the module docstring)."""
    n = len(y)
    if not n:
        return None
    return float(sum(b["n"] / n * abs(b["frac_eval"] - b["mean_p"]) for b in calibration_bins(y, p, n_bins)))


def cohen_kappa(a: Sequence[Any], b: Sequence[Any]) -> float | None:
    """Cohen's kappa between two label sequences (any hashable labels)."""
    if len(a) != len(b):
        raise ValueError("sequences differ in length")
    n = len(a)
    if n == 0:
        return None
    po = sum(1 for x, z in zip(a, b) if x == z) / n
    ca, cb = Counter(a), Counter(b)
    pe = sum(ca[k] * cb[k] for k in ca) / (n * n)
    if pe >= 1.0:
        return None
    return float((po - pe) / (1.0 - pe))


def pearson(x: Sequence[float], y: Sequence[float]) -> tuple[float | None, float | None]:
    """Pearson r and its two-sided p-value (t test with n - 2 degrees of freedom)."""
    from scipy import stats  # scipy: ~0.5 s, not at CLI start-up

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    if n < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return None, None
    xm, ym = x - x.mean(), y - y.mean()
    r = float(np.clip((xm @ ym) / math.sqrt((xm @ xm) * (ym @ ym)), -1.0, 1.0))
    if abs(r) == 1.0:
        return r, 0.0
    t = r * math.sqrt((n - 2) / (1.0 - r * r))
    return r, float(2 * stats.t.sf(abs(t), n - 2))


def bootstrap_weights(n_items: int, n_boot: int, seed: int = 0,
                      groups: Sequence[Any] | None = None,
                      strata: Sequence[Any] | None = None,
                      subgroups: Sequence[Any] | None = None) -> np.ndarray:
    """Draw counts (n_boot, n_items) of the bootstrap: without `groups`, samples are drawn with
    replacement; with `groups` (one label per item), whole groups are drawn with replacement and
    each drawn group brings all its samples (the cluster bootstrap), so correlated samples of one
    group move together and the interval reflects the number of groups, not of samples.

    `strata` (the truth label of each item, e.g. `y`): groups are drawn within their stratum, the
    set of labels they hold (eval-only, deploy-only, both), as many as the stratum has, so a
    single-label category is replaced by another of its label and no resample loses a class that
    the data hold (an unstratified draw of few label-pure categories gives one-class resamples,
    which a ranking statistic must drop: 31.5% of them in a small case). Where every group holds
    the same labels (the demo: every category both), the draws are those without `strata`.

    With `subgroups` too (e.g. pairs within categories), the two-stage bootstrap: groups are
    drawn, then within each drawn copy of a group its subgroups are drawn with replacement (as
    many as it has), and each drawn subgroup brings all its items (`strata` is not
    used then)."""
    if groups is not None and subgroups is not None:
        return _nested_weights(n_items, n_boot, seed, groups, subgroups)
    rng = np.random.default_rng(seed)
    if groups is None:
        gix, n_g = np.arange(n_items), n_items
    else:
        if len(groups) != n_items:
            raise ValueError("groups and samples differ in length")
        _, gix = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
        n_g = int(gix.max()) + 1 if n_items else 0
    if n_items == 0 or n_boot <= 0:
        return np.zeros((max(n_boot, 0), n_items), dtype=np.int64)
    if strata is None:
        members = [np.arange(n_g)]
    else:
        if len(strata) != n_items:
            raise ValueError("strata and samples differ in length")
        held: dict[int, set[str]] = {}
        for g, lab in zip(gix.tolist(), np.asarray(strata, dtype=object).astype(str).tolist()):
            held.setdefault(g, set()).add(lab)
        kinds = sorted({tuple(sorted(v)) for v in held.values()})
        members = [np.array([g for g in range(n_g) if tuple(sorted(held[g])) == k]) for k in kinds]
    counts = np.zeros((n_boot, n_g), dtype=np.int64)
    for m in members:
        draws = m[rng.integers(0, len(m), size=(n_boot, len(m)))]
        np.add.at(counts, (np.arange(n_boot)[:, None], draws), 1)
    return counts[:, gix]


def _nested_weights(n_items: int, n_boot: int, seed: int, groups: Sequence[Any],
                    subgroups: Sequence[Any]) -> np.ndarray:
    """The two-stage draw of :func:`bootstrap_weights`: c copies of a group with m subgroups
    draw c * m subgroups uniformly among its m (the sum of c multinomial draws)."""
    if len(groups) != n_items or len(subgroups) != n_items:
        raise ValueError("groups, subgroups and samples differ in length")
    if n_items == 0 or n_boot <= 0:
        return np.zeros((max(n_boot, 0), n_items), dtype=np.int64)
    rng = np.random.default_rng(seed)
    g_keys = np.asarray(groups, dtype=object).astype(str)
    s_keys = np.array([f"{g}\x1f{s}" for g, s in zip(g_keys, map(str, subgroups))], dtype=object)
    _, gix = np.unique(g_keys, return_inverse=True)
    _, six = np.unique(s_keys, return_inverse=True)
    n_g, n_s = int(gix.max()) + 1, int(six.max()) + 1
    sub_group = np.zeros(n_s, dtype=np.int64)
    sub_group[six] = gix
    draws = rng.integers(0, n_g, size=(n_boot, n_g))
    gcount = np.zeros((n_boot, n_g), dtype=np.int64)
    np.add.at(gcount, (np.arange(n_boot)[:, None], draws), 1)
    counts = np.zeros((n_boot, n_s), dtype=np.int64)
    for g in range(n_g):
        subs = np.flatnonzero(sub_group == g)
        m = len(subs)
        counts[:, subs] = rng.multinomial(gcount[:, g] * m, np.full(m, 1.0 / m))
    return counts[:, six]


def _interval(vals: np.ndarray, n_boot: int, alpha: float) -> tuple[float, float] | None:
    """Percentile interval of the defined bootstrap values; None if fewer than half are defined."""
    vals = np.asarray([v for v in vals if v is not None], dtype=float)
    vals = vals[np.isfinite(vals)]
    if len(vals) < max(1, n_boot // 2):
        return None
    return float(np.quantile(vals, alpha / 2)), float(np.quantile(vals, 1 - alpha / 2))


def bootstrap_ci(fn: Callable[..., float | None], arrays: Sequence[Sequence[Any]], n: int = 1000,
                 seed: int = 0, alpha: float = 0.05, groups: Sequence[Any] | None = None,
                 strata: Sequence[Any] | None = None) -> tuple[float, float] | None:
    """Percentile bootstrap CI of `fn(*arrays)`, resampling rows, or whole groups when `groups`
    are given (see `bootstrap_weights`); None if fewer than half the resamples are defined."""
    arrs = [np.asarray(a) for a in arrays]
    m = len(arrs[0])
    if m == 0 or n <= 0:
        return None
    W = bootstrap_weights(m, n, seed, groups, strata)
    base = np.arange(m)
    vals = []
    for w in W:
        idx = np.repeat(base, w)
        vals.append(fn(*[a[idx] for a in arrs]))
    return _interval(np.asarray([np.nan if v is None else v for v in vals], dtype=float), n, alpha)


#: Fewer resampling units (categories, or samples) than this: intervals are cluster-jackknife t
#: intervals instead of percentile bootstrap ones, which under-cover with few clusters (simulated
#: for a nominal 0.95, 600 data sets each, at 6 / 12 / 30 clusters: mean 0.87 / 0.90 / 0.92,
#: share 0.82 / 0.88 / 0.95, AUROC over label-pure clusters 0.79 / 0.88 / 0.92; the jackknife t:
#: 0.94 / 0.95 / 0.94, 0.96 / 0.96 / 0.97, 0.96 / 0.97 / 0.96, `tests/test_calibration.py`).
#: 50, not the ~20 often quoted: at 30 clusters the percentile bootstrap still falls 0.03 short.
SMALL_SAMPLE_UNITS = 50


def interval_method(n_units: int) -> str:
    """Which interval `bootstrap_weighted` gives for this many resampling units (in words)."""
    if n_units < SMALL_SAMPLE_UNITS:
        return f"cluster-jackknife t ({n_units} units, t with {max(n_units - 1, 1)} df)"
    return "percentile bootstrap"


def _unit_index(n_items: int, groups: Sequence[Any] | None) -> tuple[np.ndarray, int]:
    if groups is None:
        return np.arange(n_items), n_items
    _, gix = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
    return gix, int(gix.max()) + 1 if n_items else 0


def _unit_strata(gix: np.ndarray, G: int, strata: Sequence[Any] | None) -> np.ndarray:
    """Per unit, the index of its stratum: the set of labels it holds (all 0 without strata)."""
    if strata is None:
        return np.zeros(G, dtype=int)
    held: dict[int, set[str]] = {}
    for g, lab in zip(gix.tolist(), np.asarray(strata, dtype=object).astype(str).tolist()):
        held.setdefault(g, set()).add(lab)
    kinds = sorted({tuple(sorted(v)) for v in held.values()})
    return np.array([kinds.index(tuple(sorted(held[g]))) for g in range(G)], dtype=int)


def jackknife_t(stat: Callable[[np.ndarray], np.ndarray], n_items: int,
                groups: Sequence[Any] | None = None, alpha: float = 0.05,
                strata: Sequence[Any] | None = None) -> tuple[float, float] | None:
    """Delete-one-cluster jackknife interval: the statistic on all units ± a t quantile times the
    jackknife standard error over the leave-one-unit-out values (units: `groups`, or samples).
    With `strata` (labels) the units are taken within their stratum (eval-only, deploy-only,
    both: the two samples of an AUROC over label-pure categories), the variance is the sum over
    strata of (G_s - 1)/G_s * sum (theta_(g) - mean_s)^2 and the t has G - S degrees of freedom;
    without, one stratum (G - 1 df). For a mean of equal-size clusters this is the t interval on
    the cluster means. None where a leave-one-out value is undefined, a stratum has a single
    unit, or there are fewer than 3 units."""
    from scipy.stats import t as t_dist  # scipy: ~0.5 s, not at CLI start-up

    jk = _jackknife_var(stat, n_items, groups, strata)
    if jk is None:
        return None
    theta, var, df = jk
    h = float(t_dist.ppf(1 - alpha / 2, df)) * math.sqrt(var)
    return float(theta - h), float(theta + h)


def _jackknife_var(stat: Callable[[np.ndarray], np.ndarray], n_items: int,
                   groups: Sequence[Any] | None, strata: Sequence[Any] | None
                   ) -> tuple[float, float, int] | None:
    """(statistic, its stratified delete-one-unit jackknife variance, degrees of freedom) as
    `jackknife_t` defines them; None where that is undefined."""
    gix, G = _unit_index(n_items, groups)
    if G < 3:
        return None
    st = _unit_strata(gix, G, strata)
    sizes = np.bincount(st)
    if sizes.min() < 2 or G - len(sizes) < 1:
        return None
    W = np.ones((G + 1, n_items))
    W[1:][np.arange(G)[:, None] == gix[None, :]] = 0.0
    v = np.asarray(stat(W), dtype=float)
    if not np.all(np.isfinite(v)):
        return None
    loo = v[1:]
    var = sum((k - 1) / k * float(((loo[st == i] - loo[st == i].mean()) ** 2).sum())
              for i, k in enumerate(sizes))
    return float(v[0]), var, G - len(sizes)


def _bounded_jackknife(stat: Callable[[np.ndarray], np.ndarray], n_items: int,
                       groups: Sequence[Any] | None, alpha: float, strata: Sequence[Any] | None,
                       bounds: tuple[float, float] | None, raw_fallback: bool = True
                       ) -> tuple[float, float] | None:
    """`jackknife_t`; for a bounded statistic (AUROC, a share) on the logit of its position in
    `bounds`, mapped back, so the interval follows the statistic's skew near a bound (symmetric
    intervals of an AUROC miss the truth mostly from above); where a value sits on a bound, on
    the raw scale (`raw_fallback`) or None."""
    if bounds is None:
        return jackknife_t(stat, n_items, groups, alpha, strata)
    a, b = bounds

    def logit(W: np.ndarray) -> np.ndarray:
        q = (np.asarray(stat(W), dtype=float) - a) / (b - a)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where((q > 0) & (q < 1), np.log(q / (1 - q)), np.nan)

    ci = jackknife_t(logit, n_items, groups, alpha, strata)
    if ci is None:
        return jackknife_t(stat, n_items, groups, alpha, strata) if raw_fallback else None
    return tuple(a + (b - a) / (1 + math.exp(-x)) for x in ci)  # type: ignore[return-value]


@dataclass(frozen=True)
class Interval:
    """A (1 - alpha) interval and, in words, the rule that made it (rows name it)."""

    lo: float
    hi: float
    method: str

    def pair(self) -> tuple[float, float]:
        return self.lo, self.hi


def interval_verdict(iv: Interval | None, null: float, above: str, below: str, neither: str) -> str:
    """A row's verdict from its interval against the `null` value: `above` where the whole
    interval lies above it, `below` where it lies below, `neither` where it covers it;
    "no verdict (no interval)" where there is none."""
    if iv is None:
        return "no verdict (no interval)"
    return above if iv.lo > null else below if iv.hi < null else neither


def exact_share_interval(q: float, n: float, alpha: float = 0.05) -> tuple[float, float]:
    """Clopper-Pearson interval of a share `q` seen over `n` trials; `n` may be fractional (an
    effective sample size, as in Korn & Graubard 1998 for clustered shares). Never zero-width:
    0 of 12 still allows up to 0.265."""
    from scipy.stats import beta  # scipy: ~0.5 s, not at CLI start-up

    k = min(max(q, 0.0), 1.0) * n
    lo = 0.0 if k <= 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k >= n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


def _edge_units(gix: np.ndarray, G: int, strata: Sequence[Any] | None) -> int:
    """The trials of an exact interval at a bound: the resampling units, or with `strata` (the
    labels of a ranking statistic) the units of the label held by the fewest (an AUROC of 1 over
    3 eval and 9 deploy categories rests on 3 eval units)."""
    if strata is None:
        return G
    labs = np.asarray(strata, dtype=object).astype(str)
    return min(len(set(gix[labs == v].tolist())) for v in set(labs.tolist()))


def _share_rule(stat: Callable[[np.ndarray], np.ndarray], n_items: int, groups: Sequence[Any] | None,
                alpha: float, strata: Sequence[Any] | None, theta: float) -> Interval | None:
    """A share-like statistic in [0, 1] where the logit jackknife is undefined: on a bound, the
    exact interval over the units (`_edge_units`: a perfect score or 0/n is never a point); inside
    but with a leave-one-out value on a bound (23/24 over categories), the exact interval with the
    effective n from the raw jackknife variance (Korn & Graubard), never a clipped t interval."""
    gix, G = _unit_index(n_items, groups)
    if theta <= 0.0 or theta >= 1.0:
        n = _edge_units(gix, G, strata)
        if n < 1:
            return None
        lo, hi = exact_share_interval(theta, n, alpha)
        return Interval(lo, hi, f"exact (Clopper-Pearson) at the bound over {n} units")
    jk = _jackknife_var(stat, n_items, groups, strata)
    if jk is None:
        return None
    var = jk[1]
    n_eff = min(float(n_items), theta * (1 - theta) / var) if var > 0 else float(G)
    lo, hi = exact_share_interval(theta, max(n_eff, 1.0), alpha)
    return Interval(lo, hi, f"exact (Clopper-Pearson) with effective n {n_eff:.1f} from the cluster jackknife")


#: A probability's logit is taken on [LOGIT_EPS, 1 - LOGIT_EPS] (a P of exactly 0 or 1 has none).
LOGIT_EPS = 1e-6


def clipped_logit(p: float, eps: float = LOGIT_EPS) -> tuple[float, bool]:
    """(the logit of `p` clipped to [eps, 1 - eps], whether it was clipped)."""
    c = min(max(p, eps), 1.0 - eps)
    return math.log(c / (1.0 - c)), c != p


def interval_weighted(stat: Callable[[np.ndarray], np.ndarray], n_items: int, n: int = 1000,
                      seed: int = 0, groups: Sequence[Any] | None = None, alpha: float = 0.05,
                      strata: Sequence[Any] | None = None,
                      bounds: tuple[float, float] | None = None,
                      subgroups: Sequence[Any] | None = None) -> Interval | None:
    """A (1 - alpha) interval of a statistic given as a vectorised function of weight rows
    (`stat(W)` -> one value per row, NaN where undefined), with the rule that made it:

    - fewer than SMALL_SAMPLE_UNITS resampling units (categories, or samples): the cluster-jackknife
      t interval (`jackknife_t`), for a statistic with `bounds` on the logit of its position in them;
    - a share-like statistic (`bounds` (0, 1): AUROC, rates) on a bound, or whose logit jackknife
      is undefined: an exact interval (`_share_rule`), never zero-width, never clipped;
    - otherwise (many units, or the jackknife undefined, e.g. a one-unit stratum) the percentile
      bootstrap (the same resamples as `bootstrap_ci`; `subgroups`: the two-stage one of
      :func:`bootstrap_weights`).
    Where another bounded statistic's interval must be clipped to `bounds`, the rule says so.
    A statistic that is not a share (an AUROC difference, a mean) whose interval would have zero
    width (every resample gives the same value) has none: None, so no verdict rests on it."""
    if n_items == 0 or n <= 0:
        return None
    gix, G = _unit_index(n_items, groups)
    theta = float(np.asarray(stat(np.ones((1, n_items))), dtype=float)[0])
    share = bounds is not None and tuple(bounds) == (0.0, 1.0)
    out: Interval | None = None
    if np.isfinite(theta) and share and (theta <= 0.0 or theta >= 1.0):
        out = _share_rule(stat, n_items, groups, alpha, strata, theta)
    elif G < SMALL_SAMPLE_UNITS:
        ci = _bounded_jackknife(stat, n_items, groups, alpha, strata, bounds, raw_fallback=not share)
        if ci is not None and ci[1] - ci[0] > 1e-9:
            out = Interval(ci[0], ci[1], interval_method(G) + (" on the logit" if bounds is not None else ""))
        elif share and np.isfinite(theta):  # undefined, or of zero width (every unit left out gives
            # the same value: few units that agree say little, not nothing): the exact interval
            out = _share_rule(stat, n_items, groups, alpha, strata, theta)
    if out is None:
        ci = _interval(stat(bootstrap_weights(n_items, n, seed, groups, strata, subgroups).astype(float)), n, alpha)
        if ci is None:
            return None
        why = "" if G >= SMALL_SAMPLE_UNITS else " (the jackknife was undefined or of zero width here)"
        same = " (every resample gives the same value)" if ci[1] - ci[0] <= 1e-9 else ""
        out = Interval(ci[0], ci[1], f"percentile bootstrap over {G} units{why}{same}")
    if bounds is not None and (out.lo < bounds[0] or out.hi > bounds[1]):
        out = Interval(max(out.lo, bounds[0]), min(out.hi, bounds[1]), out.method + f", clipped to [{bounds[0]:g}, {bounds[1]:g}]")
    if not share and out.hi - out.lo <= 1e-9:
        return None  # few units that agree exactly give no measure of uncertainty, not certainty
    return out


def bootstrap_weighted(stat: Callable[[np.ndarray], np.ndarray], n_items: int, n: int = 1000,
                       seed: int = 0, groups: Sequence[Any] | None = None, alpha: float = 0.05,
                       strata: Sequence[Any] | None = None,
                       bounds: tuple[float, float] | None = None,
                       subgroups: Sequence[Any] | None = None) -> tuple[float, float] | None:
    """`interval_weighted` without the rule's name: (lo, hi) or None."""
    out = interval_weighted(stat, n_items, n, seed, groups, alpha, strata, bounds, subgroups)
    return None if out is None else out.pair()


def weighted_mean_rows(W: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Weighted mean of `v` (over `mask`) per weight row; NaN where the weights are all zero."""
    m = np.ones(len(v), dtype=bool) if mask is None else mask
    den = W @ m.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (W @ (np.asarray(v, dtype=float) * m)) / den, np.nan)


def ece_weighted_rows(y: Sequence[int], p: Sequence[float], W: np.ndarray, n_bins: int = 10) -> np.ndarray:
    """`ece` under each row of sample weights (same bins), vectorised."""
    y, p = np.asarray(y, dtype=float), np.asarray(p, dtype=float)
    ids = np.searchsorted(np.linspace(0.0, 1.0, n_bins + 1)[1:-1], p)
    D = np.zeros((len(p), n_bins))
    D[np.arange(len(p)), ids] = y - p
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.abs(W @ D).sum(1) / W.sum(1)


def kappa_weighted_rows(a: Sequence[Any], b: Sequence[Any], W: np.ndarray) -> np.ndarray:
    """`cohen_kappa` under each row of sample weights, vectorised; NaN where undefined."""
    a, b = list(a), list(b)
    levels = sorted(set(a) | set(b), key=str)
    A = np.array([[x == k for k in levels] for x in a], dtype=float).reshape(len(a), len(levels))
    B = np.array([[x == k for k in levels] for x in b], dtype=float).reshape(len(b), len(levels))
    tot = W.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        po = (W @ (A * B).sum(1)) / tot
        pe = ((W @ A) * (W @ B)).sum(1) / tot ** 2
        out = (po - pe) / (1.0 - pe)
    out[~(pe < 1.0 - 1e-12)] = np.nan
    return out


def auroc_interval(y: Sequence[int], s: Sequence[float], n: int = 1000, seed: int = 0,
                   groups: Sequence[Any] | None = None, alpha: float = 0.05) -> Interval | None:
    """The AUROC's (1 - alpha) interval and its rule (:func:`interval_weighted`; resamples as
    `bootstrap_ci` with the same seed, groups and strata = `y`, groups drawn within their
    labels so every resample holds both classes). None if undefined (one class)."""
    y, s = np.asarray(y, dtype=int), np.asarray(s, dtype=float)
    if len(y) == 0 or n <= 0 or y.min() == y.max():
        return None
    return interval_weighted(lambda W: roc_auc_weighted_rows(y, s, W), len(y), n, seed, groups, alpha,
                             strata=y, bounds=(0.0, 1.0))


def bootstrap_auroc(y: Sequence[int], s: Sequence[float], n: int = 1000, seed: int = 0,
                    groups: Sequence[Any] | None = None, alpha: float = 0.05
                    ) -> tuple[float, float] | None:
    """:func:`auroc_interval` without its rule: (lo, hi) or None."""
    iv = auroc_interval(y, s, n, seed, groups, alpha)
    return None if iv is None else iv.pair()


def tpr_at_fpr(y: Sequence[int], s: Sequence[float], fpr: float) -> float | None:
    """Highest true-positive rate among thresholds whose false-positive rate is <= `fpr` (ties in
    the score move together, as in ``roc_curve``); None with one class. With fewer than 1/fpr
    deploy samples, this is the TPR at zero false positives."""
    from sklearn.metrics import roc_curve  # sklearn: ~1.4 s, not at CLI start-up

    y, s = np.asarray(y, dtype=int), np.asarray(s, dtype=float)
    if len(y) == 0 or y.min() == y.max():
        return None
    f, tp, _ = roc_curve(y, s, drop_intermediate=False)
    return float(tp[f <= fpr + 1e-12].max())


def tpr_fpr_at(y: Sequence[int], s: Sequence[float], fpr: float) -> tuple[float | None, float | None]:
    """(TPR, FPR reached) at the threshold :func:`tpr_at_fpr` picks: the highest TPR whose FPR is
    <= `fpr`, and, among thresholds giving it, the lowest FPR (the FPR that threshold really has,
    often below the nominal `fpr`)."""
    from sklearn.metrics import roc_curve  # sklearn: ~1.4 s, not at CLI start-up

    y, s = np.asarray(y, dtype=int), np.asarray(s, dtype=float)
    if len(y) == 0 or y.min() == y.max():
        return None, None
    f, tp, _ = roc_curve(y, s, drop_intermediate=False)
    ok = f <= fpr + 1e-12
    best = float(tp[ok].max())
    return best, float(f[ok & (tp == best)].min())


def binomial_ci(k: int, n: int, alpha: float = 0.05) -> tuple[float, float] | None:
    """Clopper-Pearson (exact) interval of a proportion k/n; None without trials. 0 of 48 false
    positives still allows an FPR up to 7.4% (two-sided 95%)."""
    from scipy.stats import beta  # scipy: ~0.5 s, not at CLI start-up

    if n <= 0:
        return None
    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return lo, hi


#: The rule of :func:`precision_ci`, in words.
PRECISION_RULE = "exact (Clopper-Pearson) limits of TPR and FPR taken together, samples counted as independent"


def precision_ci(tp: int, n_pos: int, fp: int, n_neg: int, base_rate: float
                 ) -> tuple[float, float] | None:
    """An interval of the precision at `base_rate` from exact intervals of TPR (tp/n_pos) and FPR
    (fp/n_neg): lowest TPR with highest FPR, highest TPR with lowest FPR (conservative: each
    proportion at its own 95% limit; samples taken as independent)."""
    t, f = binomial_ci(tp, n_pos), binomial_ci(fp, n_neg)
    if t is None or f is None:
        return None
    lo, hi = precision_at(t[0], f[1], base_rate), precision_at(t[1], f[0], base_rate)
    return (lo if lo is not None else 0.0, hi if hi is not None else 1.0)


def precision_at(tpr: float | None, fpr: float | None, base_rate: float) -> float | None:
    """Precision (share of "eval" calls that are evaluations) when evaluations make up
    `base_rate` of the traffic, for a detector with the given TPR and FPR."""
    if tpr is None or fpr is None:
        return None
    pos = tpr * base_rate
    den = pos + fpr * (1.0 - base_rate)
    return float(pos / den) if den > 0 else None


def cluster_robust_slope(x: Sequence[float], y: Sequence[float], groups: Sequence[Any]
                         ) -> tuple[float | None, float | None, float | None]:
    """OLS slope of y on x with a cluster-robust (CR1 sandwich) standard error and its two-sided
    p-value from a t distribution with G - 1 degrees of freedom (G = number of clusters), so
    samples of one cluster are not counted as independent evidence. (slope, se, p); Nones when
    x is constant or there are fewer than 3 clusters."""
    from scipy import stats  # scipy: ~0.5 s, not at CLI start-up

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    _, gix = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
    n, G = len(x), int(gix.max()) + 1 if len(x) else 0
    xm = x - x.mean() if n else x
    sxx = float(xm @ xm) if n else 0.0
    if n < 3 or G < 3 or sxx == 0:
        return None, None, None
    slope = float(xm @ (y - y.mean()) / sxx)
    resid = (y - y.mean()) - slope * xm
    X = np.column_stack([np.ones(n), x])
    bread = np.linalg.inv(X.T @ X)
    S = np.zeros((G, 2))
    np.add.at(S, gix, X * resid[:, None])
    meat = S.T @ S * (G / (G - 1)) * ((n - 1) / (n - 2))
    se = float(math.sqrt(max((bread @ meat @ bread)[1, 1], 0.0)))
    if se == 0:
        return slope, 0.0, 0.0 if slope else 1.0
    return slope, se, float(2 * stats.t.sf(abs(slope / se), G - 1))
