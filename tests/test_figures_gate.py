"""Every printed figure through one gate: the defects a review of the figures found, each with a
test that fails without its fix."""

from __future__ import annotations

import numpy as np
import pytest

from harness.stats import summaries as S


def _records(n_eval: int, n_deploy: int, perfect: bool = True) -> list[dict]:
    out = []
    for i in range(n_eval + n_deploy):
        lab = "eval" if i < n_eval else "deploy"
        score = (0.9 if lab == "eval" else 0.1) if perfect else 0.5
        out.append({"sample_id": f"c{i % 3}:{i}", "label": lab, "prediction": lab, "score": score,
                    "category": f"c{i % 3}", "n_valid": 1, "n_invalid": 0, "details": {}})
    return out


def test_auroc_and_tpr_are_gated_below_ten_scored_per_class():
    recs = _records(3, 3)  # 3 + 3 perfectly separated: AUROC 1.0 [1.0, 1.0] by luck
    s = S.method_summary(recs, n_boot=50)
    assert s["auroc"] is None and s["auroc_ci"] is None
    assert s["auroc_gate"] == "3 eval / 3 deploy scored, < 10 per class"
    lb = S.low_base_rate(recs, n_boot=50)
    assert lb["tpr_at_fpr5"] is None and lb["tpr_at_fpr1"] is None
    big = S.method_summary(_records(10, 10), n_boot=50)
    assert big["auroc"] == 1.0 and big["auroc_gate"] is None


def test_show_and_the_report_use_the_gate(tmp_path):
    from click.testing import CliRunner

    from harness.cli.main import cli
    from harness.core.sample import Message, Sample, SampleMeta
    from harness.reporting.report import write_report
    from harness.runlog import RunLog

    recs = _records(3, 3)
    store = RunLog(tmp_path / "run")
    store.put_samples([Sample(r["sample_id"], (Message("user", "q"),), r["label"],
                              SampleMeta(category=r["category"])) for r in recs])
    store.put_results("binary", [{**r, "method": "binary"} for r in recs])
    store.close()
    out = CliRunner().invoke(cli, ["show", str(tmp_path / "run")]).output
    row = next(ln for ln in out.splitlines() if ln.startswith("binary"))
    assert "1.00" not in row.split()[-2:]  # the AUROC column shows "-"
    md, _ = write_report([tmp_path / "run"], tmp_path / "rep", n_boot=20)
    text = md.read_text()
    assert "1.000 [1.00, 1.00]" not in text
    assert "– (3 eval / 3 deploy scored, < 10 per class)" in text
    assert "no bar for binary" in text


def test_precision_uses_the_reached_fpr_and_has_an_interval():
    """Precision at a low base rate from the threshold's own FPR, with an exact interval; values
    derived by hand here, not with the functions under test."""
    from scipy.stats import beta

    recs = []
    for i in range(50):  # 50 deploy: one scores 0.95 (the only false positive above 0.9)
        recs.append({"sample_id": f"d{i}", "label": "deploy", "prediction": "deploy",
                     "score": 0.95 if i == 0 else 0.1 + 0.001 * i, "category": f"c{i % 5}"})
    for i in range(48):  # 48 eval: 30 score 0.99 (called eval), 18 score 0.2 (called deploy)
        hi = i < 30
        recs.append({"sample_id": f"e{i}", "label": "eval", "prediction": "eval" if hi else "deploy",
                     "score": 0.99 if hi else 0.2, "category": f"c{i % 5}"})
    b = S.low_base_rate(recs, base_rate=0.01, n_boot=0)
    # 49 deploy scores lie in 0.101..0.149, below every eval score: the threshold 0.2 catches
    # every eval sample with one false positive, an FPR of 1/50, not the nominal 5%.
    assert b["tpr_at_fpr5"] == 1.0 and b["fpr_reached5"] == pytest.approx(1 / 50)
    assert b["precision_at_fpr5"] == pytest.approx(0.01 / (0.01 + 0.02 * 0.99))
    # own decisions: 30/48 caught, 0/50 false positives -> precision 1.0, but not certain
    assert b["decision_precision"] == 1.0
    t_lo = beta.ppf(0.025, 30, 19)
    f_hi = 1 - 0.025 ** (1 / 50)
    lo, hi = b["decision_precision_ci"]
    assert lo == pytest.approx(t_lo * 0.01 / (t_lo * 0.01 + f_hi * 0.99), rel=1e-6) and hi == 1.0
    assert lo < 0.1  # 0 of 50 false positives does not make a rare-evaluation detector precise


def test_steering_compares_conditions_on_the_samples_scored_in_all(monkeypatch):
    """-0.1 kept a score on 25 of 48 samples, the control on 48: their means were compared as if
    on the same samples. Now P(eval) and delta use the samples scored in every condition."""
    from probes.steering import report as R

    def recs(scores):
        return [{"sample_id": f"c{i % 4}:{i}", "score": s, "prediction": None if s is None else "eval"}
                for i, s in enumerate(scores)]

    base = [0.5] * 8
    steered = [0.6] * 4 + [None] * 4  # the gate withheld half the samples
    control = [0.5] * 4 + [0.9] * 4  # high where the steered condition has no score
    groups = {f"c{i % 4}:{i}": f"c{i % 4}" for i in range(8)}
    data = {name: {"records": {"logprob_question": recs(sc)}, "groups": groups, "control": ctl,
                   "alpha": a, "sanity": None}
            for name, sc, ctl, a in (("unsteered_0", base, "none", 0.0),
                                     ("vector_+0.1", steered, "vector", 0.1),
                                     ("random_+0.1", control, "random", 0.1))}
    monkeypatch.setattr(R, "load_conditions", lambda out: ({"plan": 1}, data))
    rows = {r["condition"]: r for r in R.dose_response("unused", n_boot=0)["methods"]["logprob_question"]}
    assert all(r["n_common"] == 4 for r in rows.values())
    assert rows["random_+0.1"]["delta"] == pytest.approx(0.0)  # 0.9s are not among the common 4
    assert rows["random_+0.1"]["p_eval"] == pytest.approx(0.5)
    assert rows["vector_+0.1"]["delta"] == pytest.approx(0.1)


def test_steering_layer_is_chosen_without_the_held_out_samples():
    """The layer whose held-out AUROC is best must not win because of it: the choice is made on an
    inner split of the training categories."""
    from probes.steering.build import _inner_selection
    from probes.steering.direction import SteeringVector

    rng = np.random.default_rng(0)
    y = np.array([1, 0] * 40)
    groups = [f"g{i % 8}" for i in range(80)]
    X = {1: rng.normal(size=(80, 16)), 2: rng.normal(size=(80, 16))}
    X[2][:, 0] += 3.0 * y  # layer 2 separates the classes in training; layer 1 is noise
    sel, how = _inner_selection(X, y, groups, seed=0)
    assert sel["2"] > 0.9 and abs(sel["1"] - 0.5) < 0.3 and "inner split" in how
    units = {l: np.eye(16)[0] for l in (1, 2)}
    vec = SteeringVector(units, units, {1: 1.0, 2: 1.0}, {"heldout_auroc": {"1": 0.99, "2": 0.6},
                                                   "selection_auroc": sel})
    assert vec.best_layer() == 2  # the held-out 0.99 of layer 1 plays no part
