"""The run store: one SQLite file (WAL) per run directory.

Tables
- ``calls``: content-addressed cache of every model call (key = sha256 of backend identity,
  operation, token ids and sampling parameters) -> encoded result.
- ``results``: one JSON record per (method, sample); written in a transaction per batch.
- ``samples``: the dataset as the run saw it (a changed sample under the same id is refused).
- ``meta``: the run manifest and settings.
Other modules add tables with :meth:`Store.ensure_schema`.

Every write is a transaction, so a killed process leaves the store as of the last commit.
"""

from __future__ import annotations

import io
import json
import sqlite3
import time
import zlib
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np

from .errors import StoreError
from .sample import Sample

STORE_NAME = "store.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, op TEXT NOT NULL, value BLOB NOT NULL,
                                  created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS results (method TEXT NOT NULL, sample_id TEXT NOT NULL,
                                    record TEXT NOT NULL, created REAL NOT NULL,
                                    PRIMARY KEY (method, sample_id));
CREATE TABLE IF NOT EXISTS samples (sample_id TEXT PRIMARY KEY, sample TEXT NOT NULL,
                                    position INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def encode_value(value: Any) -> bytes:
    """Arrays as compressed .npy (no pickle); everything else as JSON."""
    if isinstance(value, np.ndarray):
        buf = io.BytesIO()
        np.save(buf, value, allow_pickle=False)
        return b"N" + zlib.compress(buf.getvalue(), 1)
    return b"J" + json.dumps(value, ensure_ascii=False).encode()


def decode_value(blob: bytes) -> Any:
    if blob[:1] == b"N":
        return np.load(io.BytesIO(zlib.decompress(blob[1:])), allow_pickle=False)
    return json.loads(blob[1:].decode())


class Store:
    """SQLite store of one run directory."""

    def __init__(self, run_dir: str | Path, create: bool = True) -> None:
        self.run_dir = Path(run_dir)
        path = self.run_dir / STORE_NAME
        if not create and not path.exists():
            raise StoreError(f"{self.run_dir}: not a run directory (no {STORE_NAME})")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.ensure_schema(_SCHEMA)

    def ensure_schema(self, sql: str) -> None:
        self.db.executescript(sql)

    def transaction(self) -> "_Tx":
        return _Tx(self.db)

    # --- call cache ------------------------------------------------------------------------
    def get_calls(self, keys: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            q = f"SELECT key, value FROM calls WHERE key IN ({','.join('?' * len(chunk))})"
            for k, v in self.db.execute(q, chunk):
                out[k] = decode_value(v)
        return out

    def put_calls(self, op: str, items: Iterable[tuple[str, Any]]) -> None:
        now = time.time()
        with self.transaction():
            self.db.executemany("INSERT OR REPLACE INTO calls VALUES (?, ?, ?, ?)",
                                [(k, op, encode_value(v), now) for k, v in items])

    def import_calls(self, other_run_dir: str | Path) -> int:
        """Copy another run directory's call cache into this one (keys are content-addressed, so
        only calls with the same backend identity, op and inputs can ever hit); returns how many
        calls were new here."""
        src = Path(other_run_dir) / STORE_NAME
        if not src.exists():
            raise StoreError(f"{other_run_dir}: not a run directory (no {STORE_NAME})")
        before = self.db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
        self.db.execute("ATTACH DATABASE ? AS other", (str(src),))
        try:
            with self.transaction():
                self.db.execute("INSERT OR IGNORE INTO calls SELECT * FROM other.calls")
        finally:
            self.db.execute("DETACH DATABASE other")
        return self.db.execute("SELECT COUNT(*) FROM calls").fetchone()[0] - before

    def count_calls(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT op, COUNT(*) FROM calls GROUP BY op").fetchall())

    # --- results ---------------------------------------------------------------------------
    def done_ids(self, method: str) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT sample_id FROM results WHERE method=?", (method,))}

    def put_results(self, method: str, records: list[dict[str, Any]]) -> None:
        now = time.time()
        with self.transaction():
            self.db.executemany(
                "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?)",
                [(method, r["sample_id"], json.dumps(r, ensure_ascii=False, sort_keys=True), now)
                 for r in records])

    def results(self, method: str | None = None) -> list[dict[str, Any]]:
        """Records in dataset order (then method)."""
        q = ("SELECT r.record FROM results r LEFT JOIN samples s ON s.sample_id = r.sample_id "
             + ("WHERE r.method=? " if method else "") + "ORDER BY r.method, s.position")
        rows = self.db.execute(q, (method,) if method else ())
        return [json.loads(r[0]) for r in rows]

    def methods(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT DISTINCT method FROM results ORDER BY method")]

    # --- samples ---------------------------------------------------------------------------
    def put_samples(self, samples: list[Sample]) -> None:
        """Record the dataset; refuse a sample whose content changed under the same id."""
        stored = dict(self.db.execute("SELECT sample_id, sample FROM samples").fetchall())
        base = len(stored)
        rows = []
        for s in samples:
            js = s.to_json()
            if s.id in stored:
                if stored[s.id] != js:
                    raise StoreError(f"{self.path}: sample {s.id!r} differs from the one this run "
                                     f"already used; use a new --out directory")
                continue
            rows.append((s.id, js, base + len(rows)))
        with self.transaction():
            self.db.executemany("INSERT INTO samples VALUES (?, ?, ?)", rows)

    def samples(self) -> list[Sample]:
        from .datasets import _Ctx, parse_record

        rows = self.db.execute("SELECT sample FROM samples ORDER BY position").fetchall()
        return [parse_record(json.loads(r[0]), _Ctx(self.path, i)) for i, r in enumerate(rows)]

    # --- meta ------------------------------------------------------------------------------
    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def set_meta(self, key: str, value: Any) -> None:
        with self.transaction():
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                            (key, json.dumps(value, ensure_ascii=False, sort_keys=True)))

    def export_jsonl(self, path: str | Path) -> int:
        recs = self.results()
        with open(path, "w", encoding="utf-8") as f:
            for r in recs:
                f.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
        return len(recs)

    def iter_calls(self) -> Iterator[tuple[str, str]]:
        yield from self.db.execute("SELECT key, op FROM calls")

    def close(self) -> None:
        self.db.close()


class _Tx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")
