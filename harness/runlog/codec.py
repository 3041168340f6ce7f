"""How call-cache values are stored: arrays as compressed .npy (never pickle), the rest as JSON."""

from __future__ import annotations

import io
import json
import zlib
from typing import Any

import numpy as np


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


def dumps(value: Any) -> str:
    """Canonical JSON of a record, setting or manifest (sorted keys, UTF-8 kept)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
