"""The run log: the one owner of a run directory's SQLite file and its manifest.

Tables (see :mod:`harness.runlog.schema`)
- ``calls``: content-addressed cache of every model call (key = sha256 of backend identity,
  operation, token ids and sampling parameters) -> encoded result (JSON or .npy, never pickle).
- ``results``: one JSON record per (method, sample).
- ``samples``: the dataset as the run saw it (a changed sample under the same id is refused).
- ``meta``: manifest, settings, model identity, schema version.
- tables other packages register with :meth:`RunLog.table` (activations index, embeddings).

Every write is one transaction (``BEGIN IMMEDIATE``; nested transactions join the outer one),
so a killed process leaves the log as of its last commit; a write SQLite refuses (a full disk, an
I/O error) rolls its transaction back and becomes a one-line :class:`StoreError`. WAL lets readers
read while a run writes.

Readers (``RunLog(dir, readonly=True)``: ``show``, ``export``, ``report``) open the file with
SQLite's ``mode=ro``: the log is never written (no journal-mode switch, no migration, no lock);
in a writable directory SQLite may leave its empty ``-wal``/``-shm`` index files, which the next
writer reuses. In a read-only directory whose log was closed cleanly (no ``-wal``: no writer can
be at work there) SQLite cannot make that index, and the file is read as ``immutable``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from harness.data.records import RecordContext
from harness.data.readers import parse_record
from harness.core.atomic import replace_file
from harness.core.errors import StoreError
from harness.core.records import ModelCall, Record
from harness.core.sample import Sample
from harness.runlog.codec import decode_value, dumps, encode_value
from harness.runlog.schema import CALLS, LOG_NAME, META, MODEL_CALLS, RESULTS, SAMPLES, prepare
from harness.runlog.manifest import MetaAndManifest
from harness.runlog.tables import Table, TableSpec, check_columns


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A connection that cannot write `path` (see the module docstring)."""
    uri = path.absolute().as_uri()
    try:
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=60, isolation_level=None)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError as e:
            db.close()
            if "unable to open" not in str(e):  # SQLITE_CANTOPEN: no -shm, none can be made
                raise
        wal = path.with_name(path.name + "-wal")
        if wal.exists() and wal.stat().st_size:
            raise StoreError(f"{path}: cannot be read in this read-only directory: {wal.name} holds "
                             f"writes not yet merged into the log (its run stopped mid-way); read "
                             f"a writable copy of the directory")
        return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{path}: not a readable run log ({e})") from e


class RunLog(MetaAndManifest):
    """The SQLite log (and manifest) of one run directory."""

    def __init__(self, run_dir: str | Path, create: bool = True, readonly: bool = False) -> None:
        """`create`: make the directory and log when missing; `readonly`: a reader's view of an
        existing log, which never writes (see the module docstring)."""
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOG_NAME
        self.readonly = readonly
        if (readonly or not create) and not self.path.exists():
            raise StoreError(f"{self.run_dir}: not a run directory (no {LOG_NAME})")
        self._refuse_lost_log()
        if not readonly:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=60, isolation_level=None,
                                   check_same_thread=False) if not readonly \
            else _connect_readonly(self.path)
        # One connection for every thread of a process (the streaming loop's workers write the
        # call cache): each transaction and each read holds this lock, so they never interleave.
        self._lock = threading.RLock()
        self._depth = 0
        try:
            if not readonly:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self.opened_version = prepare(self._db, self.path, readonly)
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise StoreError(f"{self.path}: not a readable run log ({e})") from e
        except BaseException:
            self._db.close()
            raise
        self._calls, self._results = Table(self, CALLS), Table(self, RESULTS)
        self._samples, self._meta = Table(self, SAMPLES), Table(self, META)
        self._model_calls = Table(self, MODEL_CALLS)

    RUN_FILES = ("manifest.json", "results.jsonl")
    """Files a run directory holds beside its log; with them the log must be there."""

    def _refuse_lost_log(self) -> None:
        """An empty log, or none beside a run's other files, is a lost run: never re-created
        (a fresh schema would start the run over and overwrite its results)."""
        if self.path.is_file() and self.path.stat().st_size == 0:
            raise StoreError(f"{self.path}: the run log is empty (0 bytes; truncated?); its records "
                             f"are lost: restore it from a copy, or use a new --out")
        if not self.path.exists():
            others = [n for n in self.RUN_FILES if (self.run_dir / n).exists()]
            if others:
                raise StoreError(f"{self.path}: missing, but {self.run_dir} holds {', '.join(others)} "
                                 f"of a run; restore the log from a copy, or use a new --out")

    # --- plumbing ------------------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One transaction; a transaction opened inside it (on the same thread: other threads
        wait for the lock) joins it (commits with the outer)."""
        with self._lock:
            with self._transaction() as db:
                yield db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        if self._depth:
            self._depth += 1
            try:
                yield self._db
            finally:
                self._depth -= 1
            return
        self._depth = 1
        try:
            self._db.execute("BEGIN IMMEDIATE")
            yield self._db
            self._db.execute("COMMIT")
        except BaseException as e:
            if self._db.in_transaction:  # SQLite may have rolled back already (a full disk)
                with suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")
            if isinstance(e, sqlite3.OperationalError):
                raise StoreError(f"{self.path}: cannot write the run log ({e}); this write was "
                                 f"rolled back, what was written before is kept: fix the cause "
                                 f"(e.g. free disk space) and re-run the same command to resume") from e
            raise
        finally:
            self._depth = 0

    def _read(self, query: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(query, list(args)).fetchall()

    def table(self, spec: TableSpec) -> Table:
        """A package's own table (created on first use, so a reader never waits for a write lock
        on a table that exists; a different existing layout is refused)."""
        if not check_columns(self._db, spec, self.path):
            if self.readonly:
                self._db.execute(spec.ddl(temp=True))
            else:
                with self.transaction() as db:
                    db.execute(spec.ddl())
        return Table(self, spec)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "RunLog":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- call cache ----------------------------------------------------------------------------
    def get_calls(self, keys: list[str]) -> dict[str, Any]:
        return {k: decode_value(v) for k, v in self._calls.lookup("key", keys, "value").items()}

    def put_calls(self, op: str, items: Iterable[tuple[str, Any]]) -> None:
        now = time.time()
        self._calls.insert([(k, op, encode_value(v), now) for k, v in items], replace=True)

    def import_calls(self, other_run_dir: str | Path) -> int:
        """Copy another run directory's call cache into this one (keys are content-addressed, so
        only calls with the same backend identity, op and inputs can ever hit); returns how many
        calls were new here."""
        src = Path(other_run_dir) / LOG_NAME
        if not src.exists():
            raise StoreError(f"{other_run_dir}: not a run directory (no {LOG_NAME})")
        before = self._calls.count()
        self._db.execute("ATTACH DATABASE ? AS other", (str(src),))
        try:
            other = {r[1] for r in self._db.execute("PRAGMA other.table_info(calls)")}
            if other != set(CALLS.names):
                raise StoreError(f"{src}: no call cache this evalaware can read")
            with self.transaction() as db:
                db.execute(f"INSERT OR IGNORE INTO calls SELECT {', '.join(CALLS.names)} FROM other.calls")
        finally:
            self._db.execute("DETACH DATABASE other")
        return self._calls.count() - before

    def count_calls(self) -> dict[str, int]:
        return self._calls.count_by("op")

    def iter_calls(self) -> Iterator[tuple[str, str]]:
        yield from self._calls.select(["key", "op"])

    # --- results -------------------------------------------------------------------------------
    def done_ids(self, method: str) -> set[str]:
        return {r[0] for r in self._results.select(["sample_id"], {"method": method})}

    def put_results(self, method: str, records: Sequence[Record | dict[str, Any]],
                    calls: Sequence[ModelCall] = ()) -> None:
        """Store records (a dict is checked by :meth:`Record.from_dict` first) and the model
        calls behind them, in one transaction."""
        now = time.time()
        rows = [Record.coerce(r) for r in records]
        with self.transaction():
            self._results.insert([(method, r.sample_id, dumps(r.to_dict()), now) for r in rows],
                                 replace=True)
            self._model_calls.insert([(method, c.sample_id, c.role, c.k, dumps(c.to_dict()))
                                      for c in calls], replace=True)

    def replace_results(self, method: str, records: Sequence[Record | dict[str, Any]]) -> None:
        """The method's records become exactly `records`, in one transaction (a failure keeps
        the old ones)."""
        with self.transaction():
            self._results.delete({"method": method})
            self.put_results(method, records)

    def results(self, method: str | None = None) -> list[Record]:
        """Records in dataset order (then method)."""
        pos = self.sample_positions()
        rows = self._results.select(["method", "sample_id", "record"],
                                    {"method": method} if method else None)
        rows.sort(key=lambda r: (r[0], pos.get(r[1], -1)))
        return [Record.from_dict(json.loads(r[2])) for r in rows]

    def result_dicts(self, method: str | None = None) -> list[dict[str, Any]]:
        """:meth:`results` in their stored JSON form (for code that reads records as mappings:
        metrics, report)."""
        return [r.to_dict() for r in self.results(method)]

    def model_calls(self, method: str | None = None, role: str | None = None) -> list[ModelCall]:
        """Logged model calls (see :mod:`harness.methods.call_log`), optionally of one method/role."""
        where = {k: v for k, v in (("method", method), ("role", role)) if v is not None}
        return [ModelCall.from_dict(json.loads(c)) for (c,) in self._model_calls.select(["call"], where)]

    def methods(self) -> list[str]:
        return [r[0] for r in self._results.select(["method"], distinct=True, order_by=["method"])]

    def export_jsonl(self, path: str | Path) -> int:
        """The records as JSONL at `path`, replaced atomically (never written through a link
        planted there: :func:`harness.core.atomic.replace_file`)."""
        from harness.runlog.export import write_records

        with replace_file(path) as f:
            return write_records(self.result_dicts(), f, "jsonl")

    # --- samples -------------------------------------------------------------------------------
    def put_samples(self, samples: list[Sample]) -> None:
        """Record the dataset; refuse a sample whose content changed under the same id."""
        with self.transaction():
            stored = dict(self._samples.select(["sample_id", "sample"]))
            rows: list[tuple[str, str, int]] = []
            for s in samples:
                js = s.to_json()
                if s.id in stored:
                    if stored[s.id] != js:
                        raise StoreError(f"{self.path}: sample {s.id!r} differs from the one this "
                                         f"run already used; use a new --out directory")
                    continue
                rows.append((s.id, js, len(stored) + len(rows)))
            self._samples.insert(rows)

    def samples(self) -> list[Sample]:
        rows = self._samples.select(["sample"], order_by=["position"])
        return [parse_record(json.loads(r[0]), RecordContext(self.path, i)) for i, r in enumerate(rows)]

    def sample_positions(self) -> dict[str, int]:
        """{sample id: position in the run's dataset order}."""
        return dict(self._samples.select(["sample_id", "position"]))
