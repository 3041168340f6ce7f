"""Reader for quicktok-v1's binary vocabularies and writer of tiktoken ``.tiktoken`` files.

quicktok format (little endian): ``.vocab`` = u32 count, then per entry u16 length, bytes,
u32 rank; ``.special`` = u32 count, then per entry u32 id, u16 length, bytes.
"""

from __future__ import annotations

import base64
import struct
from pathlib import Path


def _check_end(path: Path, off: int, size: int) -> None:
    if off != size:
        raise ValueError(f"{path}: {size - off} trailing bytes after the declared entries")


def read_vocab(path: str | Path) -> dict[bytes, int]:
    """token bytes -> rank, from a quicktok ``.vocab`` file."""
    path = Path(path)
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    off, ranks = 4, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<H", data, off)
        off += 2
        tok = data[off:off + n]
        off += n
        (rank,) = struct.unpack_from("<I", data, off)
        off += 4
        ranks[tok] = rank
    _check_end(path, off, len(data))
    if len(ranks) != count or sorted(ranks.values()) != list(range(count)):
        raise ValueError(f"{path}: ranks are not a permutation of 0..{count - 1}")
    return ranks


def read_special(path: str | Path) -> dict[str, int]:
    """special token text -> id, from a quicktok ``.special`` file."""
    path = Path(path)
    data = path.read_bytes()
    (count,) = struct.unpack_from("<I", data, 0)
    off, out = 4, {}
    for _ in range(count):
        (tid,) = struct.unpack_from("<I", data, off)
        off += 4
        (n,) = struct.unpack_from("<H", data, off)
        off += 2
        out[data[off:off + n].decode("utf-8")] = tid
        off += n
    _check_end(path, off, len(data))
    return out


def write_tiktoken(ranks: dict[bytes, int], path: str | Path) -> None:
    """Write ranks in tiktoken's format: one ``base64(token) rank`` line per token, by rank."""
    lines = [base64.b64encode(tok) + b" " + str(rank).encode() + b"\n"
             for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1])]
    Path(path).write_bytes(b"".join(lines))


def read_tiktoken(path: str | Path) -> dict[bytes, int]:
    """Read a tiktoken ``.tiktoken`` file without network access or caching."""
    out = {}
    for line in Path(path).read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            out[base64.b64decode(tok)] = int(rank)
    return out
