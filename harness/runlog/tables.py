"""Typed tables inside a run log: the core ones and those other packages register.

A package that keeps data in the run log (activations index, taxonomy embeddings, ...) declares
a :class:`TableSpec` and gets a :class:`Table` from :meth:`RunLog.table`; it never writes SQL.
Column names are checked against the spec, values always go through parameters.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from contextlib import AbstractContextManager
from typing import Any, Iterable, Protocol, Sequence

from harness.core.errors import StoreError

CHUNK = 500  # SQLite's host-parameter limit is 999 on old builds


@dataclass(frozen=True)
class TableSpec:
    """A table: name, ``(column, SQL type)`` pairs, the primary-key columns."""

    name: str
    columns: tuple[tuple[str, str], ...]
    key: tuple[str, ...]
    without_rowid: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.columns)

    def ddl(self, temp: bool = False) -> str:
        """``CREATE TABLE IF NOT EXISTS``; `temp`: an empty stand-in in a reader's temporary
        schema (a read-only log that lacks the table reads as having no rows)."""
        cols = ", ".join(f"{c} {t} NOT NULL" for c, t in self.columns)
        tail = " WITHOUT ROWID" if self.without_rowid else ""
        return (f"CREATE {'TEMP ' if temp else ''}TABLE IF NOT EXISTS {self.name} ({cols}, "
                f"PRIMARY KEY ({', '.join(self.key)})){tail}")


class Owner(Protocol):
    """What a table needs from the run log that owns the connection."""

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...

    def _read(self, query: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]: ...


class Table:
    """Rows of one registered table (reads and writes go through the owning run log)."""

    def __init__(self, log: Owner, spec: TableSpec) -> None:
        self.log, self.spec = log, spec

    def _cols(self, cols: Iterable[str]) -> list[str]:
        cols = list(cols)
        bad = [c for c in cols if c not in self.spec.names]
        if bad:
            raise ValueError(f"table {self.spec.name} has no column(s) {bad}")
        return cols

    def _where(self, where: dict[str, Any] | None) -> tuple[str, list[Any]]:
        if not where:
            return "", []
        cols = self._cols(where)
        return " WHERE " + " AND ".join(f"{c}=?" for c in cols), [where[c] for c in cols]

    def insert(self, rows: Iterable[Sequence[Any]], replace: bool = False) -> None:
        """Insert full rows (column order of the spec); `replace` overwrites equal keys."""
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        q = f"{verb} INTO {self.spec.name} VALUES ({', '.join('?' * len(self.spec.columns))})"
        with self.log.transaction() as db:
            db.executemany(q, list(rows))

    def delete(self, where: dict[str, Any]) -> None:
        w, args = self._where(where)
        with self.log.transaction() as db:
            db.execute(f"DELETE FROM {self.spec.name}{w}", args)

    def select(self, columns: Sequence[str], where: dict[str, Any] | None = None,
               order_by: Sequence[str] = (), distinct: bool = False) -> list[tuple[Any, ...]]:
        cols = self._cols(columns)
        w, args = self._where(where)
        order = f" ORDER BY {', '.join(self._cols(order_by))}" if order_by else ""
        q = f"SELECT {'DISTINCT ' if distinct else ''}{', '.join(cols)} FROM {self.spec.name}{w}{order}"
        return self.log._read(q, args)

    def lookup(self, key_column: str, keys: Sequence[Any], value_column: str) -> dict[Any, Any]:
        """{key: value} for the keys present, in chunks of :data:`CHUNK`."""
        k, v = self._cols([key_column, value_column])
        out: dict[Any, Any] = {}
        for i in range(0, len(keys), CHUNK):
            chunk = list(keys[i:i + CHUNK])
            q = f"SELECT {k}, {v} FROM {self.spec.name} WHERE {k} IN ({','.join('?' * len(chunk))})"
            out.update(self.log._read(q, chunk))
        return out

    def count(self, where: dict[str, Any] | None = None) -> int:
        w, args = self._where(where)
        return int(self.log._read(f"SELECT COUNT(*) FROM {self.spec.name}{w}", args)[0][0])

    def count_by(self, column: str, where: dict[str, Any] | None = None) -> dict[Any, int]:
        (c,) = self._cols([column])
        w, args = self._where(where)
        return dict(self.log._read(f"SELECT {c}, COUNT(*) FROM {self.spec.name}{w} GROUP BY {c}", args))

    def total(self, column: str, where: dict[str, Any] | None = None) -> float:
        (c,) = self._cols([column])
        w, args = self._where(where)
        return self.log._read(f"SELECT COALESCE(SUM({c}), 0) FROM {self.spec.name}{w}", args)[0][0]

    def page_bytes(self) -> int | None:
        """Bytes of the table's database pages, where SQLite has the ``dbstat`` table."""
        try:
            return self.log._read("SELECT SUM(pgsize) FROM dbstat WHERE name=?", [self.spec.name])[0][0]
        except sqlite3.Error:
            return None


def check_columns(db: sqlite3.Connection, spec: TableSpec, path: Any) -> bool:
    """Whether the table exists; an existing table whose columns differ from the spec (a foreign
    or newer layout) is refused."""
    have = [r[1] for r in db.execute(f"PRAGMA table_info({spec.name})")]
    if have and tuple(have) != spec.names:
        raise StoreError(f"{path}: table {spec.name} has columns {have}, expected "
                         f"{list(spec.names)}; not a run log this evalaware can read")
    return bool(have)
