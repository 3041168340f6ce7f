"""The connection to a run directory's SQLite log: opening it, transactions, reads, tables.

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

import sqlite3
import threading
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Iterable, Iterator, Self

from harness.core.errors import StoreError
from harness.runlog.schema import LOG_NAME, prepare
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


class LogConnection:
    """The connection to one run directory's log: opening it (a writer's or a reader's), one
    transaction at a time, reads under the same lock, the tables packages register."""

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def store_failure(e: BaseException) -> tuple[int, str] | None:
    """(exit code, one line) for a SQLite failure of a run log (a full disk: 1, the environment;
    a damaged or foreign file: 2, the input), else None: the CLI's error boundary asks here, so
    SQLite stays inside the run log."""
    from harness.core.errors import first_line

    if isinstance(e, sqlite3.OperationalError) and "full" in str(e):
        return 1, f"the run log: {first_line(e)}; free space, then re-run the same command to resume"
    if isinstance(e, sqlite3.DatabaseError):
        return 2, f"the run log: {first_line(e)} (not a run directory's intact store.sqlite?)"
    return None
