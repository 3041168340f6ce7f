"""One shard file of a capture: its name, its tensors' dtypes, its row record, its bytes' check.

A shard ``shard-<n>.safetensors`` holds one tensor per (pooling, layer), named
``"<pooling>/<layer>"``, and records in its metadata (``rows/<pooling>``: a JSON list of sample
ids) which sample each row of that pooling's tensors holds; the metadata is part of the bytes
the sha256 covers. A shard written before this record (format ``evalaware-act-1`` without
``rows/``) has none (:data:`NO_ORDER`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.atomic import write_bytes
from harness.core.errors import StoreError

if TYPE_CHECKING:
    import torch

DTYPES = {"fp16": "float16", "float16": "float16", "bf16": "bfloat16",
          "bfloat16": "bfloat16", "fp32": "float32", "float32": "float32"}
"""Storage dtypes by name: the torch dtype's name (:func:`torch_dtype`; torch is imported only then)."""
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}  # bytes per value of each DTYPES value
CANONICAL_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}
ROWS_KEY = "rows/"  # shard metadata: "rows/<pooling>" -> JSON list of the sample id of each row
NOT_RECORDED = "it points at a shard the capture did not record"
NO_ORDER: list[str] | None = None  # a shard written before it recorded its rows' samples


class CorruptShard(StoreError):
    """A shard file is missing, unreadable, or not the bytes its index recorded."""


class CorruptIndex(CorruptShard):
    """An ``act_index`` row does not point at its sample's row of a shard."""


def shard_name(number: int) -> str:
    return f"shard-{number:05d}.safetensors"


def shard_number(name: str) -> int:
    return int(name.split("-")[1].split(".")[0])


def shard_name_of(number: Any) -> str:
    """The file name an index row's ``shard`` points at (a value that is no shard number, in a
    tampered index, names no recorded shard)."""
    return shard_name(number) if isinstance(number, int) else f"shard {number!r}"


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of storage dtype `name` (a key of :data:`DTYPES`)."""
    import torch
    return getattr(torch, DTYPES[name])


def save_shard(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write a shard crash-safely: a fresh temporary file, fsynced, renamed into place, never
    through a link planted in the capture's folder (:func:`harness.core.atomic.write_bytes`)."""
    from safetensors.torch import save  # imports torch
    write_bytes(path, save(tensors, metadata=metadata))


def row_order(f: Any) -> dict[str, list[str] | None]:
    """{pooling: sample id of each row} from an open shard's metadata; a record that is not a
    list of ids reads as an empty one (every row then fails the check)."""
    out: dict[str, list[str] | None] = {}
    for k, v in (f.metadata() or {}).items():
        if k.startswith(ROWS_KEY):
            try:
                ids = json.loads(v)
            except ValueError:
                ids = []
            out[k[len(ROWS_KEY):]] = ids if isinstance(ids, list) else []
    return out


def row_problem(order: list[str] | None, n_rows: int | None, sample_id: str, offset: Any,
                shared: bool) -> str | None:
    """What is wrong with one index row (None: nothing): its tensor is missing, its offset is
    outside it, the shard's record says another sample is there, or (a shard without the
    record) another index row points at the same row."""
    if n_rows is None:
        return "the shard has no such tensor"
    if not isinstance(offset, int) or not 0 <= offset < n_rows:
        return f"offset {offset!r} is outside the shard's {n_rows} rows"
    if order is not None:
        there = order[offset] if offset < len(order) else None
        if there != sample_id:
            return f"offset {offset} holds sample {there!r}" if there is not None else \
                f"offset {offset} holds no recorded sample"
    elif shared:
        return f"offset {offset} is indexed for another sample too"
    return None


_VERIFIED: set[tuple[str, int, int, int, str]] = set()
"""(path, size, mtime_ns, inode, sha256) of the shard files already hashed by this process."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def file_problem(path: Path, size: int, digest: str) -> str | None:
    """What is wrong with a shard file against its recorded size and sha256 (None: nothing); a
    file is hashed once per process while its size, mtime and inode stay the same."""
    try:
        st = path.stat()
        if st.st_size != size:
            return f"{st.st_size} bytes, {size} recorded (truncated or overwritten)"
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, digest)
        if key in _VERIFIED:
            return None
        got = sha256(path)
    except FileNotFoundError:
        return "the file is missing"
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    if got != digest:
        return f"sha256 {got[:12]}..., {digest[:12]}... recorded (the bytes changed)"
    _VERIFIED.add(key)
    return None
