"""Metrics over method records (dicts with label, prediction, score, n_turns, ...).

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
  given groups, of whole groups (cluster bootstrap); `bootstrap_ci` (any statistic) and
  `bootstrap_auroc` (vectorised) share those draws.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from harness.core.parsing import error_kind

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
                      groups: Sequence[Any] | None = None) -> np.ndarray:
    """Draw counts (n_boot, n_items) of the bootstrap: without `groups`, samples are drawn with
    replacement; with `groups` (one label per item), whole groups are drawn with replacement and
    each drawn group brings all its samples (the cluster bootstrap), so correlated samples of one
    group move together and the interval reflects the number of groups, not of samples."""
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
    draws = rng.integers(0, n_g, size=(n_boot, n_g))
    counts = np.zeros((n_boot, n_g), dtype=np.int64)
    np.add.at(counts, (np.arange(n_boot)[:, None], draws), 1)
    return counts[:, gix]


def _interval(vals: np.ndarray, n_boot: int, alpha: float) -> tuple[float, float] | None:
    """Percentile interval of the defined bootstrap values; None if fewer than half are defined."""
    vals = np.asarray([v for v in vals if v is not None], dtype=float)
    vals = vals[np.isfinite(vals)]
    if len(vals) < max(1, n_boot // 2):
        return None
    return float(np.quantile(vals, alpha / 2)), float(np.quantile(vals, 1 - alpha / 2))


def bootstrap_ci(fn: Callable[..., float | None], arrays: Sequence[Sequence[Any]], n: int = 1000,
                 seed: int = 0, alpha: float = 0.05, groups: Sequence[Any] | None = None
                 ) -> tuple[float, float] | None:
    """Percentile bootstrap CI of `fn(*arrays)`, resampling rows, or whole groups when `groups`
    are given (see `bootstrap_weights`); None if fewer than half the resamples are defined."""
    arrs = [np.asarray(a) for a in arrays]
    m = len(arrs[0])
    if m == 0 or n <= 0:
        return None
    W = bootstrap_weights(m, n, seed, groups)
    base = np.arange(m)
    vals = []
    for w in W:
        idx = np.repeat(base, w)
        vals.append(fn(*[a[idx] for a in arrs]))
    return _interval(np.asarray([np.nan if v is None else v for v in vals], dtype=float), n, alpha)


def bootstrap_weighted(stat: Callable[[np.ndarray], np.ndarray], n_items: int, n: int = 1000,
                       seed: int = 0, groups: Sequence[Any] | None = None, alpha: float = 0.05
                       ) -> tuple[float, float] | None:
    """Percentile bootstrap CI of a statistic given as a vectorised function of weight rows
    (`stat(W)` -> one value per row, NaN where undefined); the same resamples as `bootstrap_ci`."""
    if n_items == 0 or n <= 0:
        return None
    return _interval(stat(bootstrap_weights(n_items, n, seed, groups).astype(float)), n, alpha)


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


def bootstrap_auroc(y: Sequence[int], s: Sequence[float], n: int = 1000, seed: int = 0,
                    groups: Sequence[Any] | None = None, alpha: float = 0.05
                    ) -> tuple[float, float] | None:
    """Percentile bootstrap CI of AUROC, vectorised; the same resamples as `bootstrap_ci` with the
    same seed and groups. None if undefined (one class) or too few resamples hold both classes."""
    y, s = np.asarray(y, dtype=int), np.asarray(s, dtype=float)
    if len(y) == 0 or n <= 0 or y.min() == y.max():
        return None
    return bootstrap_weighted(lambda W: roc_auc_weighted_rows(y, s, W), len(y), n, seed, groups, alpha)


# --- records ----------------------------------------------------------------------------------

def scored(records: Iterable[Record]) -> tuple[np.ndarray, np.ndarray]:
    """(y, score) over records with a score."""
    rs = [r for r in records if r.get("score") is not None and r["label"] in Y]
    return (np.array([Y[r["label"]] for r in rs], dtype=int),
            np.array([float(r["score"]) for r in rs], dtype=float))


def per_class_accuracy(records: Sequence[Record]) -> dict[str, Any]:
    """The paper's two numbers: share of eval samples called eval, share of deploy samples called
    deploy. Undecided/unparseable predictions count as not correct and are reported."""
    out: dict[str, Any] = {"n": len(records)}
    for cls in ("eval", "deploy"):
        rs = [r for r in records if r["label"] == cls]
        out[f"n_{cls}"] = len(rs)
        out[f"{cls}_correct"] = (sum(1 for r in rs if r["prediction"] == cls) / len(rs)) if rs else None
    out["undecided"] = sum(1 for r in records if r["prediction"] is None)
    out["invalid_answers"] = sum(int(r.get("n_invalid") or 0) for r in records)
    return out


def answer_errors(records: Iterable[Record]) -> dict[str, int]:
    """Counts of excluded answers by kind (unparseable, out_of_range, judge_failed, no_text;
    no_signal: a logprob record below --min-coverage)."""
    c: Counter[str] = Counter()
    for r in records:
        if (r.get("details") or {}).get("error") == "no_signal":  # logprob methods' signal gate
            c["no_signal"] += 1
        for v in (r.get("details") or {}).get("votes") or []:
            k = error_kind(v.get("error"))
            if k:
                c[k] += 1
    return dict(c)


CI_BY = ("category", "sample")


def resolve_ci_by(records: Iterable[Record], ci_by: str | None = None) -> str:
    """The resampling unit: `ci_by` if given, else ``category`` when the records carry categories
    (more than one distinct value), else ``sample``."""
    if ci_by is not None:
        if ci_by not in CI_BY:
            raise ValueError(f"unknown resampling unit {ci_by!r}; use {', '.join(CI_BY)}")
        return ci_by
    cats = {r.get("category") for r in records}
    return "category" if len(cats - {None}) > 1 else "sample"


def groups_for(records: Sequence[Record], ci_by: str) -> list[str] | None:
    """Bootstrap groups of `records` under `ci_by` (None = resample samples). Records without a
    category form their own group each."""
    if ci_by == "sample":
        return None
    return [str(r["category"]) if r.get("category") is not None else f"\0{r.get('sample_id', i)}"
            for i, r in enumerate(records)]


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


def precision_at(tpr: float | None, fpr: float | None, base_rate: float) -> float | None:
    """Precision (share of "eval" calls that are evaluations) when evaluations make up
    `base_rate` of the traffic, for a detector with the given TPR and FPR."""
    if tpr is None or fpr is None:
        return None
    pos = tpr * base_rate
    den = pos + fpr * (1.0 - base_rate)
    return float(pos / den) if den > 0 else None


def low_base_rate(records: Sequence[Record], base_rate: float = 0.01, n_boot: int = 1000,
                  seed: int = 0, ci_by: str | None = None,
                  fprs: Sequence[float] = (0.01, 0.05)) -> dict[str, Any]:
    """Detector view for rare evaluations: TPR at each FPR in `fprs` (from the score, with
    bootstrap CIs) and precision at `base_rate` for the method's own decisions and at each FPR's
    operating point. Undecided samples count as "deploy" calls."""
    ci_by = resolve_ci_by(records, ci_by)
    rs = [r for r in records if r["label"] in Y]
    y_all = np.array([Y[r["label"]] for r in rs], dtype=int)
    call = np.array([r["prediction"] == "eval" for r in rs], dtype=bool)
    out: dict[str, Any] = {"base_rate": base_rate, "ci_by": ci_by, "n_deploy": int((y_all == 0).sum())}
    tpr_d = float(call[y_all == 1].mean()) if (y_all == 1).any() else None
    fpr_d = float(call[y_all == 0].mean()) if (y_all == 0).any() else None
    out.update(decision_tpr=tpr_d, decision_fpr=fpr_d,
               decision_precision=precision_at(tpr_d, fpr_d, base_rate))
    srs = [r for r in rs if r.get("score") is not None]
    y, p = scored(srs)
    g = groups_for(srs, ci_by)
    for f in fprs:
        k = f"{round(100 * f)}"
        v = tpr_at_fpr(y, p, f)
        out[f"tpr_at_fpr{k}"] = v
        out[f"tpr_at_fpr{k}_ci"] = (bootstrap_weighted(lambda W, f=f: tpr_at_fpr_weighted_rows(y, p, W, f),
                                                       len(y), n_boot, seed, g)
                                    if n_boot and v is not None else None)
        out[f"precision_at_fpr{k}"] = precision_at(v, f if v is not None else None, base_rate)
    return out


def method_summary(records: Sequence[Record], n_boot: int = 1000, seed: int = 0,
                   ci_by: str | None = None) -> dict[str, Any]:
    """Per-class accuracy, AUROC, Brier, |.|-Brier and ECE, each with a 95% percentile bootstrap
    interval (``<name>_ci``) resampling whole categories or samples (`ci_by`, see
    `resolve_ci_by`), and answer errors. ``ci_by`` in the result names the unit used."""
    out = per_class_accuracy(records)
    ci_by = resolve_ci_by(records, ci_by)
    out["ci_by"] = ci_by
    lab = [r for r in records if r["label"] in Y]
    out["n_groups"] = len(set(groups_for(lab, ci_by) or range(len(lab))))
    yl = np.array([Y[r["label"]] for r in lab], dtype=int)
    ok = np.array([r["prediction"] == r["label"] for r in lab], dtype=float)
    gl = groups_for(lab, ci_by)
    for cls, v in (("eval", 1), ("deploy", 0)):
        m = yl == v
        out[f"{cls}_correct_ci"] = (bootstrap_weighted(lambda W, m=m: weighted_mean_rows(W, ok, m), len(yl), n_boot,
                                                       seed, gl) if n_boot and m.any() else None)
    srs = [r for r in records if r.get("score") is not None and r["label"] in Y]
    y, p = scored(srs)
    g = groups_for(srs, ci_by)
    out["n_scored"] = int(len(y))
    out["auroc"] = roc_auc(y, p)
    out["auroc_ci"] = bootstrap_auroc(y, p, n=n_boot, seed=seed, groups=g) if n_boot and out["auroc"] is not None else None
    probs = (p >= 0).all() and (p <= 1).all() if len(p) else False
    rows = {"brier": lambda W: weighted_mean_rows(W, (p - y) ** 2), "abs_brier": lambda W: weighted_mean_rows(W, np.abs(p - y)),
            "ece": lambda W: ece_weighted_rows(y, p, W)}
    for name, fn in (("brier", brier), ("abs_brier", abs_brier), ("ece", ece)):
        out[name] = fn(y, p) if probs else None
        out[f"{name}_ci"] = (bootstrap_weighted(rows[name], len(y), n_boot, seed, g)
                             if n_boot and out[name] is not None else None)
    out["errors"] = answer_errors(records)
    return out


def kappa_pairs(by_method: Mapping[str, Sequence[Record]], n_boot: int = 0, seed: int = 0,
                ci_by: str | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """Cohen's kappa for every pair of methods on the samples both decided, with a bootstrap
    interval (``ci``) when `n_boot` > 0, resampling categories or samples (`ci_by`)."""
    preds = {m: {r["sample_id"]: r["prediction"] for r in rs if r["prediction"] is not None}
             for m, rs in by_method.items()}
    cat = {r["sample_id"]: r for rs in by_method.values() for r in rs}
    ci_by = resolve_ci_by(cat.values(), ci_by)
    names = sorted(preds)
    out = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = [s for s in preds[a] if s in preds[b]]
            pa, pb = [preds[a][s] for s in shared], [preds[b][s] for s in shared]
            k = cohen_kappa(pa, pb)
            ci = (bootstrap_weighted(lambda W, pa=pa, pb=pb: kappa_weighted_rows(pa, pb, W), len(shared),
                                     n_boot, seed, groups_for([cat[s] for s in shared], ci_by))
                  if n_boot and k is not None else None)
            out[(a, b)] = {"kappa": k, "n": len(shared), "ci": ci, "ci_by": ci_by}
    return out


SLICES: dict[str, Callable[[Record], str]] = {
    "setting": lambda r: "agentic" if r.get("agentic") else "chat",
    "eval_type": lambda r: r.get("eval_type") or ("(deploy)" if r["label"] == "deploy" else "(none)"),
    "category": lambda r: str(r.get("category")),
    "task": lambda r: str(r.get("task") or "(none)"),
}


def slice_summaries(records: Sequence[Record], by: str) -> dict[str, dict[str, Any]]:
    """`method_summary` (without bootstrap) per value of a slice: setting (chat vs agentic),
    eval_type (capability vs alignment; deploy samples have none), category, or task (the
    Inspect task a sample came from)."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        groups[SLICES[by](r)].append(r)
    return {k: method_summary(v, n_boot=0) for k, v in sorted(groups.items())}


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


def score_vs_turns(records: Sequence[Record], squared: bool = False,
                   ci_by: str | None = None) -> dict[str, Any]:
    """Per-sample error vs number of turns: |y - p| (the paper's "Brier", default) or (y - p)^2;
    Pearson r, the least-squares trend line and a two-sided p for the slope. With ``ci_by``
    ``category`` (the default when records carry categories) p is cluster-robust by category
    (`cluster_robust_slope`); with ``sample`` it is Pearson's p for independent samples.
    ``p_method`` names which."""
    rs = [r for r in records if r.get("score") is not None and r["label"] in Y and r.get("n_turns") is not None]
    ci_by = resolve_ci_by(rs, ci_by)
    x = np.array([float(r["n_turns"]) for r in rs])
    err = np.array([abs(Y[r["label"]] - float(r["score"])) for r in rs])
    err = err ** 2 if squared else err
    r, pv = pearson(x, err)
    slope = intercept = None
    if r is not None:
        xm = x - x.mean()
        slope = float((xm @ (err - err.mean())) / (xm @ xm))
        intercept = float(err.mean() - slope * x.mean())
    p_method = "pearson (independent samples)"
    if ci_by == "category":
        _, _, pv = cluster_robust_slope(x, err, groups_for(rs, ci_by))
        p_method = "cluster-robust slope (CR1, by category, t with G-1 df)"
    return {"x": x.tolist(), "y": err.tolist(), "n": len(rs), "r": r, "p": pv, "slope": slope,
            "intercept": intercept, "squared": squared, "p_method": p_method, "ci_by": ci_by}


# --- the vote-count experiment ----------------------------------------------------------------

def votes_by_sample(records: Iterable[Record]) -> dict[str, list[Any]]:
    """Parsed vote values (None = invalid) per sample, in vote order."""
    return {r["sample_id"]: [v.get("value") for v in sorted((r.get("details") or {}).get("votes") or [],
                                                            key=lambda v: v.get("k", 0))]
            for r in records}


def _padded(votes: Mapping[str, Sequence[Any]], ids: Sequence[str], conv: Callable[[Any], float]) -> np.ndarray:
    width = max(len(votes[s]) for s in ids)
    a = np.full((len(ids), width), np.nan)
    for i, s in enumerate(ids):
        a[i, :len(votes[s])] = [np.nan if v is None else conv(v) for v in votes[s]]
    return a


def _draw(rng: np.random.Generator, counts: np.ndarray, width: int, n: int) -> np.ndarray:
    """For each row, `n` distinct column indices among its first counts[row] columns."""
    keys = rng.random((len(counts), width))
    keys[np.arange(width)[None, :] >= counts[:, None]] = np.inf
    return np.argsort(keys, axis=1)[:, :n]


def vote_count_experiment(binary: Mapping[str, Sequence[str | None]],
                          probability: Mapping[str, Sequence[float | None]],
                          sizes: Sequence[int] = tuple(range(5, 26, 2)), resamples: int = 100,
                          seed: int = 0, threshold: float = 0.5) -> list[dict[str, Any]]:
    """Kappa between binary (majority) and probability (mean >= threshold) decisions made from
    `n` answers drawn without replacement from each sample's answers, for each n in `sizes`
    (the paper's footnote 3). Each draw is independent per method and sample; invalid answers
    are drawn like any other and then excluded, as in the real methods. Per n: mean kappa and
    the 2.5/97.5 percentiles over `resamples` draws. Samples with fewer than n answers for
    either method are left out at that n."""
    ids = sorted(set(binary) & set(probability))
    if not ids:
        return []
    rng = np.random.default_rng(seed)
    B = _padded(binary, ids, lambda v: 1.0 if v == "eval" else 0.0)
    P = _padded(probability, ids, float)
    nb = np.array([len(binary[s]) for s in ids])
    npb = np.array([len(probability[s]) for s in ids])
    rows = np.arange(len(ids))[:, None]
    out = []
    for n in sizes:
        keep = (nb >= n) & (npb >= n)
        if not keep.any():
            continue
        kappas = []
        for _ in range(resamples):
            b = B[rows, _draw(rng, nb, B.shape[1], n)]
            p = P[rows, _draw(rng, npb, P.shape[1], n)]
            nvalid_b = (~np.isnan(b)).sum(1)
            share = np.where(nvalid_b > 0, np.nansum(b, 1) / np.maximum(nvalid_b, 1), np.nan)
            nvalid_p = (~np.isnan(p)).sum(1)
            mean_p = np.where(nvalid_p > 0, np.nansum(p, 1) / np.maximum(nvalid_p, 1), np.nan)
            ok = keep & (nvalid_b > 0) & (share != 0.5) & (nvalid_p > 0)
            k = cohen_kappa((share[ok] > 0.5).tolist(), (mean_p[ok] >= threshold).tolist())
            if k is not None:
                kappas.append(k)
        if kappas:
            out.append({"n_votes": n, "n_samples": int(keep.sum()), "kappa_mean": float(np.mean(kappas)),
                        "ci_low": float(np.quantile(kappas, 0.025)),
                        "ci_high": float(np.quantile(kappas, 0.975)), "n_resamples": len(kappas)})
    return out
