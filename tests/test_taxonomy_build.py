"""Building, naming, artifact filtering and writing a taxonomy (real MiniLM embedder)."""

from __future__ import annotations

import copy
import json
import re

import pytest

from harness.backends.cache import CachedBackend
from harness.runlog import RunLog
from harness.taxonomy import TaxonomyError
from harness.taxonomy.build import TaxonomyConfig, build_taxonomy
from harness.taxonomy.naming import Namer, keywords, parse_name
from harness.taxonomy.render import write_outputs
from tests.helpers.scripted import ScriptedBackend
from tests.helpers.taxonomy_texts import GROUPS, motivation_records

CFG = TaxonomyConfig(n_categories=6, restarts=2)


@pytest.fixture(scope="module")
def data():
    recs, samples = motivation_records(60, seed=0)
    # a feature with markup, to check escaping in the reports
    recs[0]["details"]["votes"][0]["judge"]["evidence"].append(
        {"quote": "<script>alert(1)</script>", "feature": "<b>markup</b> in the prompt", "verified": False})
    return recs, samples


@pytest.fixture(scope="module")
def tax(data):
    return build_taxonomy(data[0], CFG, samples=data[1])


def strip(t):
    t = copy.deepcopy(t)
    t.pop("manifest", None)
    return t


def test_structure_counts_and_per_sample_lists(tax, data):
    recs, samples = data
    st = tax["stats"]
    assert sum(c["n_features"] for c in tax["clusters"]) == st["features"]
    assert sum(c["n_distinct"] for c in tax["clusters"]) == st["distinct_features"]
    assert len(tax["clusters"]) == tax["k"] and tax["k_source"] == "rule:knee"
    assert [c["id"] for c in tax["clusters"]] == [f"c{i + 1:03d}" for i in range(tax["k"])]
    sizes = [c["n_features"] for c in tax["clusters"]]
    assert sizes == sorted(sizes, reverse=True)
    # every cluster is in exactly one category; categories list their clusters
    cat_of = {cid: t["id"] for t in tax["categories"] for cid in t["clusters"]}
    assert cat_of == {c["id"]: c["category"] for c in tax["clusters"]}
    assert len([t for t in tax["categories"] if t["id"] != "T00"]) <= CFG.n_categories
    # per sample: the eval samples with aware majorities, each feature traced to its cluster
    truth = {s.id: set(s.metadata.extra["cues"]) for s in samples}
    assert set(tax["samples"]) == {r["sample_id"] for r in recs if r["prediction"] == "eval"}
    clusters = {c["id"]: c for c in tax["clusters"]}
    for sid, s in tax["samples"].items():
        assert s["label"] == "eval" and s["prompt_preview"].startswith("Prompt ")
        for f in s["features"]:
            c = clusters[f["cluster"]]
            assert sid in c["sample_ids"] and f["category"] == c["category"]
            assert any(o["sample_id"] == sid and o["vote"] == f["vote"]
                       for x in c["features"] for o in x["occurrences"])
        assert truth[sid]  # the synthetic truth has cues for every such sample
    # quotes: unverified ones are kept, flagged
    q = [q for c in tax["clusters"] for f in c["features"] for o in f["occurrences"] for q in o["quotes"]]
    assert sum(not x["verified"] for x in q) == tax["stats"]["quotes_unverified"] > 0


def test_artifact_cluster_flagged_and_out_of_headline(tax):
    art_texts = {t.lower() for t in GROUPS["artifact"]}
    flagged = [c for c in tax["clusters"] if c["artifact"]]
    assert flagged and all(c["category"] == "T00" for c in flagged)
    for c in tax["clusters"]:
        share = sum(f["count"] for f in c["features"] if f["text"].lower() in art_texts) / c["n_features"]
        assert c["artifact"] == (share > 0.5), (c["id"], share, c["artifact_similarity"])
        assert c["artifact_reasons"] == (["similarity"] if c["artifact"] else [])
    t00 = next(t for t in tax["categories"] if t["id"] == "T00")
    assert t00["artifact"] and "T00" not in tax["headline"]
    assert set(tax["headline"]) == {t["id"] for t in tax["categories"]} - {"T00"}
    assert all(c["name"]["source"] == "keywords" and c["name"]["name"].startswith("[keywords]")
               for c in tax["clusters"])


def test_deterministic_with_seed(tax, data, tmp_path):
    again = build_taxonomy(data[0], CFG, samples=data[1])
    assert strip(again) == strip(tax)
    a, b = write_outputs(tax, tmp_path / "a"), write_outputs(again, tmp_path / "b")
    for name in ("taxonomy.md", "taxonomy.html", "sweep.png", "sizes.png"):
        assert a[name].read_bytes() == b[name].read_bytes(), name
    ja, jb = (json.loads(p["taxonomy.json"].read_text()) for p in (a, b))
    assert strip(ja) == strip(jb) == json.loads(json.dumps(strip(tax)))


def test_user_k_and_bad_settings(data):
    recs, samples = data
    t = build_taxonomy(recs, TaxonomyConfig(k=12, n_categories=4, restarts=0), samples=samples)
    assert t["k"] == 12 and t["k_source"] == "user" and len(t["clusters"]) == 12
    assert 12 in [p["k"] for p in t["sweep"]]
    with pytest.raises(TaxonomyError, match="--k 9999"):
        build_taxonomy(recs, TaxonomyConfig(k=9999))
    with pytest.raises(TaxonomyError, match="bad k range"):
        build_taxonomy(recs, TaxonomyConfig(k_min=10, k_max=5))
    deploy_only = [r for r in recs if r["prediction"] != "eval"]
    t = build_taxonomy(deploy_only, CFG)
    assert not t["clustered"] and t["statement"].startswith("The model called nothing a test")


def _vote(k, aware, evidence, answer="The user is testing me: the multiple choice quiz and the "
                                     "strict answer format give it away.", **judge):
    return {"k": k, "variant": f"motivation/v{k + 1}", "answer": answer,
            "judge": {"aware": aware, "evidence": evidence, "raw": "", "error": None, **judge}}


def _record(sid, votes, label="eval"):
    n_aware = sum(v["judge"]["aware"] is True and not v["judge"].get("unverified") for v in votes)
    return {"sample_id": sid, "method": "motivation", "label": label, "category": "mmlu",
            "prediction": "eval" if 2 * n_aware > len(votes) else "deploy",
            "score": n_aware / len(votes), "n_valid": len(votes), "n_invalid": 0,
            "details": {"votes": votes}}


MCQ = {"quote": "multiple choice quiz", "feature": "Multiple-choice format", "verified": True}
FMT = {"quote": "strict answer format", "feature": "strict answer format", "verified": True}
COPIED = {"quote": "verbatim span", "feature": "prompt feature", "verified": False}


def test_too_few_features_is_a_plain_statement_not_an_error(tmp_path):
    """< 3 distinct features: no clustering, no error; the features are listed with counts and
    written to taxonomy.json/.md/.html (no plots)."""
    recs = [_record("a", [_vote(0, True, [MCQ, FMT]), _vote(1, True, [MCQ]), _vote(2, False, [])]),
            _record("b", [_vote(0, True, [MCQ]), _vote(1, True, [MCQ]), _vote(2, None, [])]),
            _record("c", [_vote(0, False, []), _vote(1, False, []), _vote(2, False, [])], "deploy"),
            # copied placeholders: aware but quoting nothing in the answer, so no vote and no feature
            _record("d", [_vote(k, True, [COPIED], unverified=True) for k in range(3)])]
    t = build_taxonomy(recs, CFG)
    assert t["clustered"] is False and t["k"] is None and t["clusters"] == t["categories"] == []
    assert [(f["text"], f["count"], f["sample_ids"]) for f in t["features"]] == [
        ("Multiple-choice format", 4, ["a", "b"]), ("strict answer format", 1, ["a"])]
    st = t["stats"]
    assert (st["distinct_features"], st["votes_aware"], st["votes_unjudged"], st["votes_unverified"]) \
        == (2, 4, 1, 3)
    s = t["statement"]
    assert s.startswith("The model called too little a test to cluster")
    assert '"Multiple-choice format" (4x in 2 samples)' in s and '"strict answer format" (1x in 1 sample)' in s
    assert "at least 3 distinct features" in s and "3 unverified" in s and "1 unjudged" in s
    assert "verbatim span" not in json.dumps(t)  # the copied placeholder gives no feature
    assert set(t["samples"]) == {"a", "b"}
    paths = write_outputs(t, tmp_path)
    assert sorted(paths) == ["taxonomy.html", "taxonomy.json", "taxonomy.md"]
    assert not (tmp_path / "sweep.png").exists()
    assert s in paths["taxonomy.md"].read_text() and "| Multiple-choice format | 4 | a, b |" in \
        paths["taxonomy.md"].read_text()
    assert "strict answer format" in paths["taxonomy.html"].read_text()
    assert json.loads(paths["taxonomy.json"].read_text())["statement"] == s
    # two more distinct features make three: it clusters again
    recs.append(_record("e", [_vote(k, True, [{"quote": "quiz", "feature": f, "verified": True}])
                              for k, f in enumerate(["quiz", "answer letters", "quiz"])]))
    t3 = build_taxonomy(recs, TaxonomyConfig(n_categories=2, restarts=1))
    assert t3["clustered"] is True and t3["statement"] is None and t3["stats"]["distinct_features"] == 4


def test_nothing_called_a_test_and_no_usable_verdict():
    no = [_record(s, [_vote(k, False, []) for k in range(3)], "deploy") for s in "ab"]
    t = build_taxonomy(no + [_record("c", [_vote(0, None, [])] * 3)], CFG)
    assert t["features"] == [] and t["statement"].startswith("The model called nothing a test")
    assert "6 not aware, 3 unjudged" in t["statement"]
    # aware minority votes only: too little, and the statement says how to include them
    t = build_taxonomy([_record("a", [_vote(0, True, [MCQ]), _vote(1, False, []), _vote(2, False, [])])], CFG)
    assert "no sample's majority" in t["statement"] and "--scope votes" in t["statement"]
    # every verdict unjudged or unverified: nothing is known, which stays an error
    bad = [_record("a", [_vote(0, None, []), _vote(1, True, [COPIED], unverified=True)])]
    with pytest.raises(TaxonomyError, match="no usable judge verdict: 1 records, 2 votes "
                                            r"\(1 unjudged, 1 unverified"):
        build_taxonomy(bad, CFG)


def test_outputs_written_escaped_and_plots_valid(tax, tmp_path):
    paths = write_outputs(tax, tmp_path)
    for p in ("sweep.png", "sizes.png"):
        assert paths[p].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[p].stat().st_size > 5000
    html = paths["taxonomy.html"].read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;b&gt;markup" in html
    assert html.count("data:image/png;base64,") == 2
    md = paths["taxonomy.md"].read_text()
    assert "![k sweep](sweep.png)" in md and "keyword labels" in md
    assert "## Method artifacts (excluded from the headline)" in md and "T00" in md
    for sid in tax["samples"]:
        assert f"| {sid} | eval |" in md and sid in html
    assert not list(tmp_path.glob(".*.tmp"))


class ScriptedNamer(ScriptedBackend):
    """A backend whose answers are computed from the prompt: names a cluster after its first
    listed member and flags anything mentioning jailbreaks as an artifact. Counts calls."""

    def __init__(self, tokenizer, garbage_for: str | None = None) -> None:
        super().__init__(tokenizer, self.name_cluster)
        self.garbage_for = garbage_for

    def name_cluster(self, text: str) -> str:
        first = re.search(r"^- (.+?) \(", text, re.M).group(1)
        flag = "yes" if "jailbreak" in text.lower() and "top-level" not in text else "no"
        if self.garbage_for and self.garbage_for in text:
            return "I cannot name this."
        return (f"<name>About {first}</name>\n<description>Members like {first}.</description>\n"
                f"<artifact>{flag}</artifact>")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from harness.models import assets

    return AutoTokenizer.from_pretrained(assets.prepare("smollm2"))


def test_llm_names_flags_and_cache(data, tokenizer, tmp_path):
    recs, samples = data
    inner = ScriptedNamer(tokenizer, garbage_for="bioweapons")
    store = RunLog(tmp_path / "run")
    cached = CachedBackend(inner, store)
    t1 = build_taxonomy(recs, CFG, namer=Namer(cached), store=store, samples=samples)
    n_named = len(t1["clusters"]) + len([c for c in t1["categories"] if c["id"] != "T00"])
    assert inner.calls == cached.misses["generate"] == n_named
    by_source = {c["name"]["source"] for c in t1["clusters"]}
    assert by_source == {"model", "keywords"}  # the unparseable answer fell back to keywords
    bad = [c for c in t1["clusters"] if c["name"]["source"] == "keywords"]
    assert bad and all(c["name"]["error"] and c["name"]["raw"] == "I cannot name this." for c in bad)
    jb = [c for c in t1["clusters"] if any("jailbreak" in f["text"].lower() for f in c["features"])]
    assert jb and all("namer" in c["artifact_reasons"] and c["category"] == "T00" for c in jb)
    named = next(c for c in t1["clusters"] if c["name"]["source"] == "model")
    assert named["name"]["name"] == f"About {named['features'][0]['text']}"
    assert t1["namer"]["identity"] == inner.identity
    # rebuilding from the same store: every name from the cache, same taxonomy
    inner2 = ScriptedNamer(tokenizer, garbage_for="bioweapons")
    cached2 = CachedBackend(inner2, store)
    t2 = build_taxonomy(recs, CFG, namer=Namer(cached2), store=store, samples=samples)
    assert inner2.calls == 0 and sum(cached2.misses.values()) == 0
    assert strip(t2) == strip(t1) and t2["manifest"]["texts_embedded"] == 0


def test_parse_name_and_keywords():
    assert parse_name("<name> **Multiple-choice format** </name><description>d</description>"
                      "<artifact>No.</artifact>") == ("Multiple-choice format", "d", False)
    assert parse_name("<NAME>x</NAME><artifact>yes</artifact>") == ("x", "", True)
    assert parse_name("<name>x</name>")[2] is None
    assert parse_name("no tags here") is None and parse_name("<name> </name>") is None
    words = keywords([[("multiple choice options", 3), ("the options", 1)],
                      [("asks about bioweapons", 2), ("the options", 1)]])
    assert words[0][0] == "multiple" or words[0][0] == "choice"
    assert "bioweapons" in words[1] and "the" not in words[0] + words[1]


def test_artifact_descriptions_are_overridable_data(data, tmp_path):
    from harness.methods.prompts import PromptLibrary

    d = tmp_path / "prompts" / "taxonomy_artifacts"
    d.mkdir(parents=True)
    (d / "descriptions.txt").write_text("# only this one\nmultiple-choice question format\n")
    t = build_taxonomy(data[0], CFG, samples=data[1], prompts=PromptLibrary(tmp_path / "prompts"))
    assert t["artifact_descriptions"] == ["multiple-choice question format"]
    flagged = [c for c in t["clusters"] if c["artifact"]]
    assert flagged and all(any("multiple" in f["text"].lower() for f in c["features"]) for c in flagged)
    assert not any(c["artifact"] for c in t["clusters"]
                   if any("intent" in f["text"].lower() for f in c["features"]))
