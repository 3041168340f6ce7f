"""Issue 45: one declared rule judges every steering row, readout or behaviour alike
(probes/steering/verdicts.py): the same numbers give the same verdict whatever the method; the
vector must beat every control, each whichever way it moves (testing only the strongest control
by its mean is not conservative); a change with no interval, a partial run or few categories
give no verdict; the family's Bonferroni level reaches every row."""

from __future__ import annotations

import numpy as np
import pytest

from probes.steering.report import _mean_ci, _verdicts
from probes.steering.verdicts import MORE, NO_VERDICT, NOT_MORE, NOT_SHOWN, family_level, steer_verdict


def _scores(shifts, n_cat=6, per=6, noise=0.01, cat_sd=None, seed=0, cat_pattern=None):
    """Per condition name, per sample: base + shift + noise (+ a per-category effect of sd
    `cat_sd[name]`, or the fixed offsets `cat_pattern[name]`); returns (rows, scores, base, ids,
    groups) for alpha 0.5."""
    rng = np.random.default_rng(seed)
    ids = [f"c{g}:{k}" for g in range(n_cat) for k in range(per)]
    groups = {i: i.split(":")[0] for i in ids}
    base = {i: float(rng.uniform(0.2, 0.8)) for i in ids}
    scores = {"unsteered_0": base}
    rows = []
    for name, shift in shifts.items():
        cat = {f"c{g}": float(rng.normal(0, (cat_sd or {}).get(name, 0.0))) for g in range(n_cat)}
        if name in (cat_pattern or {}):
            cat = {f"c{g}": float(cat_pattern[name][g]) for g in range(n_cat)}
        scores[name] = {i: base[i] + shift + cat[groups[i]] + float(rng.normal(0, noise)) for i in ids}
        control = "vector" if name.startswith("vector") else "contrast" if name.startswith("contrast") else "random"
        rows.append({"condition": name, "control": control, "alpha": 0.5,
                     "contrast": name.split("_")[0].removeprefix("contrast-") if control == "contrast" else None,
                     "delta": float(np.mean([scores[name][i] - base[i] for i in ids]))})
    return rows, scores, base, ids, groups


def _judge(method, rows, scores, base, ids, groups, level=0.05, planned=None):
    vec = next(r for r in rows if r["control"] == "vector")
    ctl = [r for r in rows if r["control"] != "vector"]
    return steer_verdict(method, 0.5, vec, ctl, scores, base, ids, groups, level,
                         lambda v, lv: _mean_ci(v, groups, 200, 0, alpha=lv), planned=planned)


def test_a_clear_vector_beats_every_control():
    v = _judge("behaviour", *_scores({"vector_+0.5": 0.3, "random_+0.5": 0.0, "contrast-shelf_+0.5": 0.05}))
    assert v["kind"] == MORE and v["rank"] == 1
    assert v["sentence"].startswith(f"behaviour at alpha +0.5: {MORE} (raises it: vector delta +0.3")
    assert v["least_beaten_control"]["name"] == "shelf" and v["least_beaten_control"]["gap_ci"][0] > 0
    w = v["least_beaten_control"]  # what the sentence calls the gap is the comparison made
    assert w["gap"] == pytest.approx(abs(v["vector_delta"]) + w["sign"] * w["delta"], abs=1e-9)
    # +0.3 against +0.05: the binding comparison is along the vector's direction (0.3 - 0.05)
    assert w["sign"] == -1 and f"the vector's change minus the control's, along the vector's direction: " \
        f"{w['gap']:+.3f}" in v["sentence"]


def test_a_vector_that_lowers_the_score_is_judged_by_its_size():
    v = _judge("logprob_question", *_scores({"vector_+0.5": -0.3, "random_+0.5": 0.05, "contrast-x_+0.5": -0.05}))
    assert v["kind"] == MORE and "(lowers it: vector delta -0.29" in v["sentence"]
    v = _judge("logprob_question", *_scores({"vector_+0.5": -0.3, "random_+0.5": 0.31}))
    assert v["kind"] == NOT_MORE and "the control taken the other way: -0.01" in v["sentence"]


def test_same_numbers_same_verdict_and_level_as_a_readout_or_a_behaviour():
    case = _scores({"vector_+0.5": 0.3, "random_+0.5": 0.0, "contrast-shelf_+0.5": 0.28}, noise=0.05)
    rows, scores, base, ids, groups = case
    common = {0.5: set(ids), 0.0: set(ids)}
    pending = [(m, rows, scores, base, common, groups) for m in ("logprob_question", "behaviour")]
    plan = {"conditions": [{"control": r["control"], "alpha": 0.5} for r in rows]}
    a, b = _verdicts(pending, plan, 200, 0)
    assert (a["method"], b["method"]) == ("logprob_question", "behaviour")
    assert a["kind"] == b["kind"] and a["ci_level"] == b["ci_level"] == pytest.approx(1 - 0.05 / 2)
    assert a["sentence"].split(":", 1)[1] == b["sentence"].split(":", 1)[1]


def test_the_family_level_reaches_every_row_of_every_method_and_alpha():
    rows, scores, base, ids, groups = _scores({"vector_+0.5": 0.3, "random_+0.5": 0.0})
    neg = [{**r, "alpha": -0.5, "condition": r["condition"].replace("+", "-")} for r in rows]
    scores.update({r["condition"].replace("+", "-"): scores[r["condition"]] for r in rows})
    common = {0.5: set(ids), -0.5: set(ids), 0.0: set(ids)}
    pending = [(m, rows + neg, scores, base, common, groups) for m in ("logprob_question", "behaviour")]
    plan = {"conditions": [{"control": r["control"], "alpha": r["alpha"]} for r in rows + neg]}
    out = _verdicts(pending, plan, 200, 0)
    assert [(v["method"], v["alpha"]) for v in out] == [("logprob_question", -0.5), ("logprob_question", 0.5),
                                                         ("behaviour", -0.5), ("behaviour", 0.5)]
    assert all(v["ci_level"] == pytest.approx(1 - 0.05 / 4) for v in out)
    assert family_level(4) == pytest.approx(0.0125) and family_level(0) == 0.05


def test_a_control_that_is_not_the_strongest_by_mean_can_still_hold_the_vector_back():
    # contrast A: the largest mean change, moving with the vector (its gap is tight and above 0);
    # contrast B: a slightly smaller mean, spread over categories: the vector does not beat it
    case = _scores({"vector_+0.5": 0.30, "contrast-a_+0.5": 0.28, "contrast-b_+0.5": 0.27}, noise=0.002,
                   cat_pattern={"contrast-b_+0.5": [0.15, -0.15, 0.15, -0.15, 0.15, -0.15]})
    rows = case[0]
    a, b = (next(r for r in rows if r["condition"] == n)["delta"] for n in ("contrast-a_+0.5", "contrast-b_+0.5"))
    assert abs(a) > abs(b)  # the strongest control by mean is A ...
    v = _judge("logprob_question", *case)
    assert v["kind"] == NOT_MORE and v["least_beaten_control"]["name"] == "b"  # ... but B decides
    rows_a = [r for r in rows if r["condition"] != "contrast-b_+0.5"]
    assert _judge("logprob_question", rows_a, *case[1:])["kind"] == MORE  # against A alone it would pass


def test_a_control_moving_the_method_the_other_way_as_much_is_not_beaten():
    v = _judge("behaviour", *_scores({"vector_+0.5": 0.3, "random_+0.5": -0.32}))
    assert v["kind"] == NOT_MORE and v["rank"] == 2
    assert v["least_beaten_control"]["gap"] == pytest.approx(-0.02, abs=0.01)


def test_a_control_as_strong_is_not_beaten_even_at_rank_one():
    v = _judge("logprob_question", *_scores({"vector_+0.5": 0.3, "contrast-x_+0.5": 0.295}, noise=0.05))
    assert v["rank"] == 1 and v["kind"] == NOT_MORE


def test_no_change_is_not_shown():
    v = _judge("behaviour", *_scores({"vector_+0.5": 0.0, "random_+0.5": 0.2}, noise=0.0))
    assert v["kind"] == NOT_SHOWN and "no sample changed" in v["sentence"]
    v = _judge("behaviour", *_scores({"vector_+0.5": 0.002, "random_+0.5": 0.2}, noise=0.05))
    assert v["kind"] == NOT_SHOWN and "least shown to beat" not in v["sentence"]


def test_few_categories_missing_controls_or_none_give_no_verdict():
    v = _judge("logprob_question", *_scores({"vector_+0.5": 0.3, "random_+0.5": 0.0}, n_cat=3))
    assert v["kind"] == NO_VERDICT and "3 categories" in v["sentence"]
    case = _scores({"vector_+0.5": 0.3, "random_+0.5": 0.0})
    v = _judge("logprob_question", *case, planned=29)
    assert v["kind"] == NO_VERDICT and "1 of the 29 planned controls" in v["sentence"]
    rows, scores, base, ids, groups = case
    assert _judge("behaviour", rows[:1], scores, base, ids, groups)["kind"] == NO_VERDICT


def test_a_smaller_level_widens_the_intervals():
    case = _scores({"vector_+0.5": 0.3, "random_+0.5": 0.05}, noise=0.1)
    wide = _judge("behaviour", *case, level=family_level(8))
    narrow = _judge("behaviour", *case, level=0.05)
    assert wide["vector_delta_ci"][0] < narrow["vector_delta_ci"][0] < narrow["vector_delta_ci"][1] < wide["vector_delta_ci"][1]
    assert wide["ci_level"] == pytest.approx(1 - 0.05 / 8)


def _flips(vector, controls, n_cat):
    """0/1 behaviour, nothing behaved unsteered: `vector`/`controls[name]` is the set of categories
    whose every sample behaves under that condition."""
    ids = [f"c{g}:{k}" for g in range(n_cat) for k in range(3)]
    groups = {i: i.split(":")[0] for i in ids}
    base = {i: 0.0 for i in ids}
    conds = {"vector_+0.5": vector, **controls}
    scores = {"unsteered_0": base, **{n: {i: float(groups[i] in on) for i in ids} for n, on in conds.items()}}
    rows = [{"condition": n, "control": "vector" if n.startswith("vector") else "random", "alpha": 0.5,
             "contrast": None, "delta": float(np.mean(list(scores[n].values())))} for n in conds]
    return rows, scores, base, ids, groups


def test_a_behaviour_flipping_alike_everywhere_gets_the_exact_sign_flip_test():
    every = lambda n: {f"c{g}" for g in range(n)}  # noqa: E731
    # 8 categories: p = 2^-7 < 0.0125, shown, and a control that changes nothing is beaten
    v = _judge("behaviour", *_flips(every(8), {"random_+0.5": set()}, 8), level=0.0125)
    assert v["kind"] == MORE and "sign-flip p 0.00781" in v["sentence"]
    # 6 categories: 2^-5 > 0.0125, cannot be decided
    v = _judge("behaviour", *_flips(every(6), {"random_+0.5": set()}, 6), level=0.0125)
    assert v["kind"] == NO_VERDICT and "too few categories" in v["sentence"]
    # a control that flips everything as well is not beaten (a gap of 0 everywhere: not above 0)
    v = _judge("behaviour", *_flips(every(8), {"random_+0.5": set(), "random1_+0.5": every(8)}, 8), level=0.0125)
    assert v["kind"] == NOT_MORE and v["least_beaten_control"]["name"] == "random1_+0.5"


def test_an_undecidable_comparison_does_not_hide_a_failed_one_whatever_the_order():
    every = {f"c{g}" for g in range(6)}
    for order in ((("random_+0.5", set()), ("random1_+0.5", every)), (("random1_+0.5", every), ("random_+0.5", set()))):
        # the vector: 5 of 6 categories flip (an interval); one control flips all (beats it)
        v = _judge("behaviour", *_flips(every - {"c0"}, dict(order), 6), level=0.05)
        assert v["kind"] == NOT_MORE


def test_a_rates_interval_stays_inside_zero_and_one():
    # a behaviour seen in 2 of 36 answers, in 2 of 6 categories: the unbounded jackknife went below 0
    ids = [f"c{g}:{k}" for g in range(6) for k in range(6)]
    groups = {i: i.split(":")[0] for i in ids}
    vals = [(i, 1.0 if i in ("c0:0", "c3:1") else 0.0) for i in ids]
    m, ci, _ = _mean_ci(vals, groups, 200, 0)
    assert ci[0] < 0  # what the report showed before
    m, ci, rule = _mean_ci(vals, groups, 200, 0, bounds=(0.0, 1.0))
    assert m == pytest.approx(2 / 36) and 0.0 <= ci[0] < m < ci[1] <= 1.0
