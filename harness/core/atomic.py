"""Replacing a file in a directory someone else may have written to (a run directory, an export
target), without following anything planted there.

:func:`replace_file` writes to a fresh temporary file in the target's directory, created with
``O_CREAT | O_EXCL | O_NOFOLLOW`` under a random name (so no symbolic or hard link planted under a
predictable name such as ``manifest.json.tmp`` or ``results.jsonl.partial`` is opened), and then
``os.replace``-s it over the target. A rename swaps the directory entry: a hard link at the
target keeps the other file's bytes as they were. A target that is a symbolic link is refused
(one line), rather than replaced or followed; so is one that is not a regular file (a device such
as ``/dev/full``, a FIFO, a folder). On any error the temporary file is removed and the
target is untouched; a disk that fills up (``ENOSPC``, a quota, a file too large) raises
:class:`~harness.core.errors.DiskFull` naming the target (the CLI's exit 1). The file's mode
is the process's default (0666 less the umask), as ``open(path, "w")`` would give.
"""

from __future__ import annotations

import errno
import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

from harness.core.errors import DiskFull, EvalAwareError

FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})  # a write the disk had no room for


def refuse_symlink(path: str | Path) -> None:
    """One line (:class:`EvalAwareError`) when `path` is a symbolic link."""
    p = Path(path)
    if p.is_symlink():
        raise EvalAwareError(f"{p}: is a symbolic link (to {os.readlink(p)}); refusing to write "
                             f"through it: remove the link or write elsewhere")


def _kind(p: Path) -> str:
    import stat

    mode = p.stat().st_mode
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")


@contextmanager
def replace_file(path: str | Path, encoding: str = "utf-8", newline: str | None = None,
                 binary: bool = False) -> Iterator[IO]:
    """A file to write (text, or bytes when `binary`) whose content becomes `path` when the block
    ends without error."""
    p = Path(path)
    refuse_symlink(p)
    if p.exists() and not p.is_file():  # a device (/dev/full), a FIFO, a folder: never renamed over
        raise EvalAwareError(f"{p}: is not a regular file ({_kind(p)}); refusing to replace it: write "
                             f"to a file path")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = p.with_name(f".{p.name}.{secrets.token_hex(6)}.partial")
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:  # a name already taken (planted or a collision): draw another
            continue
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding=encoding, newline=newline)) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        refuse_symlink(p)  # planted while we wrote
        os.replace(tmp, p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno in FULL:
            raise DiskFull(str(p), e.strerror or "No space left on device") from e
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    """`path` holds `text`, written by :func:`replace_file`."""
    with replace_file(path, encoding=encoding) as f:
        f.write(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    """`path` holds `data`, written by :func:`replace_file`."""
    with replace_file(path, binary=True) as f:
        f.write(data)


def save_figure(fig: Any, path: str | Path, **savefig: Any) -> Path:
    """A matplotlib figure saved to `path` by :func:`replace_file` (the format from the suffix)."""
    p = Path(path)
    with replace_file(p, binary=True) as f:
        fig.savefig(f, format=p.suffix.lstrip(".") or "png", **savefig)
    return p
