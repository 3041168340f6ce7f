"""The run log: the only code that opens a run directory's SQLite file or writes its manifest.

``RunLog`` (core tables, call cache, results, samples, meta, manifest), ``TableSpec``/``Table``
(tables other packages register), the schema version and the value codec. See ``log.py``.
"""

from harness.runlog.codec import decode_value, encode_value
from harness.runlog.log import RunLog
from harness.runlog.schema import LOG_NAME, SCHEMA_VERSION
from harness.runlog.tables import Table, TableSpec

__all__ = ["RunLog", "Table", "TableSpec", "LOG_NAME", "SCHEMA_VERSION", "encode_value",
           "decode_value"]
