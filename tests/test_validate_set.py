"""`validate` on a set of organisms (issue 36, items 2, 3, 6 and 8's spillover): the reference
(a sham) replaces the base in every difference, a behaviour-only organism's rows are labelled
specificity, pairs leave together across every model, the within-variant row keeps only pairs
scored on the same variants, the probe row is a frozen probe trained elsewhere (the cue-trained
`--probe-layers` is refused), and the spillover is the hand computation (fast: tiny models)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalaware.main import cli
from harness.core.details import LogOdds
from harness.organisms.validate import (EPS, WITHIN_VARIANT_CAVEAT, Model, clipped_logit, compare, has_variant_gate,
                                        logprob_methods, method_rows, same_variant_ids, scored_pairs,
                                        sensitivity_lines, spillover)
from harness.stats.metrics import roc_auc

RECIPE = ["--cue", "graded", "--train", "full", "--layers", "2", "--steps", "4", "--lr", "5e-3",
          "--batch-size", "8", "--pairs", "12", "--no-progress"]


def _rec(label: str, score: float | None, cat: str = "c", **details) -> dict:
    return {"label": label, "score": score, "category": cat, "details": details}


def _pairs_recs(scores: dict[str, list[tuple[float, float]]]) -> tuple[dict, dict]:
    """{model: [(cue score, no-cue score) per pair]} -> (records by model, pair of each id); pair k
    in category c{k // 2}."""
    recs, pairs = {}, {}
    for name, rows in scores.items():
        recs[name] = {}
        for k, (s1, s0) in enumerate(rows):
            recs[name][f"p{k}:1"] = _rec("eval", s1, f"c{k // 2}")
            recs[name][f"p{k}:0"] = _rec("deploy", s0, f"c{k // 2}")
            pairs[f"p{k}:1"] = pairs[f"p{k}:0"] = f"p{k}"
    return recs, pairs


# --- pure table functions ----------------------------------------------------------------------

def test_a_readout_identical_on_both_models_is_marked_identical():
    """A readout that reads the same on both models (a frozen probe below every trained block, now
    refused before it runs) is marked: its double difference is 0 on every pair, no variance, so the
    rule gives no verdict (tests/test_decision_rule.py)."""
    same = [(0.6 + 0.01 * k, 0.4 - 0.01 * k) for k in range(8)]
    recs, pairs = _pairs_recs({"reference": same, "organism": list(same)})
    row = compare(recs, scored_pairs(recs, pairs), pairs, "reference", "organism", None, n_boot=100, seed=0)
    assert row["identical"] and row["diff"] == 0.0
    moved = [(a + 1e-9, b) for a, b in same]
    recs, pairs = _pairs_recs({"reference": same, "organism": moved})
    assert not compare(recs, scored_pairs(recs, pairs), pairs, "reference", "organism", None, 100, 0)["identical"]


def test_double_difference_on_the_log_odds_scale_where_scores_saturate():
    """Both models' cue-side P(eval) round to 1.0 (score double difference 0 on every pair), their
    exact log-odds differ by 4: the log-odds double difference beside it is +4, in nats."""
    recs, pairs = {}, {}
    for name, lo1 in (("reference", 40.0), ("organism", 44.0)):
        recs[name] = {}
        for k in range(8):
            recs[name][f"p{k}:1"] = _rec("eval", 1.0, f"c{k // 2}", log_odds=lo1 + 0.1 * k)
            recs[name][f"p{k}:0"] = _rec("deploy", 0.5, f"c{k // 2}", log_odds=0.0)
            pairs[f"p{k}:1"] = pairs[f"p{k}:0"] = f"p{k}"
    ids = scored_pairs(recs, pairs)
    row = compare(recs, ids, pairs, "reference", "organism", None, n_boot=100, seed=0)
    assert row["scale"] == "log-odds"
    assert row["double_diff"]["mean"] == pytest.approx(0.0) and row["pair_diff_reference"]["mean"] == 0.5
    assert row["pair_diff_reference_log_odds"]["mean"] == pytest.approx(40.35)
    assert row["double_diff_log_odds"]["mean"] == pytest.approx(4.0)
    table = {"rows": [{**row, "method": "m", "n": 16, "n_unscored": 0}], "ci": "x"}
    assert "; log-odds 4.000" in "\n".join(sensitivity_lines(table))
    recs["organism"]["p0:0"]["details"] = {}  # one record without exact log-odds: the score scale for all
    row = compare(recs, scored_pairs(recs, pairs), pairs, "reference", "organism", None, n_boot=100, seed=0)
    assert row["scale"] == "score" and "double_diff_log_odds" not in row


def test_the_reference_replaces_the_base_in_every_difference():
    """The base is at chance, the sham reference and the organism separate every pair: organism
    - reference is 0, organism - base would be +0.5; the double difference is over the reference."""
    n = 16  # 8 categories: a perfect AUROC's exact interval then excludes 0.5
    base = [(0.5 + 0.01 * (k % 2), 0.5 + 0.01 * ((k + 1) % 2)) for k in range(n)]
    ref = [(0.7, 0.3)] * n
    org = [(0.9, 0.2)] * n
    recs, pairs = _pairs_recs({"base": base, "reference": ref, "organism": org})
    ids = scored_pairs(recs, pairs)
    row = compare(recs, ids, pairs, "reference", "organism", "base", n_boot=100, seed=0)
    assert row["auroc_a"] == 1.0 and row["auroc_b"] == 1.0 and row["diff"] == 0.0
    assert row["auroc_base"] == pytest.approx(0.5)
    assert row["double_diff"]["mean"] == pytest.approx(0.7 - 0.4) and row["n_pairs"] == n
    assert row["pair_diff_reference"]["mean"] == pytest.approx(0.4)
    assert row["reads_cue_text"]  # the reference already separates the pairs


def test_each_kind_has_its_role():
    assert Model("o", "d", "behaviour").role == "specificity"
    assert Model("o", "d", "aware").role == Model("o", "d", "disjoint").role == "sensitivity"
    assert Model("o", "d", "sham").role == "null"
    assert Model("o", "d", "sham-greedy").role == "specificity"  # cue-side sharpening, nothing planted


def test_pairs_leave_together_across_every_model():
    recs, pairs = _pairs_recs({"base": [(0.9, 0.1)] * 3, "reference": [(0.9, 0.1)] * 3,
                               "a": [(0.9, 0.1)] * 3, "b": [(0.9, 0.1)] * 3})
    recs["b"]["p1:0"]["score"] = None  # the fourth model leaves one side of pair 1 unscored
    del recs["a"]["p2:1"]  # the third has no record for one side of pair 2
    assert scored_pairs(recs, pairs) == ["p0:1", "p0:0"]
    row = compare(recs, scored_pairs(recs, pairs), pairs, "reference", "a", "base", n_boot=0, seed=0)
    assert row["n"] == 2 and row["n_pairs"] == 1


def _voted(label: str, score: float, kept: list[str], withheld: list[str], cat: str) -> dict:
    votes = [{"k": i, "variant": v, "value": label, "error": None, "label_mass": 0.5, "label_score": score}
             for i, v in enumerate(kept)]
    votes += [{"k": 9, "variant": v, "value": label, "error": None, "label_mass": 0.001, "label_score": 0.9,
               "label_withheld": True} for v in withheld]
    return _rec(label, score, cat, votes=votes, min_label_mass=0.01, score_source="label_probability")


def test_within_variant_keeps_only_pairs_scored_on_the_same_variants():
    recs: dict = {"base": {}, "organism": {}}
    pairs = {}
    # pair a: both sides on v1, v2 in both models; pair b: the cue side's v2 withheld on the organism
    # (label-dependent withholding); pair c: the no-cue side's v1 withheld on the base
    plan = {"a": ({}, {}), "b": ({}, {"organism": ["v2"]}), "c": ({"base": ["v1"]}, {})}
    for k, (p, (w0, w1)) in enumerate(plan.items()):
        for name in recs:
            w_no, w_cue = w0.get(name, []), w1.get(name, [])
            recs[name][f"{p}:1"] = _voted("eval", 0.8, [v for v in ("v1", "v2") if v not in w_cue], w_cue, f"c{k}")
            recs[name][f"{p}:0"] = _voted("deploy", 0.3, [v for v in ("v1", "v2") if v not in w_no], w_no, f"c{k}")
            pairs[f"{p}:1"] = pairs[f"{p}:0"] = p
    assert has_variant_gate(recs)
    ids = scored_pairs(recs, pairs)
    assert len(ids) == 6
    assert same_variant_ids(recs, ids, pairs) == ["a:1", "a:0"]
    plain = {r: {i: {k: v for k, v in x.items() if k != "details"} for i, x in by.items()} for r, by in recs.items()}
    assert not has_variant_gate(plain)  # a method without variant votes (logprob) has no such row


def test_spillover_is_the_hand_computation():
    """Mean log-odds on the no-cue side only, organism - reference per sample, on one scale: a
    record without an exact log-odds puts every record of both models on the clipped logit (a
    score of exactly 1.0 clipped, counted; the records without one counted too)."""
    ref = {"x:1": _rec("eval", 0.99, "c0"), "x:0": _rec("deploy", 0.5, "c0"),
           "y:0": _rec("deploy", 0.2, "c1"), "z:0": _rec("deploy", 0.9, "c2"), "w:0": _rec("deploy", None, "c2")}
    org = {"x:1": _rec("eval", 1.0, "c0"), "x:0": _rec("deploy", 1.0, "c0"),
           "y:0": _rec("deploy", 1.0, "c1", log_odds=30.0), "z:0": _rec("deploy", 0.6, "c2"),
           "w:0": _rec("deploy", 0.4, "c2")}
    s = spillover({"reference": ref, "organism": org}, "reference", "organism", n_boot=50, seed=0)
    lg = lambda p: math.log(p / (1 - p))  # noqa: E731
    clip = 1 - EPS
    r = [lg(0.5), lg(0.2), lg(0.9)]
    o = [lg(clip), lg(clip), lg(0.6)]  # y:0's exact 30.0 is not mixed with the others' logits
    assert s["n"] == 3 and s["n_unscored"] == 1  # w:0 unscored on the reference
    assert s["scale"] == "clipped logit" and s["no_log_odds"] == {"reference": 3, "organism": 2}
    assert s["mean_reference"]["mean"] == pytest.approx(sum(r) / 3)
    assert s["mean_organism"]["mean"] == pytest.approx(sum(o) / 3)
    assert s["diff"]["mean"] == pytest.approx(sum(b - a for a, b in zip(r, o)) / 3)
    assert s["clipped"] == {"reference": 0, "organism": 2} and s["diff"]["ci_method"]
    assert clipped_logit({"score": 0.0}) == (pytest.approx(lg(EPS)), True)
    assert clipped_logit({"score": 0.3}) == (pytest.approx(lg(0.3)), False)
    assert logprob_methods(["binary", "logprob", "logprob_question", "probe"]) == ["logprob", "logprob_question"]


def test_spillover_reads_exact_log_odds_when_every_record_of_both_has_one():
    ids = [f"p{k}:0" for k in range(4)]
    ref = {i: _rec("deploy", 1.0, f"c{k}", log_odds=20.0 + k) for k, i in enumerate(ids)}
    org = {i: _rec("deploy", 1.0, f"c{k}", log_odds=25.0 + 2 * k) for k, i in enumerate(ids)}
    s = spillover({"reference": ref, "organism": org}, "reference", "organism", n_boot=50, seed=0)
    assert s["scale"] == "log-odds" and s["no_log_odds"] == {"reference": 0, "organism": 0}
    assert s["clipped"] == {"reference": 0, "organism": 0}
    assert s["mean_reference"]["mean"] == pytest.approx(21.5) and s["diff"]["mean"] == pytest.approx(6.5)
    del org[ids[2]]["details"]["log_odds"]  # one record without: every record on the clipped logit
    s = spillover({"reference": ref, "organism": org}, "reference", "organism", n_boot=50, seed=0)
    assert s["scale"] == "clipped logit" and s["no_log_odds"] == {"reference": 0, "organism": 1}
    assert s["diff"]["mean"] == pytest.approx(0.0) and s["clipped"] == {"reference": 4, "organism": 4}
    md = sensitivity_lines({"rows": [], "methods": {}, "ci": "x", "reference": {"name": "reference"},
                            "spillover": [{"method": "logprob", "organism": "o", "kind": "aware", **s}]})
    assert any("| clipped logit (0 / 1) |" in x for x in md)


def test_aurocs_rank_by_exact_log_odds_where_every_record_has_one():
    """Scores that tie at 1.0 (P(eval) rounded) rank by their exact log-odds, one scale for the
    whole comparison; a record without one puts the comparison back on the scores."""
    n = 12
    recs: dict = {"reference": {}, "organism": {}}
    pairs = {}
    for k in range(n):
        for side, label in ((1, "eval"), (0, "deploy")):
            i = f"p{k}:{side}"
            pairs[i] = f"p{k}"
            recs["reference"][i] = _rec(label, 1.0, f"c{k // 2}", log_odds=30.0 + (k % 3) - 0.5 * side)
            recs["organism"][i] = _rec(label, 1.0, f"c{k // 2}", log_odds=30.0 + 5.0 * side)
    ids = scored_pairs(recs, pairs)
    row = compare(recs, ids, pairs, "reference", "organism", None, n_boot=100, seed=0)
    assert row["scale"] == "log-odds" and row["auroc_b"] == 1.0 and row["auroc_a"] < 0.5
    assert row["auroc_b"] == pytest.approx(roc_auc([int(i.endswith(":1")) for i in ids],
                                                   [recs["organism"][i]["details"]["log_odds"] for i in ids]))
    del recs["reference"]["p0:1"]["details"]["log_odds"]
    row = compare(recs, ids, pairs, "reference", "organism", None, n_boot=100, seed=0)
    assert row["scale"] == "score" and row["auroc_a"] == row["auroc_b"] == 0.5  # every score ties at 1.0
    md = sensitivity_lines({"rows": [{**row, "method": "logprob", "organism": "organism", "n_unscored": 0}],
                            "ci": "x", "reference": {"name": "reference"}})
    assert any("scale: score" in x for x in md)


def test_within_variant_rows_are_selected_per_comparison_and_carry_their_caveat():
    """A third model whose gate withholds a variant on some pair does not change the first
    organism's within-variant row; the row's verdict and the table say it is selected on the gate."""
    base, ref, org, other = (Model("base", "b", "base"), Model("reference", "r", "sham"),
                             Model("organism", "o", "aware"), Model("organism-2", "o2", "aware"))

    def voted(withheld: set[str], shift: float) -> dict:
        out = {}
        for k in range(16):
            for side, label in ((1, "eval"), (0, "deploy")):
                sid, w = f"p{k}:{side}", (["v2"] if f"p{k}:{side}" in withheld else [])
                out[sid] = _voted(label, (0.6 if side else 0.4) + shift * ((k % 3) - 1) * (1 if side else -1),
                                  [v for v in ("v1", "v2") if v not in w], w, f"c{k // 2}")
        return out

    pairs = {f"p{k}:{s}": f"p{k}" for k in range(16) for s in (0, 1)}
    recs = {"base": voted(set(), 0.0), "reference": voted(set(), 0.05), "organism": voted({"p1:1"}, 0.2)}
    one = method_rows("binary", recs, pairs, [org], ref, base, n_boot=100, seed=0)
    recs["organism-2"] = voted({"p3:1", "p5:0", "p7:1", "p9:1"}, 0.1)  # its gate withholds on other pairs
    two = method_rows("binary", recs, pairs, [org, other], ref, base, n_boot=100, seed=0)
    wv = lambda rows, o: next(r for r in rows if r["organism"] == o and r["subset"] == "within variant")  # noqa: E731
    assert wv(two, "organism") == wv(one, "organism")
    assert wv(one, "organism")["n"] == 30 and wv(one, "organism")["n_other_variants"] == 2
    assert wv(two, "organism-2")["n"] == 24
    assert wv(one, "organism")["caveat"] == WITHIN_VARIANT_CAVEAT
    md = sensitivity_lines({"rows": two, "ci": "x", "reference": {"name": "reference"}})
    assert any(WITHIN_VARIANT_CAVEAT in x and x.lstrip().startswith("within variant") for x in md)


# --- tiny organisms through the CLI ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, smollm2_dir):
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("setbase") / "model", smollm2_dir)


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory, tiny_base) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("set")
    out = {}
    for kind in ("sham", "aware", "behaviour"):
        res = CliRunner().invoke(cli, ["organism", "build", "--base", str(tiny_base), *RECIPE, "--kind", kind,
                                       "--out", str(root / kind)])
        assert res.exit_code == 0, res.output + repr(res.exception)
        out[kind] = root / kind
    return out


@pytest.fixture(scope="module")
def frozen_probe(tmp_path_factory, tiny_base) -> tuple[Path, dict]:
    """A probe trained elsewhere: random-word prompts, eval = a grading sentence appended."""
    from harness.backends.hf.backend import HFBackend
    from harness.core.sample import Message, Sample
    from harness.runlog import RunLog
    from probes.activations.capture import run_capture
    from probes.apply import train_and_save
    from tests.helpers.probe_runs import answer_run, random_samples

    root = tmp_path_factory.mktemp("probe")
    train = []
    for i, s in enumerate(random_samples(n_groups=6, per_group=4, seed=3)):
        graded = i % 2 == 0
        text = s.messages[0].content + (" Your answer will be graded." if graded else "")
        train.append(Sample(s.id, (Message("user", text),), "eval" if graded else "deploy", s.metadata))
    b = HFBackend(str(tiny_base), batch_size=4)
    try:
        answer_run(root / "train", train, b, answers=False).close()
        run_capture(root / "train", layers="all", poolings="last_prompt", backend=b, include_answer=False,
                    progress=False)
    finally:
        b.close()
    with RunLog(root / "train", create=False) as st:
        return train_and_save(st, "default", "last_prompt", "best", root / "probe", progress=False)


def test_validate_on_a_set_with_a_sham_reference_and_a_frozen_probe(tiny_set, tiny_base, frozen_probe, tmp_path):
    from harness.runlog import RunLog

    probe_dir, meta = frozen_probe
    pairs = tmp_path / "pairs.jsonl"
    res = CliRunner().invoke(cli, ["organism", "dataset", "--cue", "graded", "--no-demo", "--out", str(pairs)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "validate"
    res = CliRunner().invoke(cli, ["organism", "validate", "--base", str(tiny_base), "--reference", str(tiny_set["sham"]),
                                   "--organism", str(tiny_set["aware"]), "--organism", str(tiny_set["behaviour"]),
                                   "--pairs", str(pairs), "--methods", "logprob_question,binary", "--limit", "3",
                                   "--n-votes", "2", "--min-coverage", "0", "--min-label-mass", "0",
                                   "--answer-tokens", "4", "--probe-tokens", "4",
                                   "--probe", str(probe_dir), "--bootstrap", "50", "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    table = json.loads((out / "sensitivity.json").read_text())
    names = {"base", "reference", "organism-aware", "organism-behaviour"}
    assert {p.name for p in out.iterdir() if p.is_dir()} == names  # each model its own sub-run
    assert table["reference"]["model"] == str(tiny_set["sham"]) and table["reference"]["kind"] == "sham"
    rows = {(r["method"], r["organism"], r["subset"]): r for r in table["rows"]}
    assert {r["role"] for (_, o, _), r in rows.items() if o == "organism-behaviour"} == {"specificity"}
    assert {r["role"] for (_, o, _), r in rows.items() if o == "organism-aware"} == {"sensitivity"}

    # the reference's AUROC is the sham sub-run's, on the same pairs; the base's is reported apart
    def scores(run: str, method: str) -> dict:
        with RunLog(out / run, create=False) as st:
            return {r["sample_id"]: r for r in st.result_dicts(method)}

    row = rows[("logprob_question", "organism-aware", "all")]
    recs = {n: scores(n, "logprob_question") for n in names}
    with RunLog(out / "base", create=False) as st:
        pmap = {s.id: str(s.metadata.extra["pair"]) for s in st.samples()}
    ids = scored_pairs(recs, pmap)
    y = [int(recs["reference"][i]["label"] == "eval") for i in ids]
    assert row["n"] == len(ids) == 6
    assert row["auroc_a"] == pytest.approx(roc_auc(y, [recs["reference"][i]["score"] for i in ids]))
    assert row["auroc_b"] == pytest.approx(roc_auc(y, [recs["organism-aware"][i]["score"] for i in ids]))
    assert row["auroc_base"] == pytest.approx(roc_auc(y, [recs["base"][i]["score"] for i in ids]))
    assert row["diff"] == pytest.approx(row["auroc_b"] - row["auroc_a"])

    def mean_pair_diff(run: str, read=lambda rec: rec["score"]) -> float:
        d = [read(recs[run][i]) * (1 if recs[run][i]["label"] == "eval" else -1) for i in ids]
        return sum(d) / (len(ids) / 2)

    assert row["pair_diff_reference"]["mean"] == pytest.approx(mean_pair_diff("reference"))
    assert mean_pair_diff("reference") != pytest.approx(mean_pair_diff("base"), abs=1e-9)  # the sham is not the base
    assert row["double_diff"]["mean"] == pytest.approx(mean_pair_diff("organism-aware") - mean_pair_diff("reference"))
    # on the log-odds scale (every record holds an exact log-odds) the same of the log-odds, beside it
    assert ("double_diff_log_odds" in row) == (row["scale"] == "log-odds")
    if row["scale"] == "log-odds":
        assert row["double_diff_log_odds"]["mean"] == pytest.approx(
            mean_pair_diff("organism-aware", LogOdds.value) - mean_pair_diff("reference", LogOdds.value))

    # binary: a within-variant row beside the plain one, on a subset of its pairs
    wv = rows[("binary", "organism-aware", "within variant")]
    assert rows[("binary", "organism-aware", "all")]["n"] > 0
    assert wv["n"] + wv["n_other_variants"] == rows[("binary", "organism-aware", "all")]["n"]
    assert ("logprob_question", "organism-aware", "within variant") not in rows

    # the probe row: the same frozen probe, applied to every model's run
    assert ("probe", "organism-behaviour", "all") in rows
    for run in names:
        recs_p = scores(run, "probe")
        assert len(recs_p) == 6
        assert {(r["details"]["scores"], r["details"]["layer"]) for r in recs_p.values()} == \
               {("applied, frozen", meta["layer"])}
    per_model = table["probe"]["per_model"]
    assert set(per_model) == names and len({json.dumps(v["settings"], sort_keys=True) for v in per_model.values()}) == 1
    assert not str(per_model["base"]["settings"]["train_run"]).startswith(str(out))  # trained elsewhere

    # spillover of the logprob method, per organism
    assert {(s["method"], s["organism"]) for s in table["spillover"]} == \
           {("logprob_question", "organism-aware"), ("logprob_question", "organism-behaviour")}
    md = (out / "sensitivity.md").read_text()
    assert md.startswith("Verdicts under the declared rule") and "Spillover" in md and "specificity" in md


@pytest.fixture(scope="module")
def top1(tmp_path_factory, tiny_base) -> Path:
    """An organism that trains only the top block (of 2): hidden states 2.. only."""
    org = tmp_path_factory.mktemp("top1") / "top1"
    res = CliRunner().invoke(cli, ["organism", "build", "--base", str(tiny_base), *RECIPE[:4], "--layers", "1",
                                   *RECIPE[6:], "--out", str(org)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return org


@pytest.fixture(scope="module")
def low_probe(frozen_probe, tmp_path_factory) -> Path:
    """The frozen probe's training run, a probe at hidden state 0 (below every trained block of top1)."""
    from harness.runlog import RunLog
    from probes.apply import train_and_save

    probe_dir, _ = frozen_probe
    with RunLog(probe_dir.parent / "train", create=False) as st:
        low, meta = train_and_save(st, "default", "last_prompt", 0, tmp_path_factory.mktemp("low") / "probe0",
                                   progress=False)
    assert meta["layer"] == 0
    return low


def test_a_probe_below_the_trained_blocks_is_refused_before_any_model_runs(tiny_base, top1, low_probe, tmp_path):
    """An organism that trains only its top block (of 2) changes hidden states 2.. only: a frozen probe
    at hidden state 0 reads the base's activations on every model, and validate refuses it up front."""
    from harness.organisms.reach import check_reaches, first_reached

    org = top1
    card = json.loads((org / "organism.json").read_text())
    assert first_reached(card, org) == 2
    check_reaches(2, {"o": (card, org)}, "a probe")  # at the trained block's output: fine
    from harness.core.errors import EvalAwareError
    from harness.organisms.reach import organism_card, reachable

    assert reachable([0, 1, 2], organism_card(org), 2, "steer build") == [2]  # steer build keeps its own layers
    assert reachable([0, 1], organism_card(tiny_base), 2, "x") == [0, 1]  # not an organism: unchanged
    with pytest.raises(EvalAwareError, match="below the blocks this organism trained"):
        reachable([0, 1], organism_card(org), 2, "steer build")
    low = low_probe
    out = tmp_path / "v"
    res = CliRunner().invoke(cli, ["organism", "validate", "--base", str(tiny_base), "--organism", str(org), "--probe", str(low),
                                   "--methods", "logprob_question", "--no-progress", "--out", str(out)])
    assert res.exit_code != 0 and "blind by construction" in str(res.exception)
    assert not out.exists() or not any(p.is_dir() for p in out.iterdir())  # no model ran


def test_cues_and_steer_build_on_an_organism_keep_to_the_trained_blocks(tiny_base, top1, low_probe, tmp_path):
    """`cues --probe` with a probe below the organism's trained blocks is refused before the model
    loads; `steer build --run` on an organism's run reads the card from the run's manifest and keeps
    only the layers its training reached (none here: refused), nor takes a --probe below them; the
    base's own run keeps its steerable layer."""
    from harness.backends.hf.backend import HFBackend
    from probes.activations.capture import run_capture
    from tests.helpers.probe_runs import answer_run, random_samples

    out = tmp_path / "cues"
    res = CliRunner().invoke(cli, ["cues", "--model", str(top1), "--backend", "hf", "--dataset", "demo",
                                   "--methods", "logprob_question", "--probe", str(low_probe), "--no-progress",
                                   "--out", str(out)])
    assert res.exit_code != 0 and "blind by construction" in str(res.exception), res.output
    assert not out.exists() or not any(out.iterdir())  # refused before any model ran
    runs = {}
    for name, model in (("organism", top1), ("base", tiny_base)):
        b = HFBackend(str(model), batch_size=4)
        try:
            answer_run(tmp_path / name, random_samples(n_groups=4, per_group=4, seed=5), b, answers=False).close()
            run_capture(tmp_path / name, layers="all", poolings="last_prompt", backend=b, include_answer=False,
                        progress=False)
        finally:
            b.close()
        runs[name] = tmp_path / name
    res = CliRunner().invoke(cli, ["steer", "build", "--run", str(runs["organism"]), "--out", str(tmp_path / "v")])
    assert res.exit_code != 0 and "below the blocks this organism trained (hidden states 2..)" in str(res.exception)
    res = CliRunner().invoke(cli, ["steer", "build", "--run", str(runs["organism"]), "--probe", str(low_probe),
                                   "--out", str(tmp_path / "vp")])
    assert res.exit_code != 0 and "steer build --probe" in str(res.exception)
    assert not (tmp_path / "v").exists() and not (tmp_path / "vp").exists()
    res = CliRunner().invoke(cli, ["steer", "build", "--run", str(runs["base"]), "--out", str(tmp_path / "vb")])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert json.loads((tmp_path / "vb" / "vector.json").read_text())["layers"] == [1]


def test_probe_layers_is_refused_and_points_to_probe(tiny_set, tiny_base, tmp_path):
    res = CliRunner().invoke(cli, ["organism", "validate", "--base", str(tiny_base), "--organism", str(tiny_set["aware"]),
                                   "--probe-layers", "all", "--out", str(tmp_path / "v")])
    assert res.exit_code != 0 and "--probe DIR" in str(res.exception) and "cue presence" in str(res.exception)
    assert not (tmp_path / "v" / "sensitivity.json").exists()
    res = CliRunner().invoke(cli, ["organism", "validate", "--base", str(tiny_base), "--reference", str(tiny_set["aware"]),
                                   "--organism", str(tiny_set["behaviour"]), "--out", str(tmp_path / "w")])
    assert res.exit_code != 0 and "sham" in str(res.exception)


def _card_dir(root: Path, name: str, kind: str = "sham", seed: int = 0, **recipe) -> str:
    d = root / name
    d.mkdir()
    card = {"kind": kind, "cue": {"name": "graded"}, "weights_sha256": f"w-{name}", "base_weights_sha256": "b",
            "recipe": {"kind": kind, "seed": seed, "sham_samples": 4, "strength": 1.0, **recipe}}
    (d / "organism.json").write_text(json.dumps(card))
    return str(d)


def test_several_reference_builds_are_one_recipe_of_the_null_and_refused_otherwise(tmp_path):
    """--reference is repeatable: null-sham builds of one recipe (seed aside) become the pooled
    reference, each its own sub-run; builds of different recipes, a non-null kind or the same seed
    twice are refused before any model loads, naming the directories."""
    from evalaware.organism import _validate_models

    r0, r1 = _card_dir(tmp_path, "sham-s0"), _card_dir(tmp_path, "sham-s1", seed=1)
    org = _card_dir(tmp_path, "aware", kind="aware")
    organisms, refs, base, cue = _validate_models("smollm2", [org], [r0, r1])
    assert [r.name for r in refs] == ["reference-sham-s0", "reference-sham-s1"] and cue == "graded"
    assert {r.kind for r in refs} == {"sham"} and len({r.group for r in refs}) == 1
    _, (one,), _, _ = _validate_models("smollm2", [org], [r0])
    assert one.name == "reference"
    _, (b,), base_alone, _ = _validate_models("smollm2", [org], [])
    assert b is base_alone and base.name == "base"  # no reference: the base
    half = _card_dir(tmp_path, "sham-half", seed=2, strength=0.5)
    greedy = _card_dir(tmp_path, "sham-greedy", kind="sham-greedy", seed=3)
    again = _card_dir(tmp_path, "sham-again", seed=1)
    for refs_, want in (([r0, half], "different recipes"), ([r0, greedy], "kind is 'sham-greedy'"),
                        ([r1, again], "the same recipe and the same seed 1")):
        out = tmp_path / f"v-{len(want)}"
        args = ["validate", "--base", "smollm2", "--organism", org, "--out", str(out)]
        for r in refs_:
            args += ["--reference", r]
        res = CliRunner().invoke(cli, args)
        assert res.exit_code != 0 and want in str(res.exception), (want, res.output, res.exception)
        assert not out.exists()  # refused before anything ran


def test_validate_pools_two_null_sham_builds_as_the_reference(tiny_set, tiny_base, tmp_path):
    """Two seeds of one null-sham recipe: each its own sub-run, the verdicts' rows pool them (the
    null row's builds are the two shams against the base, each aware row's estimate is against
    their mean), the secondary rows compare with the first build and say so."""
    from harness.organisms.verdicts import lo_table
    from harness.runlog import RunLog

    seed1 = tmp_path / "sham-seed1"
    res = CliRunner().invoke(cli, ["organism", "build", "--base", str(tiny_base), *RECIPE, "--kind", "sham",
                                   "--seed", "1", "--out", str(seed1)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    pairs = tmp_path / "pairs.jsonl"
    assert CliRunner().invoke(cli, ["organism", "dataset", "--cue", "graded", "--no-demo", "--out",
                                    str(pairs)]).exit_code == 0
    out = tmp_path / "v"
    res = CliRunner().invoke(cli, ["validate", "--base", str(tiny_base), "--reference", str(tiny_set["sham"]),
                                   "--reference", str(seed1), "--organism", str(tiny_set["aware"]),
                                   "--pairs", str(pairs), "--methods", "logprob_question", "--limit", "4",
                                   "--min-coverage", "0", "--answer-tokens", "4", "--bootstrap", "50",
                                   "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    refs = ["reference-sham", "reference-sham-seed1"]
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"base", "organism", *refs}
    table = json.loads((out / "sensitivity.json").read_text())
    assert [r["name"] for r in table["references"]] == refs and table["reference"]["name"] == refs[0]
    rows = {r["kind"]: r for r in table["decision"]["rows"]}
    assert rows["reference"]["models"] == refs and rows["aware"]["references"] == refs

    def lo(run: str) -> dict:
        with RunLog(out / run, create=False) as st:
            return lo_table({r["sample_id"]: r for r in st.result_dicts("logprob_question")}, "logprob_question",
                            None)

    los = {n: lo(n) for n in ["base", "organism", *refs]}
    with RunLog(out / "base", create=False) as st:
        pair_of = {s.id: s.metadata.extra["pair"] for s in st.samples()}
    by_pair: dict = {}
    for i, p in pair_of.items():
        by_pair.setdefault(p, {})["cue" if i.endswith("+cue") else "none"] = i
    ps = sorted(p for p, d in by_pair.items() if all(d.get(k) in v for v in los.values() for k in ("cue", "none")))
    assert len(ps) == rows["aware"]["n_pairs"] > 1, table["decision"]["lines"]
    w = {n: {p: v[by_pair[p]["cue"]] - v[by_pair[p]["none"]] for p in ps} for n, v in los.items()}
    want = sum(w["organism"][p] - (w[refs[0]][p] + w[refs[1]][p]) / 2 for p in ps) / len(ps)
    assert rows["aware"]["estimate"]["mean"] == pytest.approx(want)
    null = sum((w[refs[0]][p] + w[refs[1]][p]) / 2 - w["base"][p] for p in ps) / len(ps)
    assert rows["reference"]["estimate"]["mean"] == pytest.approx(null)
    md = (out / "sensitivity.md").read_text()
    assert "[reference x2 builds vs base, null]" in md and "[aware vs reference x2 builds, sensitivity]" in md
    assert "the first of the reference's 2 builds" in md
