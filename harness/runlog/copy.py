"""Copying a run directory whole: its log as one consistent snapshot, into a new directory that
appears only when complete.

The log is copied with SQLite's backup API through a reader's connection
(:func:`~harness.runlog.connection._connect_readonly`), so a writer at work in the source (WAL)
is neither blocked nor half-copied; the writer's lock, the log's journals and the exported
records are not copied (the copy is a run directory of its own; ``export`` remakes its records).
Everything else (the manifest, ``activations``) is copied as files. The copy is built in a hidden
sibling and renamed into place: an interrupted copy leaves no half run directory under the name
(a killed one's hidden sibling is removed by the next copy to that name).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from harness.core.errors import StoreError
from harness.runlog.connection import _connect_readonly
from harness.runlog.lock import LOCK_NAME
from harness.runlog.schema import LOG_NAME

#: What a copy leaves behind: the writer's lock, the log's journals (folded into the snapshot),
#: the exported records.
NOT_COPIED = frozenset({LOCK_NAME, f"{LOG_NAME}-wal", f"{LOG_NAME}-shm", f"{LOG_NAME}-journal",
                        "results.jsonl"})


def staging_dir(dst: Path, what: str) -> Path:
    """A new hidden directory beside `dst` (``.<name>.<what>-*``) to build `dst` in, then rename into
    place; what a killed earlier build of `dst` left there is removed first."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    for stale in dst.parent.glob(f".{dst.name}.{what}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f".{dst.name}.{what}-", dir=dst.parent))


def copy_run(src: str | Path, dst: str | Path) -> Path:
    """Copy the run directory `src` to `dst` (which must not exist); returns `dst`."""
    src, dst = Path(src), Path(dst)
    if not (src / LOG_NAME).is_file():
        raise StoreError(f"{src}: not a run directory (no {LOG_NAME})")
    if dst.exists():
        raise StoreError(f"{dst}: exists; a run directory is copied only to a new path")
    tmp = staging_dir(dst, "copying")
    try:
        for entry in src.iterdir():
            if entry.name in NOT_COPIED or entry.name == LOG_NAME:
                continue
            if entry.is_dir():
                shutil.copytree(entry, tmp / entry.name, symlinks=True)
            else:
                shutil.copy2(entry, tmp / entry.name, follow_symlinks=False)
        source = _connect_readonly(src / LOG_NAME)
        target = sqlite3.connect(tmp / LOG_NAME)
        try:
            source.backup(target)
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{src / LOG_NAME}: cannot be copied ({e})") from e
        finally:
            target.close()
            source.close()
        os.rename(tmp, dst)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dst


#: The rows a slim copy drops: the request cache and the call log (what a resumed run reuses, not
#: what a run's records are read from).
CACHE_TABLES = ("calls", "model_calls")


def slim_copy(src: str | Path, dst: str | Path) -> Path:
    """The samples, records and meta of the run directory `src` and its manifest, in `dst` (a new
    path): its log without the request cache and the call log, compacted, in rollback-journal mode
    (one file: a reader leaves nothing beside it); no other file (activations, exports). For an
    archive's sub-run (``organism archive``), which is built in a hidden directory and renamed."""
    src, dst = Path(src), Path(dst)
    if not (src / LOG_NAME).is_file():
        raise StoreError(f"{src}: not a run directory (no {LOG_NAME})")
    if dst.exists():
        raise StoreError(f"{dst}: exists; a run directory is copied only to a new path")
    dst.mkdir(parents=True)
    try:
        if (src / "manifest.json").is_file():
            shutil.copy2(src / "manifest.json", dst / "manifest.json")
        source = _connect_readonly(src / LOG_NAME)
        target = sqlite3.connect(dst / LOG_NAME)
        try:
            source.backup(target)
            source.close()
            tables = {r[0] for r in target.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            for t in CACHE_TABLES:
                if t in tables:
                    target.execute(f"DELETE FROM {t}")
            target.commit()
            target.execute("VACUUM")
            target.execute("PRAGMA journal_mode=DELETE")
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{src / LOG_NAME}: cannot be copied ({e})") from e
        finally:
            target.close()
            source.close()
    except BaseException:
        shutil.rmtree(dst, ignore_errors=True)
        raise
    return dst
