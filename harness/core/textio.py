"""Reading user text files: UTF-8, with or without a byte-order mark, nothing else.

A UTF-8 BOM at the start of a file (Windows editors, spreadsheet exports) is dropped. Any other
byte sequence that is not UTF-8 is a :class:`~harness.core.errors.DatasetError` naming the file, the
line and the byte offset, so the user can find it (``head -c OFFSET``, a hex editor). Files that
start with a UTF-16/32 BOM are named as such, since "invalid byte 0xff" would not tell the user
what to do.
"""

from __future__ import annotations

import codecs
from pathlib import Path

from harness.core.errors import DatasetError

_OTHER_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
               (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def decode_utf8(data: bytes, path: str | Path) -> str:
    """`data` as text: UTF-8, a leading BOM dropped; otherwise one error naming line and byte."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
        skipped = len(codecs.BOM_UTF8)
    else:
        for bom, name in _OTHER_BOMS:
            if data.startswith(bom):
                raise DatasetError(str(path), f"the file is {name} (byte-order mark "
                                   f"{bom.hex(' ')}); save it as UTF-8")
        skipped = 0
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        offset = e.start + skipped
        bad = data[e.start:e.end].hex(" ")
        raise DatasetError(str(path), f"line {line}: not UTF-8 (byte offset {offset}: {bad}, "
                           f"{e.reason}); save the file as UTF-8") from None


def read_utf8(path: str | Path) -> str:
    """The whole file as text (see :func:`decode_utf8`); a FIFO or device is refused, not read
    (reading a FIFO would wait for a writer forever)."""
    refuse_special(path)
    return decode_utf8(Path(path).read_bytes(), path)


def refuse_special(path: str | Path) -> None:
    """A :class:`~harness.core.errors.DatasetError` when `path` exists and is neither a regular
    file nor a directory (a FIFO, a device, a socket)."""
    p = Path(path)
    if p.exists() and not (p.is_file() or p.is_dir()):
        raise DatasetError(str(path), "not a regular file (a FIFO, device or socket); give a file")
