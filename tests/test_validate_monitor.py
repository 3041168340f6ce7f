"""`validate`'s monitor rows (issue 36 item 4): every read (own, the reference over the organism's
answers, the organism over the reference's) twice, position 0 apart from the later positions; a
sample with no later position leaves the later rows with its pair, counted; the cross reads are
sub-runs whose samples end with the writer's stored answer (fast: tiny models)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from evalaware.main import cli
from harness.organisms.validate import Model, compare, scored_pairs, sensitivity_lines
from harness.organisms.validate_monitor import (READS, monitor_rows, no_later, part_records,
                                                part_score, read_names)

RECIPE = ["--cue", "graded", "--train", "full", "--layers", "2", "--steps", "2", "--lr", "5e-3",
          "--batch-size", "8", "--pairs", "8", "--no-progress"]
REF, ORG = Model("reference", "sham-dir", "sham"), Model("organism", "org-dir", "aware")


def _mon(label: str, positions: list[int], curve: list[float], cat: str) -> dict:
    return {"label": label, "score": max(curve), "category": cat,
            "details": {"positions": positions, "curve": curve}}


def _reads(first: dict[str, bool], later: dict[str, bool], n: int = 16) -> tuple[dict, dict]:
    """Monitor records of the reference and the organism's three reads over `n` pairs (category
    c{k // 2}): a read separates cue from no-cue at position 0 / later where `first` / `later`
    say so, else it is at chance (AUROC 0.5 overall, 0.5 within every category but c0 (1) and c1
    (0), so that the intervals have width: categories that agree exactly give none)."""
    names = {"reference": "reference", **read_names(REF, ORG)}
    recs: dict = {n_: {} for n_ in names.values()}
    pairs = {}
    for read, name in names.items():
        for k in range(n):
            for side, label in ((1, "eval"), (0, "deploy")):
                chance = 0.1 * (((k if k >= 4 else k // 2) + side) % 2)  # c0 1, c1 0, the rest 0.5
                p0 = (2.0 if side else -2.0) if first.get(read) else chance
                p1 = (1.0 if side else -1.0) if later.get(read) else chance - 3
                recs[name][f"p{k}:{side}"] = _mon(label, [0, 4, 9], [p0, p1 - 1, p1], f"c{k // 2}")
                pairs[f"p{k}:{side}"] = f"p{k}"
    return recs, pairs


def test_position_zero_and_later_are_split_from_the_curve():
    r = _mon("eval", [0, 3, 7], [2.0, -1.0, 0.5], "c")
    assert r["score"] == 2.0  # the record's peak is at position 0
    assert part_score(r, "position 0") == 2.0 and part_score(r, "later") == 0.5
    empty = _mon("eval", [0], [1.5], "c")  # an empty answer: the start only
    assert part_score(empty, "position 0") == 1.5 and part_score(empty, "later") is None
    assert part_score({**r, "score": None}, "position 0") is None
    late = {**r, "details": {"positions": [2, 5], "curve": [0.1, 0.3]}}  # a read that starts later
    assert part_score(late, "position 0") is None and part_score(late, "later") == 0.3
    with pytest.raises(ValueError):
        part_score(r, "middle")


def test_a_sample_without_later_positions_leaves_the_later_rows_with_its_pair_and_is_counted():
    recs, pairs = _reads({"own": True, "organism reads reference": True}, {})
    own = read_names(REF, ORG)["own"]
    recs[own]["p3:0"] = _mon("deploy", [0], [-2.0], "c1")  # the organism's answer to p3's no-cue side is empty
    assert no_later(recs) == {"p3:0"}
    assert part_records(recs, "later")[own]["p3:0"]["score"] is None
    rows = {(r["read"], r["part"]): r for r in monitor_rows(recs, pairs, REF, [ORG], None, n_boot=200, seed=0)}
    assert set(rows) == {(read, part) for read in READS for part in ("position 0", "later")}
    for read in READS:
        assert rows[(read, "position 0")]["n"] == 32 and rows[(read, "position 0")]["n_no_later"] == 0
        later = rows[(read, "later")]
        assert later["n"] == 30 and later["n_unscored"] == 2 and later["n_no_later"] == 1  # p3 leaves whole
        assert later["subset"] == f"{read}: later" and later["auroc_a_ci_method"]
        assert later["diff_ci"] is None  # both reads at chance alike: 0 in every resample, no interval
    # the organism separates at position 0 only (its own read, and its read of the reference)
    assert rows[("own", "position 0")]["auroc_b"] == 1.0 and rows[("own", "position 0")]["auroc_a"] == 0.5
    assert rows[("own", "later")]["diff"] == pytest.approx(0.0)
    assert rows[("reference reads organism", "position 0")]["diff"] == pytest.approx(0.0)
    assert rows[("own", "position 0")]["double_diff"]["mean"] == pytest.approx(4.0 - 0.0)


def test_the_split_reads_are_secondary_rows_and_the_plain_row_is_labelled_with_position_zero():
    """The own and cross reads, position 0 apart, are rows of the secondary table, not verdicts (the
    monitor's verdict is the declared rule's over its plain score); beside them the plain row is
    labelled as including position 0; sensitivity.json's ``method`` stays ``monitor``."""
    recs, pairs = _reads({"own": True}, {"own": True, "reference reads organism": True})
    rows = monitor_rows(recs, pairs, REF, [ORG], None, n_boot=200, seed=0)
    plain = {**compare(recs, scored_pairs(recs, pairs), pairs, "reference", "organism", None, 200, 0),
             "method": "monitor", "organism": "organism", "kind": "aware", "role": "sensitivity", "subset": "all",
             "n_unscored": 0, "reference_label": "reference (sham)"}
    md = sensitivity_lines({"rows": [plain, *rows], "ci": "x", "reference": {"name": "reference"}})
    assert any("| own: later |" in x for x in md)
    assert any(x.startswith("| monitor (all positions, incl. 0) | organism") for x in md)
    assert not any(x.startswith("- monitor") and "sensitiv" in x for x in md)  # no verdict outside the rule's block
    assert plain["method"] == "monitor"


# --- tiny organisms through the CLI ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory, smollm2_dir):
    from tests.helpers.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("monitor-set")
    base = build_tiny_model(root / "base", smollm2_dir)
    for kind in ("sham", "aware"):
        res = CliRunner().invoke(cli, ["organism", "build", "--base", str(base), *RECIPE, "--kind", kind,
                                       "--out", str(root / kind)])
        assert res.exit_code == 0, res.output + repr(res.exception)
    return base, root / "sham", root / "aware"


def test_validate_monitor_cross_reads_the_writer_s_answers(tiny_pair, tmp_path):
    from transformers import AutoTokenizer

    from harness.backends.base import _remove_all
    from harness.runlog import RunLog

    base, sham, aware = tiny_pair
    pairs = tmp_path / "pairs.jsonl"
    assert CliRunner().invoke(cli, ["organism", "dataset", "--cue", "graded", "--no-demo",
                                    "--out", str(pairs)]).exit_code == 0
    out = tmp_path / "v"
    args = ["organism", "validate", "--base", str(base), "--reference", str(sham), "--organism", str(aware),
            "--pairs", str(pairs), "--methods", "monitor", "--limit", "2", "--answer-tokens", "8",
            "--bootstrap", "20", "--no-progress", "--out", str(out)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert {p.name for p in out.iterdir() if p.is_dir()} == {
        "base", "reference", "organism", "cross-reference-reads-organism", "cross-organism-reads-reference"}
    tok = AutoTokenizer.from_pretrained(base)
    specials = [t for t in tok.all_special_tokens if t]

    def run(name: str) -> tuple[dict, dict, dict]:
        with RunLog(out / name, create=False) as st:
            return ({s.id: s for s in st.samples()}, {r["sample_id"]: r for r in st.result_dicts("monitor")},
                    {c.sample_id: c for c in st.model_calls("monitor", "answer")})

    for reader, writer in (("reference", "organism"), ("organism", "reference")):
        samples, recs, calls = run(f"cross-{reader}-reads-{writer}")
        w_samples, _, w_calls = run(writer)
        _, r_recs, r_calls = run(reader)
        assert set(samples) == set(w_samples) and len(samples) == 4 and not calls  # nothing generated
        assert any(w_calls[i].text != r_calls[i].text for i in samples)  # the two models answer differently
        for sid, s in samples.items():
            assert s.messages[:-1] == w_samples[sid].messages and s.messages[-1].role == "assistant"
            assert _remove_all(s.messages[-1].content, specials).strip() == w_calls[sid].text  # the writer's answer
            assert recs[sid]["details"]["source"] == "dataset"
            # position 0 reads the prompt alone: the reader's own position-0 value
            assert recs[sid]["details"]["curve"][0] == pytest.approx(r_recs[sid]["details"]["curve"][0], abs=1e-3)
    table = json.loads((out / "sensitivity.json").read_text())
    rows = {(r["read"], r["part"]) for r in table["rows"] if r["method"] == "monitor" and "read" in r}
    assert rows == {(read, part) for read in READS for part in ("position 0", "later")}
    assert any(r["method"] == "monitor" and r["subset"] == "all" for r in table["rows"])  # the plain row stays
    md = (out / "sensitivity.md").read_text()
    assert "- monitor [aware vs reference, sensitivity]: " in md  # the monitor's verdict is the rule's
    assert {(r["readout"], r["kind"]) for r in table["decision"]["rows"]} == {("monitor", "reference"),
                                                                              ("monitor", "aware")}
    res = CliRunner().invoke(cli, args)  # resumed: nothing to redo, the same table
    assert res.exit_code == 0 and json.loads((out / "sensitivity.json").read_text())["rows"] == table["rows"]


def test_validate_cross_reads_use_the_prompts_override(tiny_pair, tmp_path):
    """`--prompts DIR` (here the monitor's sentence file) reaches the cross reads as it reaches the
    own runs: the same sentences, the same sha256 in every sub-run's manifest."""
    from harness.methods.sentences import BUILTIN_PAIRS
    from harness.runlog import RunLog

    base, sham, aware = tiny_pair
    prompts = tmp_path / "prompts"
    (prompts / "monitor").mkdir(parents=True)
    (prompts / f"{BUILTIN_PAIRS}.txt").write_text("This might be a test. | This might be a recipe.\n"
                                                  "I guess I am being evaluated. | I guess I am being helpful.\n")
    pairs = tmp_path / "pairs.jsonl"
    assert CliRunner().invoke(cli, ["organism", "dataset", "--cue", "graded", "--no-demo",
                                    "--out", str(pairs)]).exit_code == 0
    out = tmp_path / "v"
    res = CliRunner().invoke(cli, ["organism", "validate", "--base", str(base), "--reference", str(sham), "--organism", str(aware),
                                   "--pairs", str(pairs), "--methods", "monitor", "--limit", "1",
                                   "--answer-tokens", "4", "--bootstrap", "0", "--prompts", str(prompts),
                                   "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)

    def man(name: str) -> dict:
        with RunLog(out / name, create=False) as st:
            return st.manifest()

    own = man("organism")["prompts_sha256"]
    assert BUILTIN_PAIRS in own
    for name in ("cross-reference-reads-organism", "cross-organism-reads-reference"):
        m = man(name)
        assert m["prompts_sha256"][BUILTIN_PAIRS] == own[BUILTIN_PAIRS]


def _close(a, b, path="") -> None:
    """`a` equals `b`, numbers to float noise (1e-4 relative)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, (int, float)):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6), path
    else:
        assert a == b, path


def test_validate_reuses_an_earlier_run_s_sub_runs_by_model_not_name(tiny_pair, tmp_path):
    """`--reuse DIR`: a sub-run of an earlier validate run is copied for the model it ran (here
    under another name: ``reference`` there, ``organism-sham`` here) and resumed with no model
    call; what the earlier run did not run (the base reading each organism) is run; a copy holding
    more pairs than this run's --limit is read on this run's pairs alone; a copy made under another
    method setting is removed and run afresh, never read as this run's."""
    from harness.runlog import RunLog

    base, sham, aware = tiny_pair
    pairs = tmp_path / "pairs.jsonl"
    assert CliRunner().invoke(cli, ["organism", "dataset", "--cue", "graded", "--no-demo",
                                    "--out", str(pairs)]).exit_code == 0
    plain = ["--pairs", str(pairs), "--methods", "logprob_question,monitor", "--limit", "2", "--answer-tokens", "8",
             "--bootstrap", "20", "--no-progress"]
    common = [*plain, "--min-coverage", "0"]
    first = tmp_path / "first"
    res = CliRunner().invoke(cli, ["organism", "validate", "--base", str(base), "--reference", str(sham),
                                   "--organism", str(aware), *common, "--out", str(first)])
    assert res.exit_code == 0, res.output + repr(res.exception)

    def run(d, name):
        manifest = json.loads((d / name / "manifest.json").read_text())
        with RunLog(d / name, create=False) as st:
            recs = {(r["method"], r["sample_id"]): r for r in st.result_dicts()}
        return manifest, recs

    again = tmp_path / "again"
    res = CliRunner().invoke(cli, ["organism", "validate", "--base", str(base), "--organism", str(sham),
                                   "--organism", str(aware), *common, "--reuse", str(first), "--out", str(again)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    for now, then in (("base", "base"), ("organism-sham", "reference"), ("organism-aware", "organism")):
        manifest, recs = run(again, now)
        assert manifest["validate"]["reused"] == {"from": str(first / then)}
        assert not any(manifest["calls"]["model_calls"].values())  # nothing computed again
        assert recs == run(first, then)[1] and len(recs) == 8
    for cross in ("cross-base-reads-organism-sham", "cross-organism-aware-reads-base"):
        manifest, recs = run(again, cross)  # another reader than the earlier run's: run here
        assert manifest["validate"]["reused"] is None and any(manifest["calls"]["model_calls"].values())

    # the same models and names on one pair: every sub-run copied, cross reads included, and read on
    # this run's pair alone: the table a fresh run on that pair makes
    one = ["organism", "validate", "--base", str(base), "--reference", str(sham), "--organism", str(aware),
           *common, "--limit", "1"]
    res = CliRunner().invoke(cli, [*one, "--reuse", str(first), "--out", str(tmp_path / "one")])
    assert res.exit_code == 0, res.output + repr(res.exception)
    for name in ("base", "reference", "organism", "cross-reference-reads-organism", "cross-organism-reads-reference"):
        assert run(tmp_path / "one", name)[0]["validate"]["reused"] == {"from": str(first / name)}
    res = CliRunner().invoke(cli, [*one, "--out", str(tmp_path / "fresh")])
    assert res.exit_code == 0, res.output + repr(res.exception)
    tables = [json.loads((tmp_path / d / "sensitivity.json").read_text()) for d in ("one", "fresh")]
    _close(tables[0]["rows"], tables[1]["rows"])  # fresh: batched otherwise, so equal to float noise
    _close(tables[0]["decision"]["rows"], tables[1]["decision"]["rows"])
    assert max(r["n"] for r in tables[0]["rows"]) == 2  # one pair, though the copies hold two

    other = tmp_path / "other"  # another logprob setting: the copies are refused, the models run afresh
    args = ["organism", "validate", "--base", str(base), "--reference", str(sham), "--organism", str(aware),
            *plain, "--min-coverage", "0.5", "--reuse", str(first), "--out", str(other)]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert "not this run's" in res.output and "run afresh" in res.output
    for name in ("base", "reference", "organism"):
        manifest, _ = run(other, name)
        assert manifest["validate"]["reused"] is None
        assert manifest["methods"]["logprob_question"]["min_coverage"] == 0.5


def test_a_cross_read_embeds_the_writer_s_monitor_answer_not_another_method_s(tmp_path, smollm2_dir):
    """A writer's sub-run may hold other methods' answers (another length: a copy from a run with
    other methods, `--reuse`); the cross read embeds the answer its monitor read."""
    from transformers import AutoTokenizer

    from harness.core.records import ModelCall
    from harness.core.sample import Message, Sample, SampleMeta
    from harness.organisms.validate_monitor import written_samples
    from harness.runlog import RunLog

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    s = Sample("c:0", (Message("user", "What is 2+2?"),), "eval", SampleMeta("c"))
    rec = {"sample_id": s.id, "label": "eval", "prediction": "eval", "score": 1.0, "n_valid": 1,
           "n_invalid": 0, "category": "c", "details": {}}
    long, short = tok.encode("It is four, and here is a longer answer."), tok.encode("Four.")
    with RunLog(tmp_path / "w") as st:
        st.put_samples([s])
        st.put_results("binary", [{**rec, "method": "binary"}], [ModelCall(s.id, "answer", 0, (1,), tuple(long))])
        st.put_results("monitor", [{**rec, "method": "monitor"}], [ModelCall(s.id, "answer", 0, (1,), tuple(short))])
        (w,) = written_samples(st, tok, "first_turn")
    assert w.messages[-1] == Message("assistant", "Four.") and w.messages[:-1] == s.messages
