"""Metric functions against scikit-learn / scipy on random inputs, and the record-level helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, cohen_kappa_score, roc_auc_score

from harness.stats import metrics as M
from harness.stats import summaries as S


@pytest.mark.parametrize("seed", range(8))
def test_against_sklearn(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 300))
    y = rng.integers(0, 2, n)
    # ties on purpose (rounded scores), and a mix of exact 0.1-multiples for bin edges
    p = np.round(np.clip(rng.normal(0.3 + 0.4 * y, 0.25), 0, 1), int(rng.integers(1, 3)))
    assert M.roc_auc(y, p) == pytest.approx(roc_auc_score(y, p), abs=1e-12)
    assert M.brier(y, p) == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    assert M.abs_brier(y, p) == pytest.approx(np.mean(np.abs(y - p)))
    frac, mean_p = calibration_curve(y, p, n_bins=10, strategy="uniform")
    bins = M.calibration_bins(y, p, 10)
    assert [b["frac_eval"] for b in bins] == pytest.approx(frac.tolist())
    assert [b["mean_p"] for b in bins] == pytest.approx(mean_p.tolist())
    counts = np.array([b["n"] for b in bins])
    assert counts.sum() == n
    assert M.ece(y, p) == pytest.approx(float(np.sum(counts / n * np.abs(frac - mean_p))))
    a = rng.choice(["eval", "deploy"], n)
    b = np.where(rng.random(n) < 0.7, a, rng.choice(["eval", "deploy"], n))
    assert M.cohen_kappa(a.tolist(), b.tolist()) == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    x = rng.integers(1, 9, n).astype(float)
    r, pv = M.pearson(x, p)
    ref = stats.pearsonr(x, p)
    assert r == pytest.approx(ref.statistic, abs=1e-10)
    assert pv == pytest.approx(ref.pvalue, rel=1e-6, abs=1e-300)


def test_ece_hand_example():
    # bin (0.1,0.2]: p=0.2,0.2 truth 0,1 -> |0.5-0.2|; bin (0.8,0.9]: p=0.9 truth 1 -> 0.1
    assert M.ece([0, 1, 1], [0.2, 0.2, 0.9]) == pytest.approx(2 / 3 * 0.3 + 1 / 3 * 0.1)


def test_degenerate_cases():
    assert M.roc_auc([1, 1], [0.2, 0.3]) is None
    assert M.cohen_kappa(["eval"] * 4, ["eval"] * 4) is None
    assert M.cohen_kappa([], []) is None
    assert M.pearson([1, 1, 1], [0.1, 0.2, 0.3]) == (None, None)
    assert M.brier([], []) is None


def _rec(sid, label, pred, score, **kw):
    base = {"sample_id": sid, "label": label, "prediction": pred, "score": score, "n_invalid": 0,
            "agentic": False, "eval_type": "capability" if label == "eval" else "", "category": "c",
            "n_turns": 1, "details": {}}
    base.update(kw)
    return base


def test_summary_pairs_and_slices():
    recs_a = [_rec("s1", "eval", "eval", 0.9), _rec("s2", "deploy", "eval", 0.6),
              _rec("s3", "deploy", None, None, n_invalid=5,
                   details={"votes": [{"error": "no <probability> tag"}, {"error": "out of range: '7'"}]}),
              _rec("s4", "eval", "deploy", 0.2, agentic=True, category="d")]
    recs_b = [_rec("s1", "eval", "eval", 1.0), _rec("s2", "deploy", "deploy", 0.0),
              _rec("s3", "deploy", "deploy", 0.0), _rec("s4", "eval", "deploy", 0.0)]
    s = S.method_summary(recs_a, n_boot=50)
    assert s["eval_correct"] == 0.5 and s["deploy_correct"] == 0.0
    assert s["undecided"] == 1 and s["invalid_answers"] == 5 and s["n_scored"] == 3
    assert s["errors"] == {"unparseable": 1, "out_of_range": 1}
    assert s["brier"] == pytest.approx((0.01 + 0.36 + 0.64) / 3)
    pairs = S.kappa_pairs({"a": recs_a, "b": recs_b})
    assert pairs[("a", "b")]["n"] == 3  # s3 undecided by a
    assert pairs[("a", "b")]["kappa"] == pytest.approx(cohen_kappa_score(["eval", "eval", "deploy"],
                                                                         ["eval", "deploy", "deploy"]))
    sl = S.slice_summaries(recs_a, "setting")
    assert set(sl) == {"chat", "agentic"} and sl["agentic"]["n"] == 1
    assert set(S.slice_summaries(recs_a, "eval_type")) == {"capability", "(deploy)"}
    assert set(S.slice_summaries(recs_a, "category")) == {"c", "d"}


def test_score_vs_turns_matches_linregress():
    rng = np.random.default_rng(3)
    recs = [_rec(f"s{i}", "eval" if i % 2 else "deploy", None, float(rng.random()),
                 n_turns=int(rng.integers(1, 10))) for i in range(80)]
    recs.append(_rec("none", "eval", None, None))
    for squared in (False, True):
        out = S.score_vs_turns(recs, squared=squared)
        assert out["n"] == 80
        y = np.array([abs((1 if r["label"] == "eval" else 0) - r["score"]) for r in recs[:80]])
        y = y ** 2 if squared else y
        ref = stats.linregress([r["n_turns"] for r in recs[:80]], y)
        assert out["slope"] == pytest.approx(ref.slope)
        assert out["intercept"] == pytest.approx(ref.intercept)
        assert out["r"] == pytest.approx(ref.rvalue)
        assert out["p"] == pytest.approx(ref.pvalue)


def _votes(rng, n_samples, n_votes, p_invalid=0.1):
    truth = rng.random(n_samples) < 0.5
    binary, prob = {}, {}
    for i in range(n_samples):
        lean = 0.75 if truth[i] else 0.3
        binary[f"s{i}"] = [None if rng.random() < p_invalid else ("eval" if rng.random() < lean else "deploy")
                           for _ in range(n_votes)]
        prob[f"s{i}"] = [None if rng.random() < p_invalid else float(np.clip(rng.normal(lean, 0.2), 0, 1))
                         for _ in range(n_votes)]
    return binary, prob


def test_vote_count_experiment_seeded_and_consistent():
    rng = np.random.default_rng(0)
    binary, prob = _votes(rng, 60, 25)
    a = S.vote_count_experiment(binary, prob, resamples=30, seed=1)
    b = S.vote_count_experiment(binary, prob, resamples=30, seed=1)
    assert a == b
    assert [row["n_votes"] for row in a] == list(range(5, 26, 2))
    for row in a:
        assert row["ci_low"] <= row["kappa_mean"] <= row["ci_high"]
        assert row["n_samples"] == 60
    # at n = 25 every draw uses all answers: equal to the kappa of the full-vote decisions
    from harness.methods.voting import majority, mean_probability
    ids = sorted(binary)
    pb = [majority(binary[s]).prediction for s in ids]
    pp = [mean_probability(prob[s]).prediction for s in ids]
    ok = [i for i in range(len(ids)) if pb[i] is not None and pp[i] is not None]
    full = cohen_kappa_score([pb[i] for i in ok], [pp[i] for i in ok])
    assert a[-1]["kappa_mean"] == pytest.approx(full)
    assert a[-1]["ci_low"] == pytest.approx(a[-1]["ci_high"])
    assert a[0]["ci_high"] - a[0]["ci_low"] > 0


def test_vote_count_skips_sizes_beyond_answers():
    rng = np.random.default_rng(1)
    binary, prob = _votes(rng, 20, 9)
    out = S.vote_count_experiment(binary, prob, resamples=5)
    assert [row["n_votes"] for row in out] == [5, 7, 9]


def test_votes_by_sample_orders_by_k():
    recs = [{"sample_id": "a", "details": {"votes": [{"k": 1, "value": "deploy"}, {"k": 0, "value": None}]}}]
    assert S.votes_by_sample(recs) == {"a": [None, "deploy"]}


def test_bootstrap_ci_brackets_estimate():
    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 200)
    p = np.clip(rng.normal(0.3 + 0.3 * y, 0.2), 0, 1)
    lo, hi = M.bootstrap_ci(M.roc_auc, [y, p], n=300, seed=0)
    assert lo < M.roc_auc(y, p) < hi and not math.isnan(lo)


def test_roc_auc_rows_and_weighted_rows_equal_sklearn():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, (6, 40))
    s = np.round(rng.normal(size=(6, 40)) + y, 1)  # with ties
    got = M.roc_auc_rows(y, s)
    assert got == pytest.approx([roc_auc_score(a, b) for a, b in zip(y, s)], abs=1e-12)
    W = M.bootstrap_weights(40, 50, seed=3, groups=[i % 7 for i in range(40)])
    wr = M.roc_auc_weighted_rows(y[0], s[0], W)
    for w, v in zip(W, wr):
        ref = M.roc_auc(y[0], s[0], weights=w)
        assert (ref is None and np.isnan(v)) or v == pytest.approx(ref, abs=1e-12)
    assert np.isnan(M.roc_auc_rows([[1, 1, 1]], [[0.1, 0.2, 0.3]])[0])


def test_bootstrap_weights_draw_whole_groups():
    groups = ["a"] * 3 + ["b"] * 2 + ["c"] * 4
    W = M.bootstrap_weights(9, 200, seed=0, groups=groups)
    assert W.shape == (200, 9)
    for w in W:  # members of one group are drawn together
        assert len(set(w[:3])) == 1 and len(set(w[3:5])) == 1 and len(set(w[5:])) == 1
        assert w[0] + w[3] + w[5] == 3  # three groups drawn per resample
    Ws = M.bootstrap_weights(9, 200, seed=0)
    assert (Ws.sum(1) == 9).all() and any(len(set(w[:3])) > 1 for w in Ws)


def _two_correlated_categories(n: int = 50) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Category A: every eval sample scores 0.9 and every deploy 0.1 (perfectly right);
    category B: eval 0.2, deploy 0.8 (perfectly wrong). Samples of a category are copies."""
    y = np.array([1] * n + [0] * n + [1] * n + [0] * n)
    s = np.array([0.9] * n + [0.1] * n + [0.2] * n + [0.8] * n)
    return y, s, ["A"] * (2 * n) + ["B"] * (2 * n)


def test_category_bootstrap_wider_than_sample_bootstrap_on_correlated_categories():
    y, s, cats = _two_correlated_categories()
    assert M.roc_auc(y, s) == pytest.approx(0.75)
    lo_s, hi_s = M.bootstrap_auroc(y, s, 1000, seed=0)
    lo_c, hi_c = M.bootstrap_auroc(y, s, 1000, seed=0, groups=cats)
    assert hi_s - lo_s < 0.2 and (lo_c, hi_c) == (0.0, 1.0)
    acc = lambda yy, ss: float(np.mean((ss >= 0.5) == yy))  # noqa: E731
    lo_s, hi_s = M.bootstrap_ci(acc, [y, s], 1000, seed=0)
    lo_c, hi_c = M.bootstrap_ci(acc, [y, s], 1000, seed=0, groups=cats)
    assert hi_s - lo_s < 0.2 and (lo_c, hi_c) == (0.0, 1.0)


def test_category_and_sample_bootstrap_agree_on_independent_samples():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 2, 400)
    s = rng.normal(size=400) + 0.8 * y
    cats = [f"c{i}" for i in rng.integers(0, 40, 400)]  # categories carry no structure
    lo_s, hi_s = M.bootstrap_auroc(y, s, 2000, seed=0)
    lo_c, hi_c = M.bootstrap_auroc(y, s, 2000, seed=1, groups=cats)
    assert abs(lo_s - lo_c) < 0.02 and abs(hi_s - hi_c) < 0.02
    assert abs((hi_c - lo_c) / (hi_s - lo_s) - 1) < 0.2


def test_weighted_rows_equal_their_resampled_statistics():
    """Each vectorised bootstrap statistic equals the plain statistic on the resampled rows."""
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 60)
    p = np.clip(np.round(rng.normal(0.3 + 0.4 * y, 0.25), 2), 0, 1)
    a = np.where(p >= 0.5, "eval", "deploy")
    b = np.where(rng.random(60) < 0.7, a, np.where(a == "eval", "deploy", "eval"))
    W = M.bootstrap_weights(60, 40, seed=4, groups=[i % 9 for i in range(60)])
    ece_w = M.ece_weighted_rows(y, p, W.astype(float))
    kap_w = M.kappa_weighted_rows(a, b, W.astype(float))
    tpr_w = M.tpr_at_fpr_weighted_rows(y, p, W.astype(float), 0.05)
    for k, w in enumerate(W):
        idx = np.repeat(np.arange(60), w)
        assert ece_w[k] == pytest.approx(M.ece(y[idx], p[idx]), abs=1e-12)
        assert kap_w[k] == pytest.approx(M.cohen_kappa(list(a[idx]), list(b[idx])), abs=1e-12)
        assert tpr_w[k] == pytest.approx(M.tpr_at_fpr(y[idx], p[idx], 0.05), abs=1e-12)


def test_tpr_at_fpr_and_precision_at_base_rate():
    y = np.array([1] * 10 + [0] * 100)
    s = np.r_[np.linspace(0.58, 1.0, 10), np.linspace(0.0, 0.6, 100)]  # top deploy: 0.6, 0.594, ...
    assert M.tpr_at_fpr(y, s, 0.0) == pytest.approx(0.9)  # eval scores above 0.6: 9 of 10
    assert M.tpr_at_fpr(y, s, 0.01) == pytest.approx(0.9)
    assert M.tpr_at_fpr(y, s, 0.05) == pytest.approx(1.0)  # 0.58 is above the 5th deploy score
    # a good-looking detector at a 1% base rate: most "eval" calls are wrong
    assert M.precision_at(0.9, 0.1, 0.01) == pytest.approx(0.009 / (0.009 + 0.099))
    recs = [{"sample_id": str(i), "label": "eval" if v else "deploy", "score": float(x),
             "prediction": "eval" if x >= 0.55 else "deploy", "category": f"c{i % 11}"}
            for i, (v, x) in enumerate(zip(y, s))]
    out = S.low_base_rate(recs, base_rate=0.01, n_boot=200)
    assert out["ci_by"] == "category" and out["tpr_at_fpr1"] == pytest.approx(0.9)
    lo, hi = out["tpr_at_fpr5_ci"]
    assert lo <= 1.0 <= hi + 1e-12
    assert out["decision_precision"] == pytest.approx(
        M.precision_at(out["decision_tpr"], out["decision_fpr"], 0.01))


def test_kappa_pairs_interval_and_resampling_unit():
    rng = np.random.default_rng(3)
    recs_a, recs_b = [], []
    for i in range(80):
        lab = "eval" if i % 2 else "deploy"
        pa = lab if rng.random() < 0.8 else ("deploy" if lab == "eval" else "eval")
        pb = pa if rng.random() < 0.8 else ("deploy" if pa == "eval" else "eval")
        base = {"sample_id": str(i), "label": lab, "category": f"c{i % 8}"}
        recs_a.append({**base, "prediction": pa})
        recs_b.append({**base, "prediction": pb})
    k = S.kappa_pairs({"a": recs_a, "b": recs_b}, n_boot=300)[("a", "b")]
    assert k["ci_by"] == "category" and k["ci"][0] < k["kappa"] < k["ci"][1]
    ks = S.kappa_pairs({"a": recs_a, "b": recs_b}, n_boot=300, ci_by="sample")[("a", "b")]
    assert ks["ci_by"] == "sample" and ks["ci"][0] < ks["kappa"] < ks["ci"][1]


def test_turns_p_is_cluster_robust_by_category():
    """Turns and error both vary by category only (6 categories x 30 copies): Pearson's p treats
    180 samples as independent and is tiny; the cluster-robust p sees 6 clusters."""
    rng = np.random.default_rng(0)
    recs = []
    for c in range(6):
        turns = c + 1
        err = float(np.clip(0.08 * turns + rng.normal(0, 0.15), 0, 1))
        for k in range(30):
            recs.append({"sample_id": f"{c}:{k}", "label": "eval", "score": 1 - err + rng.normal(0, 0.01),
                         "n_turns": turns, "category": f"c{c}"})
    naive = S.score_vs_turns(recs, ci_by="sample")
    clus = S.score_vs_turns(recs)
    assert clus["ci_by"] == "category" and "cluster-robust" in clus["p_method"]
    assert naive["slope"] == pytest.approx(clus["slope"])
    assert naive["p"] < 1e-3 and clus["p"] > 10 * naive["p"]


def test_gated_roc_auc_counts_only_scored_samples_and_refuses_thin_classes():
    from sklearn.metrics import roc_auc_score

    from harness.stats.metrics import MIN_AUROC_PER_CLASS, gated_roc_auc

    y = [1, 0] * MIN_AUROC_PER_CLASS + [1, 0]
    s = [0.9, 0.2, 0.4, 0.6] * (MIN_AUROC_PER_CLASS // 2) + [None, 0.5]
    auc, n_eval, n_deploy = gated_roc_auc(y, s)
    assert (n_eval, n_deploy) == (MIN_AUROC_PER_CLASS, MIN_AUROC_PER_CLASS + 1)
    kept = [(a, b) for a, b in zip(y, s) if b is not None]
    assert auc == pytest.approx(roc_auc_score([a for a, _ in kept], [b for _, b in kept]))
    assert gated_roc_auc(y[:-3], s[:-3])[0] is None  # 9 eval scored: below the gate


def test_cluster_robust_slope_equals_statsmodels_cr1():
    """An independent reference: statsmodels' OLS with cluster-robust (CR1) errors and t with
    G - 1 degrees of freedom gives the same slope, standard error and p."""
    sm = pytest.importorskip("statsmodels.api")  # a test-only dependency (pyproject [test])
    from harness.stats.metrics import cluster_robust_slope

    rng = np.random.default_rng(3)
    for n_groups, per in ((6, 30), (12, 7), (30, 4)):
        g = np.repeat(np.arange(n_groups), per)
        x = rng.integers(1, 9, size=g.size).astype(float) + np.repeat(rng.normal(0, 1, n_groups), per)
        y = 0.05 * x + np.repeat(rng.normal(0, 0.3, n_groups), per) + rng.normal(0, 0.2, g.size)
        slope, se, p = cluster_robust_slope(x, y, g)
        ref = sm.OLS(y, sm.add_constant(x)).fit(cov_type="cluster", cov_kwds={"groups": g},
                                                use_t=True)
        assert slope == pytest.approx(ref.params[1], rel=1e-9)
        assert se == pytest.approx(ref.bse[1], rel=1e-9)
        assert p == pytest.approx(ref.pvalues[1], rel=1e-6)
