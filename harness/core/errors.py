"""User-facing errors: one line naming the file, record and field."""

from __future__ import annotations

# The base class and AssetError live in tokenization (which depends on nothing in harness).
from tokenization.errors import AssetError, EvalAwareError

__all__ = ["first_line", "is_out_of_memory", "EvalAwareError", "AssetError", "DatasetError", "BackendError",
           "StoreError", "EnvironmentFailure", "DiskFull"]


def first_line(e: BaseException, limit: int = 300) -> str:
    """The first non-empty line of `e`'s message (else its class name), cut to `limit` characters."""
    line = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    return line if len(line) <= limit else f"{line[:limit]}... ({len(line) - limit} more characters)"


def is_out_of_memory(e: BaseException) -> bool:
    """Python's MemoryError or torch's (CUDA) OutOfMemoryError."""
    return isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError"


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


class EnvironmentFailure(EvalAwareError):
    """The machine, not the input, failed (disk full, a missing package): the CLI exits 1."""

    exit_code = 1


class DiskFull(EnvironmentFailure):
    """A write ran out of space; `path` is the file that was being written (left as it was)."""

    def __init__(self, path: str, strerror: str = "No space left on device") -> None:
        self.path = path
        super().__init__(f"{path}: {strerror} while writing it (nothing partial left; the file, if it "
                         f"existed, is unchanged); free space or write elsewhere, then re-run")
