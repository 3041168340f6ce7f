"""Issue 38, typed read path: the method details that statistics and the report compute with are
declared types (harness/core/details.py) that the methods write and the readers read, from a
typed Record or its JSON form alike; stats and reporting never read those keys by string, and
reporting takes its counts from stats, not from the run loop."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.core.details import (NO_SIGNAL, Detail, LabelGate, LabelVote, LayerSelection, ScoreVariant, SignalGate,
                                   details_of, votes_of)
from harness.core.records import Record, Verdict, Vote
from harness.stats.summaries import answer_errors, label_mass, votes_by_sample
from harness.stats.tally import tally

ROOT = Path(__file__).resolve().parents[1]


def _record(sid: str, votes: tuple[Vote, ...] | None, **details) -> Record:
    return Record(sid, "m", "eval", None, None, 0, 0, n_answers=3, n_cut=1, votes=votes, details=details)


def _label_record(sid: str, masses: list[float], floor: float) -> Record:
    votes = tuple(Vote(k, "v", "eval", None, extra=LabelVote(
        m, 0.7, {"eval": 0.7, "deploy": 0.3}, "after", m < floor).to_dict()) for k, m in enumerate(masses))
    return _record(sid, votes, **LabelGate(floor, sum(m < floor for m in masses), 0.5).to_dict())


def test_a_detail_reads_back_as_written_from_a_record_and_from_its_json():
    rec = _label_record("a", [0.2, 0.001], 0.01)
    for form in (rec, rec.to_dict(), Record.from_dict(rec.to_dict())):
        assert LabelGate.of(form) == LabelGate(0.01, 1, 0.5)
        assert [LabelVote.of_vote(v) for v in votes_of(form)] == [
            LabelVote(0.2, 0.7, {"eval": 0.7, "deploy": 0.3}, "after", False),
            LabelVote(0.001, 0.7, {"eval": 0.7, "deploy": 0.3}, "after", True)]
        assert SignalGate.of(form) is None  # not a logprob record
    # the stored layout is what it always was: keys at the top of details and of each vote
    d = rec.to_dict()["details"]
    assert d["min_label_mass"] == 0.01 and d["score_source"] == "label_probability"
    assert "label_withheld" not in d["votes"][0] and d["votes"][1]["label_withheld"] is True
    gated = _record("b", None, **SignalGate(NO_SIGNAL, False, 0.01).to_dict())
    assert SignalGate.of(gated.to_dict()).no_signal and not SignalGate(None, True, 0.01).no_signal
    assert details_of(gated) == details_of(gated.to_dict()) == {"error": NO_SIGNAL, "signal": False,
                                                                "min_coverage": 0.01}


def test_stats_read_the_declared_details_the_same_from_records_and_dicts():
    judged = (Vote(0, "v", None, "judge: bad JSON", Verdict(None, error="bad JSON")),
              Vote(1, "v", "eval", None, Verdict(True)),
              Vote(2, "v", None, None, Verdict(None, error="empty text")))
    recs = [_label_record("a", [0.2, 0.001], 0.01), _label_record("b", [0.5], 0.01),
            _record("c", None, **SignalGate(NO_SIGNAL, False, 0.01).to_dict()),
            _record("d", judged)]
    for form in (recs, [r.to_dict() for r in recs]):
        assert answer_errors(form) == {NO_SIGNAL: 1, "judge_failed": 1}
        lm = label_mass(form)
        assert (lm["n_votes"], lm["withheld"], lm["min_label_mass"], lm["max"]) == (3, 1, 0.01, 0.5)
        assert tally(form) == {"answers": 12, "cut": 4, "cut_context": 0, "cut_read": 4, "verdicts": 2,
                               "unjudged": 1, "unverified": 0}
    assert votes_by_sample([r.to_dict() for r in recs])["d"] == [None, "eval", None]


def test_the_methods_declare_the_details_their_records_carry():
    import harness.methods  # noqa: F401  (registers the methods)
    from harness.methods.base import REGISTRY

    for name, cls in REGISTRY.items():
        if getattr(cls, "answer_format", None) is not None:
            assert {LabelGate, LabelVote} <= set(cls.details), name
        if name.startswith("logprob"):
            assert SignalGate in cls.details, name
    assert {LabelGate, LabelVote, SignalGate} <= set(Detail.__subclasses__())
    assert any(SignalGate in c.details for c in REGISTRY.values())
    assert any(LabelGate in c.details for c in REGISTRY.values())


def _opens_record(expr: ast.AST) -> bool:
    """`expr` opens a record's details or votes by string (``r.get("details")``, ``x["votes"]``)."""
    for n in ast.walk(expr):
        key = (n.args[0] if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == "get" and n.args else n.slice if isinstance(n, ast.Subscript) else None)
        if isinstance(key, ast.Constant) and key.value in ("details", "votes"):
            return True
    return False


def _string_reads(path: Path, keys: set[str]) -> list[str]:
    """Where `path` reads one of `keys` by string from a record's details or a vote: ``.get(key)``
    or ``[key]`` on an expression that opens them, or on a name bound to one (``d = r.get(
    "details") or {}``, ``for v in d.get("votes") or []``), or ``== key`` against such a read."""
    tree = ast.parse(path.read_text())
    bound = {t.id for n in ast.walk(tree)
             for value, targets in ([(n.value, n.targets)] if isinstance(n, ast.Assign) else
                                    [(n.value, [n.target])] if isinstance(n, ast.NamedExpr) else
                                    [(n.iter, [n.target])] if isinstance(n, (ast.For, ast.comprehension)) else [])
             if _opens_record(value) for t in targets if isinstance(t, ast.Name)}

    def on_record(receiver: ast.AST) -> bool:
        return _opens_record(receiver) or (isinstance(receiver, ast.Name) and receiver.id in bound)

    out = []
    for node in ast.walk(tree):
        hit = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and node.args and on_record(node.func.value):
            hit = node.args[0]
        elif isinstance(node, ast.Subscript) and on_record(node.value):
            hit = node.slice
        elif isinstance(node, ast.Compare) and on_record(node.left):
            hit = next((c for c in node.comparators if isinstance(c, ast.Constant) and c.value in keys), None)
        if isinstance(hit, ast.Constant) and hit.value in keys:
            out.append(f"{path.name}:{node.lineno} {hit.value!r}")
    return sorted(set(out))


DECLARED = {k for d in Detail.__subclasses__() for k in d.keys()} | {NO_SIGNAL}  # every declared detail


@pytest.mark.parametrize("package", ["harness/stats", "harness/reporting"])
def test_stats_and_reporting_read_no_declared_detail_by_string(package):
    found = [hit for f in sorted((ROOT / package).rglob("*.py")) for hit in _string_reads(f, DECLARED)]
    assert not found, f"read them through harness.core.details: {found}"


def test_the_string_read_check_finds_the_reads_it_replaced(tmp_path):
    f = tmp_path / "old_summaries.py"
    f.write_text('''
def answer_errors(records, c):
    for r in records:
        if (r.get("details") or {}).get("error") == "no_signal":
            c["no_signal"] += 1

def label_mass(records, masses, floors):
    for r in records:
        d = r.get("details") or {}
        for v in d.get("votes") or []:
            masses.append(float(v["label_mass"]))
        if d.get("min_label_mass") is not None:
            floors.add(d["min_label_mass"])

def fine(summary, settings, s):
    return summary.get("label_mass"), settings["min_coverage"], s["label_mass"]["min_label_mass"]
''')
    assert _string_reads(f, DECLARED) == [
        "old_summaries.py:11 'label_mass'", "old_summaries.py:12 'min_label_mass'",
        "old_summaries.py:13 'min_label_mass'", "old_summaries.py:4 'error'", "old_summaries.py:4 'no_signal'"]


def test_score_variants_read_back_from_what_tokenization_writes():
    """A logprob record's variants (tokenization.scoring.LogprobScore.to_dict, as the method writes
    them) read back typed, from a Record and its JSON: names, P(eval), coverage, exact log-odds."""
    from tokenization.scoring import LogprobScore

    sc = LogprobScore(0.6, 0.9, None, 0.0, 0.75, 0.5, naive_log_odds=0.405, aware_log_odds=1.1)
    rec = _record("a", None, **sc.to_dict())
    for form in (rec, rec.to_dict()):
        assert ScoreVariant.names(form) == ("aware", "naive", "top20")
        assert ScoreVariant.of(form, "naive") == ScoreVariant("naive", 0.6, 0.9, 0.405)
        assert ScoreVariant.of(form, "top20") == ScoreVariant("top20", None, 0.0, None)
        assert ScoreVariant.of(form, "aware").coverage == 0.5
        assert ScoreVariant.of(form, "other") is None
    assert ScoreVariant.of(_record("b", None, naive_p_eval=0.5, naive_log_odds=float("inf")), "naive").log_odds is None


def test_layer_selection_reads_what_the_probe_commands_write():
    from evalaware.probes import selection_null

    class Res:
        rows = [{"layer": 1, "pooling": "last_prompt", "model": "logreg"}, {"layer": 2, "pooling": "last_prompt",
                                                                              "model": "logreg"}]

        def selection_for(self, pooling, scheme):
            return {"selection": "best of 2", "selected_layer": 1, "p_value": 0.03, "null_mean": 0.55, "null_q95": 0.7,
                    "n_perm": 200}

    rec = _record("a", None, layer=2, layer_selection="nested", **selection_null(Res(), "last_prompt", "crossed"))
    got = LayerSelection.of(rec.to_dict())
    assert (got.layer, got.layer_selection, got.sweep_best_layer, got.sweep_selection_p, got.sweep_null_q95) == (
        2, "nested", 1, 0.03, 0.7)  # the record's own layer beside the sweep's best one
    assert "selection_p" not in rec.to_dict()["details"]  # the sweep's p never reads as the record's
    assert LayerSelection.of(_record("b", None, layer=2)) is None  # no rule recorded: not a probe record


def _built_variant_keys(path: Path) -> list[str]:
    """Keys built to end in a score variant's suffix in `path`: ``f"{var}_p_eval"``,
    ``var + "_coverage"``, ``"%s_log_odds" % var``, ``"{}_p_eval".format(var)``."""
    def suffixed(n: ast.AST) -> bool:
        return isinstance(n, ast.Constant) and isinstance(n.value, str) and \
            n.value.replace("%s", "").replace("{}", "").endswith(ScoreVariant.SUFFIXES) and n.value[:1] in "%{_"

    out = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.JoinedStr) and n.values and isinstance(n.values[-1], ast.Constant) \
                and str(n.values[-1].value).endswith(ScoreVariant.SUFFIXES) \
                or isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Mod)) and suffixed(
                    n.right if isinstance(n.op, ast.Add) else n.left) \
                or isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "format" \
                and suffixed(n.func.value):
            out.append(f"{path.name}:{n.lineno}")
    return sorted(out)


@pytest.mark.parametrize("package", ["harness/stats", "harness/reporting", "harness/organisms", "harness/cues"])
def test_no_score_variant_is_read_by_a_built_key(package, tmp_path):
    found = [hit for f in sorted((ROOT / package).rglob("*.py")) for hit in _built_variant_keys(f)]
    assert not found, f"read score variants through harness.core.details.ScoreVariant: {found}"
    old = tmp_path / "old_families.py"
    old.write_text('cov = [x["details"][f"{var}_coverage"] for x in recs]\n'
                   'p = d.get(var + "_p_eval")\nq = d["%s_log_odds" % var]\nr = d["{}_p_eval".format(var)]\n'
                   'fine = d.get(var + "_score"), "x_p_eval"\n')
    assert _built_variant_keys(old) == [f"old_families.py:{i}" for i in (1, 2, 3, 4)]


def test_reporting_and_stats_import_nothing_from_the_run_loop():
    for package in ("harness/reporting", "harness/stats"):
        for f in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module:
                    assert not node.module.startswith("harness.run."), (f, node.module)
                    assert node.module != "harness.run", (f, node.module)
