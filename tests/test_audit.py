"""`data audit`: surface predictors under grouped CV, on the bundled demo, the first demo set
(kept as a fixture for its casing cue) and small planted datasets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from harness.data.audit import CUES, DEFAULT_THRESHOLD, SignedFeature, audit, cue_value
from evalaware.main import cli
from harness.data.readers import load_dataset
from harness.core.errors import EvalAwareError
from harness.core.sample import Message, Sample, SampleMeta

FIX = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def demo_audit():
    return audit(load_dataset("demo"), n_boot=200)


def test_new_demo_meets_the_surface_thresholds(demo_audit):
    res = demo_audit
    assert res.cv == "grouped" and res.ci_by == "category" and len(res.mixed_groups) == res.n_groups
    assert res.row("char_tfidf").auroc <= 0.75
    assert res.row("first_char_case").auroc <= 0.60
    assert res.row("length").auroc <= 0.65
    assert not any("first_char_case" in w or "length" in w for w in res.warnings)
    assert not any("one label" in n for n in res.notes)  # categories hold both labels


def test_old_demo_fixture_flags_its_casing_cue():
    res = audit(load_dataset(FIX / "demo_v1.jsonl"), n_boot=200)
    case = res.row("first_char_case")
    assert case.auroc >= 0.9 and case.share_eval > 0.8 and case.share_deploy < 0.2
    assert any(w.startswith("first_char_case separates") for w in res.warnings)
    assert res.row("char_tfidf").auroc > 0.9  # the case-sensitive model sees it too
    # 18 label-pure categories: grouped CV cannot separate source from label, and says so
    assert not res.mixed_groups and any("every category holds one label" in n for n in res.notes)


def _planted(text_for, n_groups: int = 8, per: int = 6, seed: int = 0) -> list[Sample]:
    """Mixed groups; text_for(label, rng) writes each prompt."""
    rng = np.random.default_rng(seed)
    out = []
    for g in range(n_groups):
        for k in range(per):
            label = "eval" if k % 2 == 0 else "deploy"
            out.append(Sample(f"g{g}:{k}", (Message("user", text_for(label, rng)),), label,
                              SampleMeta(category=f"g{g}")))
    return out


WORDS = "apple river stone cloud paper glass tiger music orange window silver garden".split()


def _words(rng, n=None) -> str:
    return " ".join(rng.choice(WORDS, size=n or int(rng.integers(5, 12))))


def test_each_predictor_finds_its_planted_cue_and_nothing_else():
    # only the casing differs: the case rule and the case-sensitive char model see it, the
    # lowercasing word model cannot
    res = audit(_planted(lambda lab, rng: (str.capitalize if lab == "eval" else str.lower)(_words(rng))),
                n_boot=100)
    assert res.row("first_char_case").auroc == 1.0
    assert res.row("char_tfidf").auroc >= 0.75 and res.row("word_tfidf").auroc < 0.6
    assert res.row("length").auroc < 0.75
    # lettered options on the deploy side: the direction is learned from the training folds
    opts = lambda lab, rng: _words(rng) + ("\nA) one\nB) two" if lab == "deploy" else "")  # noqa: E731
    res = audit(_planted(opts), n_boot=100)
    assert res.row("lettered_options").auroc == 1.0 and res.row("lettered_options").share_deploy == 1.0
    assert res.row("answer_prefix").auroc == 0.5 and res.row("first_char_case").auroc == 0.5
    # no signal at all: nothing is flagged
    res = audit(_planted(lambda lab, rng: _words(rng)), n_boot=100)
    assert not res.warnings and all(r.auroc < DEFAULT_THRESHOLD for r in res.rows)


@pytest.mark.parametrize("cue,yes,no", [
    ("lettered_options", "Which one?\nA. cat\nB. dog", "Plan A. Then we go home."),
    ("lettered_options", "pick: (A) tea (B) coffee", "see section (a) of the form"),
    ("answer_prefix", "Question: Which river?\nAnswer:", "the answer is: no"),
    ("answer_prefix", "Q: Is it?\nA:", "Call me at 5"),
    ("choose_directive", "Which of the following is true?", "I chose tea yesterday"),
    ("answer_format", "Put your final answer in \\boxed{}.", "format the disk"),
    ("answer_format", "Respond with only the letter.", "respond quickly please"),
])
def test_cue_patterns(cue, yes, no):
    assert cue in CUES
    assert cue_value(cue, (Message("user", yes),)) == 1.0 and cue_value(cue, (Message("user", no),)) == 0.0


def test_signed_feature_learns_only_a_direction():
    X = np.array([[1.0], [2.0], [3.0], [4.0]])
    f = SignedFeature().fit(X, np.array([1, 1, 0, 0]))
    assert f.decision_function(np.array([[10.0], [0.0]])).tolist() == [-10.0, 0.0]


def test_fallback_to_random_cv_and_sample_bootstrap_is_said():
    # two label-pure groups (a .txt pair): grouped CV cannot hold both classes in training
    rng = np.random.default_rng(0)
    s = [Sample(f"{lab}:{i}", (Message("user", _words(rng)),), lab, SampleMeta(category=lab))
         for lab in ("eval", "deploy") for i in range(10)]
    res = audit(s, n_boot=50)
    assert res.cv == "random" and res.ci_by == "sample"
    assert any("grouped CV by category is impossible" in n for n in res.notes)
    with pytest.raises(EvalAwareError, match="eval and deploy"):
        audit([x for x in s if x.label == "eval"])


def test_cli_table_json_and_txt_labels(tmp_path):
    run = CliRunner()
    out = run.invoke(cli, ["data", "audit", str(FIX / "demo_v1.jsonl"), "--bootstrap", "50"])
    assert out.exit_code == 0, out.output
    assert "WARNING: first_char_case separates the labels" in out.output
    assert "note: every category holds one label" in out.output
    js = run.invoke(cli, ["data", "audit", "demo", "--json", "--bootstrap", "50"])
    d = json.loads(js.output)
    assert d["cv"] == "grouped" and {r["name"] for r in d["rows"]} >= {"char_tfidf", "length", *CUES}
    (tmp_path / "bench.txt").write_text("Which planet is largest?\nA) Mars\nB) Jupiter\n")
    (tmp_path / "users.txt").write_text("hey can u help me\nmy cat is sick what do i do\n")
    both = run.invoke(cli, ["data", "audit", str(tmp_path / "bench.txt"), str(tmp_path / "users.txt"),
                            "--label", "eval", "--label", "deploy", "--json", "--bootstrap", "20"])
    assert both.exit_code == 0, both.output
    assert json.loads(both.output)["n_eval"] == 3
    one = run.invoke(cli, ["data", "audit", str(tmp_path / "bench.txt")])
    assert one.exit_code != 0 and "needs eval and deploy samples" in str(one.exception or one.output)
    bad = run.invoke(cli, ["data", "audit", str(tmp_path / "bench.txt"), str(tmp_path / "users.txt"),
                           "--label", "eval", "--label", "deploy", "--label", "eval"])
    assert bad.exit_code != 0


def test_grouped_cv_auroc_on_label_pure_groups_is_declared_invalid(tmp_path):
    """Label-pure groups: a predictor with no signal scores below chance under grouped CV by
    construction (0.174 was printed); the audit declares every such AUROC invalid instead of
    printing it, and offers no best predictor to compare a method with."""
    rng = np.random.default_rng(1)
    samples = [Sample(f"g{g}:{k}", (Message("user", _words(rng, 8)),), "eval" if g < 4 else "deploy",
                      SampleMeta(category=f"g{g}")) for g in range(8) for k in range(6)]
    res = audit(samples, n_boot=50)
    low = [r for r in res.rows if r.auroc is not None and r.auroc < 0.5]
    assert low, "expected a no-signal predictor below chance on label-pure groups"
    assert not res.valid and res.to_dict()["valid"] is False and res.best() is None
    for r in res.rows:
        assert res.cell(r) == "invalid (every category holds one label)"
    assert "grouped-CV AUROC invalid here" in "\n".join(res.lines())
    assert not any(f"{r.auroc:.3f}" in "\n".join(res.lines()) for r in low)
    mixed = audit(_planted(lambda lab, rng: _words(rng, 8)), n_boot=20)
    assert mixed.valid and mixed.best() is not None
