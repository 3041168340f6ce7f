"""The run log: schema version (old run directories migrate, newer or foreign ones are refused),
one-transaction replacement of a method's records, registered tables, and the rule that nothing
outside ``harness/runlog/`` talks SQL."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from harness.core.errors import StoreError
from harness.core.records import RECORD_SCHEMA, Record
from harness.runlog import SCHEMA_VERSION, RunLog, TableSpec, encode_value
from harness.core.sample import Message, Sample, SampleMeta
from tests.helpers.cli import in_process
from tests.helpers.packages import PACKAGES

ROOT = Path(__file__).parents[1]

# The layout every run directory had before the run log carried a version (harness/store.py at
# the commit before `RunLog`), written here as that code wrote it.
_V0_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, op TEXT NOT NULL, value BLOB NOT NULL,
                                  created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS results (method TEXT NOT NULL, sample_id TEXT NOT NULL,
                                    record TEXT NOT NULL, created REAL NOT NULL,
                                    PRIMARY KEY (method, sample_id));
CREATE TABLE IF NOT EXISTS samples (sample_id TEXT PRIMARY KEY, sample TEXT NOT NULL,
                                    position INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def _sample(i: int, text: str = "hi") -> Sample:
    return Sample(f"c:{i}", (Message("user", text),), "eval", SampleMeta("c"))


def _v0_run(run: Path) -> dict:
    """A run directory exactly as the pre-version store wrote it (WAL, user_version 0)."""
    run.mkdir(parents=True)
    db = sqlite3.connect(run / "store.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(_V0_SCHEMA)
    samples = [_sample(2), _sample(1)]
    db.executemany("INSERT INTO samples VALUES (?, ?, ?)",
                   [(s.id, s.to_json(), i) for i, s in enumerate(samples)])
    recs = [{"sample_id": s.id, "method": "binary", "label": s.label, "prediction": "eval",
             "score": 1.0, "n_valid": 5, "n_invalid": 0, "n_answers": 6, "n_cut": 0,
             "category": "c", "agentic": False, "eval_type": None, "n_turns": 1, "task": None,
             "human_eval_probability": None, "human_eval_source": None,
             "details": {"votes": [], "sample_answer": "ok"}} for s in samples]
    db.executemany("INSERT INTO results VALUES (?, ?, ?, ?)",
                   [("binary", r["sample_id"], json.dumps(r, sort_keys=True), 0.0) for r in recs])
    db.execute("INSERT INTO calls VALUES (?, ?, ?, ?)", ("k1", "generate", encode_value({"text": "x"}), 0.0))
    man = {"model": {"model": "tiny"}, "methods": {"binary": {}}}
    db.execute("INSERT INTO meta VALUES ('manifest', ?)", (json.dumps(man),))
    db.close()
    (run / "manifest.json").write_text(json.dumps(man))
    return {"records": recs, "samples": samples}


def test_old_run_directory_is_migrated_in_place(tmp_path):
    run = tmp_path / "old"
    old = _v0_run(run)
    log = RunLog(run, create=False)
    assert log.opened_version == 0
    # dataset order (c:2 then c:1); typed records that write back exactly what was stored
    assert log.result_dicts("binary") == [{**r, "schema": RECORD_SCHEMA} for r in old["records"]]
    assert [r.n_answers for r in log.results("binary")] == [6, 6]
    assert [s.id for s in log.samples()] == ["c:2", "c:1"]
    assert log.get_calls(["k1", "k2"]) == {"k1": {"text": "x"}}
    assert log.get_meta("schema_version") == SCHEMA_VERSION
    log.put_results("binary", [{**old["records"][0], "sample_id": "c:3"}])  # writable
    log.close()
    db = sqlite3.connect(run / "store.sqlite")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()
    again = RunLog(run, create=False)
    assert again.opened_version == SCHEMA_VERSION and len(again.results()) == 3
    again.close()
    # the CLI reads it like any run
    r = in_process("show", run)
    assert r.returncode == 0, r.stderr
    assert "samples: 2" in r.stdout


def test_newer_schema_refused_naming_file_and_version(tmp_path):
    run = tmp_path / "new"
    RunLog(run).close()
    db = sqlite3.connect(run / "store.sqlite")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 4}")
    db.close()
    with pytest.raises(StoreError, match=rf"store\.sqlite: run log schema version {SCHEMA_VERSION + 4} "
                                         r"is newer"):
        RunLog(run, create=False)
    r = in_process("show", run)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(run / "store.sqlite") in lines[0]
    assert f"schema version {SCHEMA_VERSION + 4}" in lines[0]


def test_foreign_layouts_refused(tmp_path):
    run = tmp_path / "odd"
    run.mkdir()
    db = sqlite3.connect(run / "store.sqlite")
    db.execute("CREATE TABLE results (method TEXT, sample_id TEXT, payload TEXT)")
    db.close()
    with pytest.raises(StoreError, match=r"schema version 0.*table results has columns"):
        RunLog(run, create=False)
    (tmp_path / "other").mkdir()
    db = sqlite3.connect(tmp_path / "other" / "store.sqlite")
    db.execute("CREATE TABLE things (x)")
    db.close()
    with pytest.raises(StoreError, match="not a run log"):
        RunLog(tmp_path / "other", create=False)
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "store.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreError, match="not a readable run log"):
        RunLog(tmp_path / "junk", create=False)


def test_manifest_written_with_version_and_sections(tmp_path):
    log = RunLog(tmp_path / "r")
    log.write_manifest({"model": {"model": "m"}})
    log.add_to_manifest("activations", "default", {"layers": [1]})
    on_disk = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert on_disk == log.manifest() == {"model": {"model": "m"}, "schema_version": SCHEMA_VERSION,
                                         "activations": {"default": {"layers": [1]}}}
    assert len(log.get_meta("manifests")) == 1  # a derived artifact is no new run
    assert not list((tmp_path / "r").glob("*.tmp"))


def test_replace_results_is_one_transaction(tmp_path):
    log = RunLog(tmp_path / "r")
    log.put_samples([_sample(1), _sample(2)])
    old = [Record.for_sample(_sample(i), "probe", "eval", 0.1 * i, 1, 0) for i in (1, 2)]
    log.put_results("probe", old)
    # the second record cannot be serialised: the failure comes after the DELETE
    bad = [Record.for_sample(_sample(1), "probe", "deploy", 0.9, 1, 0),
           Record.for_sample(_sample(2), "probe", "deploy", 0.9, 1, 0, details={"x": object()})]
    with pytest.raises(TypeError):
        log.replace_results("probe", bad)
    assert log.results("probe") == old
    log.replace_results("probe", old[:1])
    assert log.results("probe") == old[:1] and log.done_ids("probe") == {"c:1"}


def test_registered_table_api(tmp_path):
    spec = TableSpec("things", (("kind", "TEXT"), ("name", "TEXT"), ("n", "INTEGER")), ("kind", "name"))
    log = RunLog(tmp_path / "r")
    t = log.table(spec)
    t.insert([("a", f"x{i}", i) for i in range(1200)])  # more than one lookup chunk
    t.insert([("b", "y", 5)])
    assert t.count() == 1201 and t.count({"kind": "b"}) == 1
    assert t.count_by("kind") == {"a": 1200, "b": 1}
    assert t.total("n", {"kind": "a"}) == sum(range(1200))
    assert t.lookup("name", [f"x{i}" for i in range(0, 1200, 7)] + ["nope"], "n") == \
        {f"x{i}": i for i in range(0, 1200, 7)}
    assert t.select(["kind"], distinct=True, order_by=["kind"]) == [("a",), ("b",)]
    with pytest.raises(ValueError, match="no column"):
        t.select(["kind; DROP TABLE things"])
    with pytest.raises(sqlite3.IntegrityError):
        t.insert([("b", "y", 6)])
    t.insert([("b", "y", 6)], replace=True)
    assert t.select(["n"], {"kind": "b"}) == [(6,)]
    t.delete({"kind": "a"})
    assert t.count() == 1
    log.close()
    other = TableSpec("things", (("kind", "TEXT"), ("n", "INTEGER")), ("kind",))
    with pytest.raises(StoreError, match="table things has columns"):
        RunLog(tmp_path / "r").table(other)


SQL = re.compile(r"\.execute(many|script)?\(|^\s*import sqlite3|^\s*from sqlite3")


def test_no_sql_outside_the_run_log():
    """Only harness/runlog/ opens SQLite or runs statements (tests may poke at files)."""
    offenders = []
    for pkg in (*PACKAGES, "scripts"):
        for f in sorted((ROOT / pkg).rglob("*.py")):
            if f.is_relative_to(ROOT / "harness" / "runlog"):
                continue
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if SQL.search(line):
                    offenders.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


def test_records_of_a_real_run_round_trip(tmp_path, hf_tiny):
    """Every method's records, as the methods build them, come back from the log equal (typed)
    and their JSON form is what was stored."""
    from harness.data.readers import load_dataset
    from harness.methods import MethodConfig
    from harness.run.loop import run_methods

    samples = load_dataset("demo")[:2]
    cfg = MethodConfig(answer_tokens=6, probe_tokens=6, judge_tokens=6, temperature=1.0, seed=1)
    methods = ["binary", "motivation", "reasoning"]
    run_methods(samples, methods, hf_tiny, tmp_path / "r", config=cfg, progress=False)
    log = RunLog(tmp_path / "r", create=False)
    for m in methods:
        recs = log.results(m)
        assert len(recs) == 2 and all(isinstance(r, Record) for r in recs)
        for r, d in zip(recs, log.result_dicts(m)):
            assert Record.from_dict(d) == r and d["schema"] == RECORD_SCHEMA
            assert json.loads(json.dumps(d)) == d
        assert all(v.verdict is not None for r in recs for v in r.votes) == (m != "binary")
        assert all(r.n_answers and r.n_answers >= len(r.votes) for r in recs)
        # every generation behind the records is in the log with its role
        calls = log.model_calls(m)
        assert {c.sample_id for c in calls} == {s.id for s in samples}
        want = {"binary": {"answer", "question"}, "motivation": {"answer", "question", "judge"},
                "reasoning": {"answer", "elicited_reasoning", "judge"}}[m]
        roles = {c.role for c in calls}
        assert roles <= want and "answer" in roles
        assert m != "motivation" or "judge" in roles
        assert all(c.prompt_ids and c.output_ids for c in calls)


def test_record_schema_and_fields_checked():
    d = Record.for_sample(_sample(1), "binary", "eval", 1.0, 1, 0).to_dict()
    with pytest.raises(StoreError, match=r"record binary/c:1: record schema version 7"):
        Record.from_dict({**d, "schema": 7})
    with pytest.raises(StoreError, match=r"record binary/c:1: missing field 'n_valid'"):
        Record.from_dict({k: v for k, v in d.items() if k != "n_valid"})
    legacy = {k: v for k, v in d.items() if k != "schema"}  # written before the version
    assert Record.from_dict(legacy).to_dict() == d
