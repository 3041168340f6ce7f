"""The run log: the one owner of a run directory's SQLite file and its manifest.

Tables (see :mod:`harness.runlog.schema`)
- ``calls``: content-addressed cache of every model call (key = sha256 of backend identity,
  operation, token ids and sampling parameters) -> encoded result (JSON or .npy, never pickle).
- ``results``: one JSON record per (method, sample).
- ``samples``: the dataset as the run saw it (a changed sample under the same id is refused).
- ``meta``: manifest, settings, model identity, schema version (:mod:`harness.runlog.manifest`).
- tables other packages register with :meth:`RunLog.table` (activations index, embeddings).

Opening the file, transactions and read-only access: :mod:`harness.runlog.connection`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from harness.data.records import RecordContext
from harness.data.readers import parse_record
from harness.core.atomic import replace_file
from harness.core.errors import StoreError
from harness.core.records import ModelCall, Record
from harness.core.sample import Sample
from harness.runlog.codec import decode_value, dumps, encode_value
from harness.runlog.connection import LogConnection
from harness.runlog.schema import CALLS, LOG_NAME, META, MODEL_CALLS, RESULTS, SAMPLES
from harness.runlog.manifest import MetaAndManifest
from harness.runlog.tables import Table


class RunLog(LogConnection, MetaAndManifest):
    """The SQLite log (and manifest) of one run directory: the call cache, the records, the
    samples (here) and the meta table (:class:`MetaAndManifest`)."""

    def __init__(self, run_dir: str | Path, create: bool = True, readonly: bool = False) -> None:
        """`create`: make the directory and log when missing; `readonly`: a reader's view of an
        existing log, which never writes (:mod:`harness.runlog.connection`)."""
        super().__init__(run_dir, create, readonly)
        self._calls, self._results = Table(self, CALLS), Table(self, RESULTS)
        self._samples, self._meta = Table(self, SAMPLES), Table(self, META)
        self._model_calls = Table(self, MODEL_CALLS)

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
