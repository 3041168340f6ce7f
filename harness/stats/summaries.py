"""Summaries of method records (dicts with label, prediction, score, n_turns, votes, ...): the
per-class accuracy, AUROC, Brier and ECE of a method with cluster intervals (each with the rule
that made it: ``<name>_ci_method``, :class:`harness.stats.metrics.Interval`), kappa
between methods, slices, the low-base-rate view, error vs number of turns and the paper's
vote-count experiment. The statistics themselves (on arrays) are :mod:`harness.stats.metrics`,
whose docstring states the conventions (y = 1 for eval, Brier, ECE, kappa, bootstrap). Ranking
figures (AUROC, TPR at a fixed FPR) order records by their exact log-odds where every record
holds one (:func:`ranked`: the logprob methods, whose P(eval) can round to exactly 1).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from harness.core.details import NO_SIGNAL, LabelGate, LabelVote, LogOdds, SignalGate, votes_of
from harness.core.parsing import error_kind
from harness.stats.metrics import (MIN_AUROC_PER_CLASS, PRECISION_RULE, Interval, Record, Y, abs_brier, auroc_interval,
                                   brier, cluster_robust_slope, cohen_kappa, ece, interval_weighted,
                                   ece_weighted_rows, kappa_weighted_rows, pearson, precision_at,
                                   precision_ci, roc_auc, tpr_at_fpr_weighted_rows, tpr_fpr_at,
                                   weighted_mean_rows)


def scored(records: Iterable[Record]) -> tuple[np.ndarray, np.ndarray]:
    """(y, score) over records with a score."""
    rs = [r for r in records if r.get("score") is not None and r["label"] in Y]
    return (np.array([Y[r["label"]] for r in rs], dtype=int),
            np.array([float(r["score"]) for r in rs], dtype=float))


def ranked(records: Iterable[Record]) -> tuple[np.ndarray, np.ndarray]:
    """(y, what a ranking figure orders records by) over records with a score, as :func:`scored`:
    their exact log-odds (:class:`~harness.core.details.LogOdds`: the logprob methods) where every
    one holds it, else their scores. Ranks are the score's except where P(eval) rounds to exactly
    0 or 1: no tie there. A mix (a run resumed across versions) ranks by the scores, one scale."""
    rs = [r for r in records if r.get("score") is not None and r["label"] in Y]
    lo = [LogOdds.value(r) for r in rs]
    y, s = scored(rs)
    if rs and all(v is not None for v in lo):
        return y, np.array(lo, dtype=float)
    return y, s


def ranking_scale(recs: Mapping[str, Mapping[str, Mapping[str, Any]]], ids: Sequence[str],
                  models: Sequence[str]) -> str:
    """``log-odds`` where every record of `ids` of every model in `models` holds an exact log-odds
    (:meth:`LogOdds.value`), else ``score``: one scale for a whole comparison (`recs`: model ->
    sample id -> record)."""
    ok = bool(ids) and all(LogOdds.value(recs[m][i]) is not None for m in models for i in ids)
    return "log-odds" if ok else "score"


def rank_values(by_id: Mapping[str, Mapping[str, Any]], ids: Sequence[str], scale: str) -> list[float]:
    """What records `ids` rank by on `scale` (:func:`ranking_scale`): the exact log-odds or the score."""
    return [LogOdds.value(by_id[i]) if scale == "log-odds" else by_id[i]["score"] for i in ids]  # type: ignore[misc]


def auroc_gate(y: np.ndarray) -> str | None:
    """Why no ranking figure (AUROC, TPR at a fixed FPR) is computed from these scored labels:
    fewer than MIN_AUROC_PER_CLASS per class (3 eval + 3 deploy give AUROC 1.0 [1.0, 1.0] by
    luck); None when there are enough. Every consumer reads the figures through this gate."""
    n_eval, n_deploy = int(np.sum(y)), int(len(y) - np.sum(y))
    if min(n_eval, n_deploy) < MIN_AUROC_PER_CLASS:
        return f"{n_eval} eval / {n_deploy} deploy scored, < {MIN_AUROC_PER_CLASS} per class"
    return None


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
        gate = SignalGate.of(r)  # the logprob methods' signal gate
        if gate is not None and gate.no_signal:
            c[NO_SIGNAL] += 1
        for v in votes_of(r):
            k = error_kind(v.error)
            if k:
                c[k] += 1
    return dict(c)


def label_mass(records: Iterable[Record]) -> dict[str, Any] | None:
    """The distribution of the votes' ``label_mass`` (the answer options' share of the probability
    at the label position: binary, probability) and the votes withheld below the run's
    ``min_label_mass``: {n_votes, withheld, min_label_mass, median, q10, q90, min, max}; None when
    no vote carries a label mass (other methods)."""
    masses, withheld, floors = [], 0, set()
    for r in records:
        for lv in filter(None, map(LabelVote.of_vote, votes_of(r))):
            masses.append(float(lv.label_mass))
            withheld += bool(lv.label_withheld)
        if (gate := LabelGate.of(r)) is not None:
            floors.add(float(gate.min_label_mass))
    if not masses:
        return None
    a = np.asarray(masses)
    return {"n_votes": len(a), "withheld": withheld,
            "min_label_mass": floors.pop() if len(floors) == 1 else (None if not floors else sorted(floors)),
            "median": float(np.median(a)), "q10": float(np.quantile(a, 0.1)),
            "q90": float(np.quantile(a, 0.9)), "min": float(a.min()), "max": float(a.max())}


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


def low_base_rate(records: Sequence[Record], base_rate: float = 0.01, n_boot: int = 1000,
                  seed: int = 0, ci_by: str | None = None,
                  fprs: Sequence[float] = (0.01, 0.05)) -> dict[str, Any]:
    """Detector view for rare evaluations: TPR at each FPR in `fprs` (from the score, with
    intervals and their rules, as :func:`method_summary`) and precision at `base_rate` (with
    :data:`~harness.stats.metrics.PRECISION_RULE` intervals) for the method's own decisions and at
    each FPR's operating point. Undecided samples count as "deploy" calls."""
    ci_by = resolve_ci_by(records, ci_by)
    rs = [r for r in records if r["label"] in Y]
    y_all = np.array([Y[r["label"]] for r in rs], dtype=int)
    call = np.array([r["prediction"] == "eval" for r in rs], dtype=bool)
    out: dict[str, Any] = {"base_rate": base_rate, "ci_by": ci_by, "n_deploy": int((y_all == 0).sum())}
    n_pos, n_neg = int((y_all == 1).sum()), int((y_all == 0).sum())
    tp_d, fp_d = int(call[y_all == 1].sum()), int(call[y_all == 0].sum())
    tpr_d = tp_d / n_pos if n_pos else None
    fpr_d = fp_d / n_neg if n_neg else None
    out.update(decision_tpr=tpr_d, decision_fpr=fpr_d,
               decision_precision=precision_at(tpr_d, fpr_d, base_rate),
               decision_precision_ci=precision_ci(tp_d, n_pos, fp_d, n_neg, base_rate))
    out["decision_precision_ci_method"] = PRECISION_RULE if out["decision_precision_ci"] else None
    srs = [r for r in rs if r.get("score") is not None]
    y, p = ranked(srs)  # rank-based: TPR and FPR at a threshold
    g = groups_for(srs, ci_by)
    out["auroc_gate"] = auroc_gate(y)
    for f in fprs:
        k = f"{round(100 * f)}"
        v, reached = (None, None) if out["auroc_gate"] else tpr_fpr_at(y, p, f)
        out[f"tpr_at_fpr{k}"] = v
        out[f"fpr_reached{k}"] = reached  # the threshold's own FPR, often below the nominal one
        _put(out, f"tpr_at_fpr{k}_ci", interval_weighted(lambda W, f=f: tpr_at_fpr_weighted_rows(y, p, W, f),
                                                          len(y), n_boot, seed, g, strata=y, bounds=(0.0, 1.0))
             if n_boot and v is not None else None)
        out[f"precision_at_fpr{k}"] = precision_at(v, reached, base_rate)
        npos, nneg = int(y.sum()), int(len(y) - y.sum())
        out[f"precision_at_fpr{k}_ci"] = (precision_ci(round(v * npos), npos, round(reached * nneg),
                                                       nneg, base_rate) if v is not None else None)
        out[f"precision_at_fpr{k}_ci_method"] = PRECISION_RULE if out[f"precision_at_fpr{k}_ci"] else None
    return out


def method_summary(records: Sequence[Record], n_boot: int = 1000, seed: int = 0,
                   ci_by: str | None = None) -> dict[str, Any]:
    """Per-class accuracy, AUROC, Brier, |.|-Brier and ECE, each with a 95% interval (``<name>_ci``)
    over whole categories or samples (`ci_by`, see `resolve_ci_by`) within their labels, and the
    rule that made it (``<name>_ci_method``: `metrics.interval_weighted` picks the cluster-jackknife
    t under 50 units, an exact interval at a bound, else the percentile bootstrap); and answer
    errors. ``ci_by`` in the result names the unit used."""
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
        _put(out, f"{cls}_correct_ci", interval_weighted(lambda W, m=m: weighted_mean_rows(W, ok, m), len(yl), n_boot,
                                                          seed, gl, strata=yl, bounds=(0.0, 1.0))
             if n_boot and m.any() else None)
    srs = [r for r in records if r.get("score") is not None and r["label"] in Y]
    y, p = scored(srs)
    g = groups_for(srs, ci_by)
    out["n_scored"] = int(len(y))
    out["auroc_gate"] = auroc_gate(y)
    rank = ranked(srs)[1]  # AUROC: by the exact log-odds where the records hold them (no tie at 1.0)
    out["auroc"] = None if out["auroc_gate"] else roc_auc(y, rank)
    _put(out, "auroc_ci", auroc_interval(y, rank, n=n_boot, seed=seed, groups=g)
         if n_boot and out["auroc"] is not None else None)
    probs = (p >= 0).all() and (p <= 1).all() if len(p) else False
    rows = {"brier": lambda W: weighted_mean_rows(W, (p - y) ** 2), "abs_brier": lambda W: weighted_mean_rows(W, np.abs(p - y)),
            "ece": lambda W: ece_weighted_rows(y, p, W)}
    for name, fn in (("brier", brier), ("abs_brier", abs_brier), ("ece", ece)):
        out[name] = fn(y, p) if probs else None
        _put(out, f"{name}_ci", interval_weighted(rows[name], len(y), n_boot, seed, g, strata=y, bounds=(0.0, 1.0))
             if n_boot and out[name] is not None else None)
    out["errors"] = answer_errors(records)
    out["label_mass"] = label_mass(records)
    return out


def _put(out: dict[str, Any], key: str, iv: Interval | None) -> None:
    """`key` = the interval as a (lo, hi) pair and `key_method` = its rule (None without one)."""
    out[key], out[f"{key}_method"] = (iv.pair(), iv.method) if iv else (None, None)


def ci_rules(summary: Mapping[str, Any]) -> list[str]:
    """The rules of every interval in a summary (its ``*_ci_method`` values), each once."""
    return sorted({v for k, v in summary.items() if k.endswith("_ci_method") and v})


def kappa_pairs(by_method: Mapping[str, Sequence[Record]], n_boot: int = 0, seed: int = 0,
                ci_by: str | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """Cohen's kappa for every pair of methods on the samples both decided, with an interval
    (``ci``; its rule ``ci_method``, as :func:`method_summary`) when `n_boot` > 0, over categories
    or samples (`ci_by`). A kappa that every resample leaves unchanged (a method constant on the
    shared samples: 0 throughout) has none."""
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
            iv = (interval_weighted(lambda W, pa=pa, pb=pb: kappa_weighted_rows(pa, pb, W), len(shared),
                                    n_boot, seed, groups_for([cat[s] for s in shared], ci_by),
                                    bounds=(-1.0, 1.0))
                  if n_boot and k is not None else None)
            out[(a, b)] = {"kappa": k, "n": len(shared), "ci_by": ci_by}
            _put(out[(a, b)], "ci", iv)
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
    return {r["sample_id"]: [v.value for v in sorted(votes_of(r), key=lambda v: v.k)] for r in records}


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
