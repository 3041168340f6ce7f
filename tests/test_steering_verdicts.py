"""Issue 45: one declared rule judges every steering row, readout or behaviour alike
(probes/steering/verdicts.py): the same numbers give the same verdict whatever the method; the
strongest control is compared by magnitude, so a control moving the method the other way counts;
few categories give no verdict; the report prints the verdicts at the family's Bonferroni level."""

from __future__ import annotations

import numpy as np
import pytest

from probes.steering.report import _mean_ci
from probes.steering.verdicts import MORE, NO_VERDICT, NOT_MORE, NOT_SHOWN, family_level, steer_verdict


def _case(vec_shift, ctl_shift, n_cat=6, per=6, noise=0.01, seed=0):
    """Scores for an unsteered, a vector and two control conditions; shifts are per-sample adds."""
    rng = np.random.default_rng(seed)
    ids = [f"c{g}:{k}" for g in range(n_cat) for k in range(per)]
    groups = {i: i.split(":")[0] for i in ids}
    base = {i: float(rng.uniform(0.2, 0.8)) for i in ids}
    scores = {"unsteered_0": base,
              "vector_+0.5": {i: base[i] + vec_shift + float(rng.normal(0, noise)) for i in ids},
              "random_+0.5": {i: base[i] + float(rng.normal(0, noise)) for i in ids},
              "contrast-shelf_+0.5": {i: base[i] + ctl_shift + float(rng.normal(0, noise)) for i in ids}}

    def row(name, control, contrast=None):
        return {"condition": name, "control": control, "alpha": 0.5, "contrast": contrast,
                "delta": float(np.mean([scores[name][i] - base[i] for i in ids]))}
    vec = row("vector_+0.5", "vector")
    ctl = [row("random_+0.5", "random"), row("contrast-shelf_+0.5", "contrast", "shelf")]
    return vec, ctl, scores, base, ids, groups


def _judge(method, vec, ctl, scores, base, ids, groups, level=0.05):
    return steer_verdict(method, 0.5, vec, ctl, scores, base, ids, groups, level,
                         lambda v, lv: _mean_ci(v, groups, 200, 0, alpha=lv))


@pytest.mark.parametrize("method", ["logprob_question", "behaviour", "monitor"])
def test_same_numbers_same_verdict_whatever_the_method(method):
    case = _case(0.3, 0.05)
    v = _judge(method, *case)
    assert v["kind"] == MORE and v["rank"] == 1
    assert v["sentence"].startswith(f"{method} at alpha +0.5: {MORE} (vector delta +0.3")
    assert v["strongest_control"]["name"] == "shelf"
    assert v["gap"] == pytest.approx(0.25, abs=0.01) and v["gap_ci"][0] > 0


def test_a_control_moving_the_method_the_other_way_as_much_is_not_beaten():
    v = _judge("behaviour", *_case(0.3, -0.32))
    assert v["kind"] == NOT_MORE and v["rank"] == 2  # the contrast's |delta| is larger
    assert v["gap"] == pytest.approx(-0.02, abs=0.01)


def test_a_control_as_strong_is_not_beaten_even_at_rank_one():
    v = _judge("logprob_question", *_case(0.3, 0.295, noise=0.05))
    assert v["kind"] == NOT_MORE  # the gap's interval covers 0 whatever the rank


def test_no_change_is_not_shown_and_says_no_sample_changed():
    vec, ctl, scores, base, ids, groups = _case(0.0, 0.2, noise=0.0)
    v = _judge("behaviour", vec, ctl, scores, base, ids, groups)
    assert v["kind"] == NOT_SHOWN and "no sample changed" in v["sentence"]
    v = _judge("behaviour", *_case(0.002, 0.2, noise=0.05))
    assert v["kind"] == NOT_SHOWN and "strongest" not in v["sentence"]


def test_few_categories_or_no_controls_give_no_verdict():
    v = _judge("logprob_question", *_case(0.3, 0.0, n_cat=3))
    assert v["kind"] == NO_VERDICT and "3 categories" in v["sentence"]
    vec, _, scores, base, ids, groups = _case(0.3, 0.0)
    assert _judge("behaviour", vec, [], scores, base, ids, groups)["kind"] == NO_VERDICT


def test_the_family_level_is_bonferroni_and_narrows_nothing_it_should_not():
    assert family_level(4) == pytest.approx(0.0125) and family_level(0) == 0.05
    case = _case(0.3, 0.05, noise=0.1)
    wide = _judge("behaviour", *case, level=family_level(8))
    narrow = _judge("behaviour", *case, level=0.05)
    lo_w, hi_w = wide["vector_delta_ci"]
    lo_n, hi_n = narrow["vector_delta_ci"]
    assert lo_w < lo_n and hi_w > hi_n and wide["ci_level"] == pytest.approx(1 - 0.05 / 8)
