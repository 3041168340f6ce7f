"""User-facing errors: one line naming the file, record and field."""

from __future__ import annotations

# The base class and AssetError live in tokenization (which depends on nothing in harness).
from tokenization.errors import AssetError, EvalAwareError

__all__ = ["EvalAwareError", "AssetError", "DatasetError", "BackendError", "StoreError"]


class DatasetError(EvalAwareError):
    """A dataset file is malformed. `index` counts records from 0; the message counts them from
    1, as it counts lines ("record 2: invalid JSON on line 2")."""

    def __init__(self, path: str, message: str, index: int | None = None,
                 record_id: str | None = None, field: str | None = None) -> None:
        self.path, self.index, self.record_id, self.field = path, index, record_id, field
        where = [str(path)]
        if index is not None:
            where.append(f"record {index + 1}")
        if record_id is not None:
            where.append(f"id={record_id!r}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{': '.join(where)}: {message}")


class BackendError(EvalAwareError):
    """A backend could not be created or failed a call."""


class StoreError(EvalAwareError):
    """The run store is inconsistent with the requested run."""
