"""The run log's core tables and its schema version (SQLite ``PRAGMA user_version``).

Versions
- 0: run directories written before the run log had a version (evalaware up to the `Store`):
  calls, results, samples, meta; ``user_version`` 0. Opened, they are migrated in place in one
  transaction: ``model_calls`` is added (empty: such runs logged no roles) and the version set.
- 1: the current layout, adding ``model_calls`` (which call served which sample in which role,
  :class:`harness.core.records.ModelCall`); the version is also in ``meta`` (``schema_version``) and
  the manifest.
A log with a newer version, or a version-0 file whose core tables have other columns, is refused
with a one-line message naming the file and its version. A reader (read-only) never migrates: the
core tables a version-0 log lacks read as empty.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from harness.core.errors import StoreError
from harness.runlog.tables import TableSpec, check_columns

SCHEMA_VERSION = 1
LOG_NAME = "store.sqlite"

CALLS = TableSpec("calls", (("key", "TEXT"), ("op", "TEXT"), ("value", "BLOB"), ("created", "REAL")),
                  ("key",))
RESULTS = TableSpec("results", (("method", "TEXT"), ("sample_id", "TEXT"), ("record", "TEXT"),
                                ("created", "REAL")), ("method", "sample_id"))
SAMPLES = TableSpec("samples", (("sample_id", "TEXT"), ("sample", "TEXT"), ("position", "INTEGER")),
                    ("sample_id",))
META = TableSpec("meta", (("key", "TEXT"), ("value", "TEXT")), ("key",))
MODEL_CALLS = TableSpec("model_calls", (("method", "TEXT"), ("sample_id", "TEXT"), ("role", "TEXT"),
                                        ("k", "INTEGER"), ("call", "TEXT")),
                        ("method", "sample_id", "role", "k"))
CORE = (CALLS, RESULTS, SAMPLES, META, MODEL_CALLS)


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def prepare(db: sqlite3.Connection, path: Path, readonly: bool = False) -> int:
    """Create, migrate or refuse the log behind `db`; returns the version it had when opened
    (0 for a new file as well as for a pre-version one). `readonly`: check only; missing core
    tables become empty temporary ones (nothing is written to the file)."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path}: run log schema version {version} is newer than this evalaware "
                         f"reads (up to {SCHEMA_VERSION}); upgrade evalaware or use a new --out")
    if version == SCHEMA_VERSION:
        return version
    tables = _tables(db)
    if tables and not {s.name for s in CORE} & tables:
        raise StoreError(f"{path}: not a run log (schema version {version}, tables "
                         f"{sorted(tables)})")
    for spec in CORE:
        check_columns(db, spec, f"{path} (schema version {version})")
    if readonly:
        for spec in CORE:
            if spec.name not in tables:
                db.execute(spec.ddl(temp=True))
        return version
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] == version:  # not migrated meanwhile
            for spec in CORE:
                db.execute(spec.ddl())
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return version
