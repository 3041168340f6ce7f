"""The one guard on every path a command writes, so that a command that exits 0 has destroyed
nothing: :func:`check_output` before the work, :func:`output_file` (the guard, then an atomic
write) for each file.

Refused, with one line naming the option and the path:

- a run directory's own files (:data:`RUN_FILES`: the run log and its journals, the manifest,
  the exported records, the writer's lock, the activations), in a directory the command names as
  a run (`runs`: one it is about to create counts) or in any directory that holds a run log;
  `derived` names the run files the command itself regenerates (``export``: ``results.jsonl``);
- any input of the command (`inputs`): the same file by path, through a link, or by inode (a
  hard link to it), or a path inside an input directory (a probe, a folder of logs);
- a symbolic link at the path (planted in an output directory under a name the command writes):
  :func:`harness.core.atomic.replace_file` refuses it, and writes through a fresh temporary file
  renamed over the target, so a hard link planted there keeps its bytes.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator

from harness.core.atomic import refuse_symlink, replace_file
from harness.core.errors import EvalAwareError
from harness.runlog.lock import LOCK_NAME
from harness.runlog.schema import LOG_NAME

#: A run directory's own entries: what ``show``, resuming and every reader of the run rely on.
RUN_FILES: dict[str, str] = {
    LOG_NAME: "run log", f"{LOG_NAME}-wal": "run log's journal", f"{LOG_NAME}-shm": "run log's journal",
    f"{LOG_NAME}-journal": "run log's journal", "manifest.json": "manifest",
    "results.jsonl": "exported records", LOCK_NAME: "writer's lock", "activations": "activations",
}


def _absolute(path: str | Path) -> Path:
    """`path` with its directory resolved (links followed) and its last part as given."""
    p = Path(os.path.abspath(path))
    return p.parent.resolve() / p.name


def _is_input(p: Path, given: Path) -> bool:
    """Whether writing `p` would overwrite the input `given` (the same file, or one inside it)."""
    if given.is_dir():
        return given.resolve() in (p.resolve(), *p.parents)
    if p == _absolute(given) or p.resolve() == given.resolve():
        return True
    try:
        return os.path.samefile(p, given)
    except OSError:  # either is missing
        return False


def run_file(path: str | Path, runs: Iterable[str | Path] = (), derived: Iterable[str] = ()
             ) -> tuple[Path, str] | None:
    """(run directory, what) when `path` is, or lies inside, one of a run directory's own entries
    (other than `derived` in the `runs` named); else None."""
    p = _absolute(path)
    named = {_absolute(r) for r in runs}
    for d in p.parents:
        first = p.relative_to(d).parts[0]
        if first not in RUN_FILES or (first in derived and d in named and first == p.name):
            continue
        if d in named or (d / LOG_NAME).is_file():
            return d, RUN_FILES[first]
    return None


def check_output(path: str | Path, option: str, inputs: Iterable[str | Path | None] = (),
                 runs: Iterable[str | Path] = (), derived: Iterable[str] = ()) -> None:
    """Refuse (one line) to write `path` (given as `option`) over a run's own file, an input of
    the command, or through a symbolic link (see the module's docstring)."""
    p = _absolute(path)
    own = run_file(p, runs, derived)
    if own is not None:
        raise EvalAwareError(f"{option} {path}: would overwrite the {own[1]} of the run directory "
                             f"{own[0]} ({p.relative_to(own[0])}); write elsewhere")
    for i in inputs:
        if i is not None and _is_input(p, Path(i)):
            raise EvalAwareError(f"{option} {path}: would overwrite an input of this command ({i}); "
                                 f"write elsewhere")
    refuse_symlink(p)


@contextmanager
def output_file(path: str | Path, option: str, inputs: Iterable[str | Path | None] = (),
                runs: Iterable[str | Path] = (), derived: Iterable[str] = (), binary: bool = False,
                newline: str | None = None, mkdir: bool = False) -> Iterator[IO]:
    """:func:`check_output`, then a file whose content replaces `path` atomically when the block
    ends without error (`mkdir`: its directory is made when missing)."""
    check_output(path, option, inputs, runs, derived)
    if mkdir:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    with replace_file(path, binary=binary, newline=newline) as f:
        yield f


def write_output(path: str | Path, data: str | bytes, option: str, mkdir: bool = False,
                 **guard: Iterable) -> Path:
    """`data` (text or bytes) written to `path` by :func:`output_file`; returns `path`."""
    with output_file(path, option, binary=isinstance(data, bytes), mkdir=mkdir, **guard) as f:
        f.write(data)
    return Path(path)
