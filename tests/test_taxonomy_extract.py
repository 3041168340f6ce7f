"""Evidence extraction from motivation records (no models)."""

from __future__ import annotations

import re

import pytest

from harness.taxonomy import TaxonomyError
from harness.taxonomy.extract import extract_features, feature_key, normalize_text
from tests.helpers.taxonomy_texts import motivation_records


def vote(k, aware, evidence, answer="The user seems to be testing me with a multiple choice quiz."):
    return {"k": k, "variant": f"motivation/v{k + 1}", "answer": answer,
            "judge": {"aware": aware, "evidence": evidence, "raw": "", "error": None}}


def record(sid, prediction, votes, label="eval"):
    return {"sample_id": sid, "method": "motivation", "label": label, "prediction": prediction,
            "category": "mmlu", "details": {"votes": votes}}


def test_aware_votes_of_eval_records_only():
    ev = [{"quote": "multiple choice quiz", "feature": "Multiple-choice format", "verified": True}]
    recs = [record("a", "eval", [vote(0, True, ev), vote(1, True, ev), vote(2, False, [])]),
            record("b", "deploy", [vote(0, True, ev), vote(1, False, []), vote(2, None, [])]),
            record("c", "eval", [vote(0, True, ev), vote(1, True, []), vote(2, False, ev)])]
    feats, st = extract_features(recs)
    assert [(f.sample_id, f.vote) for f in feats] == [("a", 0), ("a", 1), ("c", 0)]
    assert st.records == 3 and st.records_eval == 2 and st.votes_aware == 5 and st.votes_unjudged == 1
    assert st.samples_with_features == 2
    # scope "votes": the minority aware vote of b counts too; the unaware vote of c never does
    feats, _ = extract_features(recs, scope="votes")
    assert [(f.sample_id, f.vote) for f in feats] == [("a", 0), ("a", 1), ("b", 0), ("c", 0)]
    assert feats[0].label == "eval" and feats[0].category == "mmlu" and feats[0].variant == "motivation/v1"


def test_unverified_quotes_kept_and_flagged_and_merged():
    ev = [{"quote": "Options: A) 1 B) 2", "feature": "lettered options", "verified": True},
          {"quote": "made-up quote", "feature": "Lettered options.", "verified": False},
          {"quote": "multiple choice", "feature": "  asks to pick   one  ", "verified": None},
          {"quote": "not in answer", "feature": "something else"}]
    feats, st = extract_features([record("a", "eval", [vote(0, True, ev)])])
    assert [f.text for f in feats] == ["lettered options", "asks to pick one", "something else"]
    assert [(q.text, q.verified) for q in feats[0].quotes] == [("Options: A) 1 B) 2", True),
                                                                ("made-up quote", False)]
    # verified missing -> computed against the vote's answer (case and whitespace-insensitive)
    assert feats[1].quotes[0].verified is True and feats[2].quotes[0].verified is False
    assert st.quotes == 4 and st.quotes_unverified == 2


def test_feature_falls_back_to_quote_and_empty_items_skipped():
    ev = [{"quote": "Answer with A, B, C or D", "feature": ""}, {"quote": "", "feature": None},
          {"quote": "looks like a benchmark", "feature": "None stated."}]
    feats, st = extract_features([record("a", "eval", [vote(0, True, ev)])])
    assert [f.text for f in feats] == ["Answer with A, B, C or D", "looks like a benchmark"]
    assert all(f.from_quote for f in feats)
    assert st.evidence_skipped == 1 and st.features_from_quote == 2


def test_normalisation():
    assert normalize_text('  "Multiple-choice\n format."  ') == "Multiple-choice format"
    assert feature_key("Multiple-Choice  FORMAT") == "multiple-choice format"


@pytest.mark.parametrize("bad, msg", [
    ([{"sample_id": "x"}], "record 0 (sample_id='x'): field 'details.votes'"),
    (["nope"], "record 0: expected an object"),
    ([{"details": {"votes": []}}], "record 0: field 'sample_id'"),
    ([record("x", "eval", [vote(0, True, "quote")])], "vote 0: field 'judge.evidence' must be a list"),
    ([record("x", "eval", [vote(0, True, [{"quote": 3, "feature": "f"}])])], "evidence[0].quote"),
    ([record("x", "eval", [{"k": 0, "judge": "yes"}])], "vote 0: field 'judge' must be an object"),
])
def test_bad_records_name_the_record_and_field(bad, msg):
    with pytest.raises(TaxonomyError, match=re.escape(msg)):
        extract_features(bad)
    with pytest.raises(TaxonomyError, match="scope"):
        extract_features([], scope="all")


def test_synthetic_records_match_schema():
    recs, samples = motivation_records(20, seed=1)
    feats, st = extract_features(recs)
    assert st.records == 20 and st.features == len(feats) > 0
    assert {f.sample_id for f in feats} <= {s.id for s in samples}
    assert all(s.label == "eval" for s in samples if s.id in {f.sample_id for f in feats})
