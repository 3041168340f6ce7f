"""Intervals at the edges (issue 36, item 5): a perfect score or 0/n is never a point, a share
near a bound is never silently clipped, a pair leaves together when one side is unscored, and
each interval names the rule that made it."""

from __future__ import annotations

import numpy as np

from evalaware.organism import scored_pairs
from harness.stats.metrics import exact_share_interval, interval_weighted, roc_auc_weighted_rows, weighted_mean_rows
from harness.stats.paired import mean_with_ci, paired_auroc, rate_with_ci

CATS = [f"c{i // 2}" for i in range(24)]  # 12 categories of two


def _auroc_rows(y, s):
    return lambda W: roc_auc_weighted_rows(np.asarray(y), np.asarray(s, dtype=float), W)


def test_perfect_auroc_is_not_a_point_and_names_the_exact_rule():
    y = [i % 2 for i in range(24)]  # every category holds one eval and one deploy sample
    s = [0.9 + 0.001 * i if yi else 0.1 for i, yi in enumerate(y)]
    iv = interval_weighted(_auroc_rows(y, s), 24, 200, groups=CATS, strata=y, bounds=(0.0, 1.0))
    assert iv is not None and iv.hi == 1.0 and iv.lo < 0.8  # 12 units: exact lower bound 0.735
    assert abs(iv.lo - exact_share_interval(1.0, 12)[0]) < 1e-9
    assert "exact" in iv.method and "12 units" in iv.method
    row = paired_auroc(y, s, s, CATS, n_boot=200)
    assert row["auroc_b"] == 1.0 and row["auroc_b_ci"][0] < 0.8 and "exact" in row["auroc_b_ci_method"]


def test_perfect_auroc_rests_on_the_smaller_class_units():
    y = [1] * 3 + [0] * 9  # label-pure categories: 3 eval, 9 deploy
    s = [0.9, 0.8, 0.95] + [0.1] * 9
    iv = interval_weighted(_auroc_rows(y, s), 12, 200, groups=[f"g{i}" for i in range(12)], strata=y,
                           bounds=(0.0, 1.0))
    assert abs(iv.lo - exact_share_interval(1.0, 3)[0]) < 1e-9 and "3 units" in iv.method


def test_zero_rate_keeps_an_upper_bound():
    r = rate_with_ci([False] * 24, CATS, n_boot=200)
    assert r["rate"] == 0.0 and r["ci"][0] == 0.0 and r["ci"][1] > 0.2  # 0 of 12 units: up to 0.265
    assert "exact" in r["ci_method"]


def test_near_one_share_is_not_clipped():
    hits = [True] * 23 + [False]
    r = rate_with_ci(hits, CATS, n_boot=200)
    # The raw jackknife gives [0.872, 1.045]: an interval that had to be clipped to 1.0.
    assert r["ci"][1] < 1.0 and r["ci"][0] < 23 / 24
    assert "clipped" not in r["ci_method"] and "effective n" in r["ci_method"]


def test_one_unit_stratum_names_the_bootstrap():
    # One category holds a single (eval) sample: the stratified jackknife is undefined there.
    y = [i % 2 for i in range(22)] + [1]
    rng = np.random.default_rng(0)
    s = rng.random(23) + 0.3 * np.asarray(y)
    g = CATS[:22] + ["lonely"]
    iv = interval_weighted(_auroc_rows(y, s), 23, 300, groups=g, strata=y, bounds=(0.0, 1.0))
    assert iv is not None and "bootstrap" in iv.method and "jackknife was undefined" in iv.method


def test_interior_intervals_keep_the_jackknife():
    v = np.linspace(0, 1, 24)
    out = mean_with_ci(v, CATS, n_boot=200)
    assert out["ci_method"].startswith("cluster-jackknife t")


def test_exact_rule_covers_near_the_bound():
    """A true share of 0.97 over 12 categories of 2: the rules together cover near 0.95 (measured
    over 1000 draws: 0.973; the rule before them, the jackknife clipped at 1 and a point [1, 1] on
    the 48% of draws with every hit, covered 0.478)."""
    rng = np.random.default_rng(1)
    hit = 0
    n = 300
    for _ in range(n):
        hits = rng.random(24) < 0.97
        r = rate_with_ci(hits, CATS, n_boot=100)
        hit += r["ci"][0] <= 0.97 <= r["ci"][1]
    assert hit / n >= 0.92


def test_a_pair_leaves_together_when_one_side_is_unscored():
    pairs = {"a1": "a", "a0": "a", "b1": "b", "b0": "b"}
    rec = lambda s: {"score": s}  # noqa: E731
    recs = {"base": {"a1": rec(0.9), "a0": rec(0.1), "b1": rec(0.8), "b0": rec(0.2)},
            "organism": {"a1": rec(0.9), "a0": rec(None), "b1": rec(0.7), "b0": rec(0.3)}}
    assert scored_pairs(recs, pairs) == ["b1", "b0"]


def test_units_that_agree_exactly_give_no_zero_width_interval():
    """Three categories with the same rate 2/3: every leave-one-out value equals the estimate, so
    the cluster jackknife's interval had zero width ([0.667, 0.667]) and a verdict read it as
    excluding 0.5; three units that agree say little, so the exact interval over them is used."""
    hits = [True, True, False] * 3
    cats = [c for c in "abc" for _ in range(3)]
    r = rate_with_ci(hits, cats, n_boot=200)
    assert r["ci"][0] < 0.5 < r["ci"][1] and "exact" in r["ci_method"]
    assert abs(r["ci"][0] - exact_share_interval(2 / 3, 3)[0]) < 1e-3
    # the same for an AUROC whose every category gives the same value
    y = [1, 0, 0] * 3
    s = [0.9, 0.1, 0.95] * 3  # per category: AUROC 0.5 ... with ties broken alike: 0.5 each
    row = paired_auroc(y, s, s, cats, n_boot=200)
    assert row["auroc_a"] == 0.5 and row["auroc_a_ci"][0] < 0.5 < row["auroc_a_ci"][1]
    assert "exact" in row["auroc_a_ci_method"]
    # a difference that is exactly 0 in every resample has no interval (not a point)
    assert row["diff"] == 0.0 and row["diff_ci"] is None and row["diff_ci_method"] is None


def test_a_statistic_that_is_not_a_share_has_no_zero_width_interval():
    """A constant-score reference (AUROC 0.5) against a perfectly separating organism over 6
    categories: every resample gives the difference +0.5, which was the interval [0.5, 0.5] and a
    "sensitive" verdict; six units that agree exactly give no measure of uncertainty: None."""
    cats = [f"c{i // 4}" for i in range(24)]
    y = [i % 2 for i in range(24)]
    ref = [0.5] * 24
    org = [0.9 if v else 0.1 for v in y]
    row = paired_auroc(y, ref, org, cats, n_boot=200)
    assert row["diff"] == 0.5 and row["diff_ci"] is None and row["diff_ci_method"] is None
    assert row["auroc_b_ci"] is not None and row["auroc_b_ci"][0] < 1.0  # a share keeps its exact interval
    same = mean_with_ci([0.3] * 12, [f"c{i // 2}" for i in range(12)], 200)  # a mean of equal differences
    assert abs(same["mean"] - 0.3) < 1e-12 and same["ci"] is None and same["ci_method"] is None
    assert mean_with_ci([0.0, 1.0] * 6, [f"c{i // 2}" for i in range(12)], 200, bounds=(0.0, 1.0))["ci"]
