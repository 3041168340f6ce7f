"""One writer per run directory: an OS file lock plus a record of who holds it.

Every command that writes into a directory (``run``, ``activations capture``, the writing ``probes``
commands, ``taxonomy``, ``steer run``) enters :func:`run_dir_lock` before it loads a model; a
second writer exits at once with a message naming the directory and the holder's pid. Readers
(``show``, ``export``, ``report``) take no lock: SQLite in WAL mode lets them read while a run
writes.

How it works
- The lock is ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``DIR/.evalaware-lock``. The kernel drops it
  when the holder's file descriptor closes, so a killed process (``kill -9``, out of memory) never
  leaves the directory locked.
- The same file holds the holder's pid, host, command and start time (JSON), written after the
  lock is taken and emptied on a clean release. A record found non-empty by the next writer was
  left by a process that did not release cleanly: the writer takes over and prints a notice naming
  that pid (and whether it is still running).
- The file is never deleted: deleting a lock file while another process waits on it would let two
  processes lock two different files of the same name.
- Where the file system does not support ``flock`` (some network mounts), the pid record alone
  decides: a live pid on this host holds the directory; a dead one is taken over.
- Re-entrant within a process (counted per resolved path), so a CLI command can take the lock
  before it loads a model and the library function it calls (``run_methods``) can take it again.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import inspect
import json
import os
import socket
import stat
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from harness.core.errors import EvalAwareError, StoreError
from harness.core.redact import redact_text
from harness.runlog import LOG_NAME as STORE_NAME

LOCK_NAME = ".evalaware-lock"

_held: dict[str, tuple[int, int]] = {}  # resolved dir -> (fd, depth)
_guard = threading.Lock()


class RunDirBusy(EvalAwareError):
    """Another live process writes into this run directory."""


@dataclass(frozen=True)
class Holder:
    """What the lock file says about the process that took the lock."""

    pid: int | None
    host: str | None
    command: str
    started: str

    @classmethod
    def read(cls, fd: int) -> "Holder | None":
        raw = os.pread(fd, 65536, 0)
        if not raw.strip():
            return None
        try:
            d = json.loads(raw)
            return cls(pid=int(d["pid"]), host=d.get("host"), command=str(d.get("command", "?")),
                       started=str(d.get("started", "?")))
        except (ValueError, KeyError, TypeError):
            return cls(pid=None, host=None, command="unreadable lock record", started="?")

    def describe(self) -> str:
        where = "" if self.host in (None, socket.gethostname()) else f" on host {self.host}"
        return f"pid {self.pid}{where} ({self.command}, since {self.started})"

    def alive(self) -> bool:
        """True when the pid runs on this host (a zombie counts as dead)."""
        if self.pid is None or self.host not in (None, socket.gethostname()):
            return False
        return pid_alive(self.pid)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed but unreaped child is a zombie: its pid exists, the process does not run
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _command_line(width: int = 80) -> str:
    text = redact_text(" ".join([Path(sys.argv[0]).name] + sys.argv[1:]))
    return text if len(text) <= width else text[:width - 3] + "..."


def _notice(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _flock(fd: int) -> bool | None:
    """True: locked. False: another process holds it. None: this file system has no flock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as e:
        if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise


def _busy(path: Path, fd: int) -> RunDirBusy:
    holder = None
    for _ in range(20):  # the holder writes its record right after taking the lock
        holder = Holder.read(fd)
        if holder is not None:
            break
        time.sleep(0.05)
    who = holder.describe() if holder else "another process (no pid recorded yet)"
    return RunDirBusy(f"{path} is in use by {who}; wait for it to finish or use another directory")


def _open_lock_file(path: Path) -> int:
    """Open (or create) the lock file without following a link: a link planted in the run
    directory must not make us truncate its target. Refuses anything but a regular file that
    this user owns and that has no other name (a hard link shares its bytes with another file)."""
    lock = path / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise StoreError(f"{lock}: is a symbolic link; refusing to use it as the run's lock "
                             f"(remove it)") from None
        raise StoreError(f"{lock}: cannot open the run's lock: {e.strerror}") from None
    st = os.fstat(fd)
    problem = ("is not a regular file" if not stat.S_ISREG(st.st_mode) else
               f"is owned by uid {st.st_uid}, not by this user" if st.st_uid != os.geteuid() else
               f"is a hard link ({st.st_nlink} names for one file)" if st.st_nlink > 1 else "")
    if problem:
        os.close(fd)
        raise StoreError(f"{lock}: {problem}; refusing to use it as the run's lock (remove it)")
    return fd


def _acquire(path: Path, command: str, notify: Callable[[str], None]) -> int:
    fd = _open_lock_file(path)
    try:
        locked = _flock(fd)
        if locked is False:
            raise _busy(path, fd)
        previous = Holder.read(fd)
        if previous is not None and previous.pid != os.getpid():
            if locked is None and previous.alive():
                raise RunDirBusy(f"{path} is in use by {previous.describe()}; wait for it to "
                                 f"finish or use another directory")
            state = "still running but not holding the lock" if previous.alive() else "no longer running"
            notify(f"note: {path}: taking over the lock left by {previous.describe()}, {state}")
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                             "started": time.strftime("%Y-%m-%d %H:%M:%S")}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        os.fsync(fd)
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextmanager
def run_dir_lock(run_dir: str | Path, command: str | None = None, create: bool = True,
                 notify: Callable[[str], None] = _notice) -> Iterator[Path]:
    """Hold `run_dir` for writing for the duration of the block (created if `create`; else it
    must be an existing run directory).

    Raises :class:`RunDirBusy` at once when another live process holds it; `notify` gets a
    one-line notice when a lock left by a dead process is taken over."""
    path = Path(run_dir)
    if create:
        path.mkdir(parents=True, exist_ok=True)
    elif not (path / STORE_NAME).is_file():
        raise StoreError(f"{path}: not a run directory (no {STORE_NAME})")
    key = str(path.resolve())
    with _guard:
        if key in _held:
            fd, depth = _held[key]
            _held[key] = (fd, depth + 1)
        else:
            cmd = command or _command_line()
            _held[key] = (_acquire(path, cmd, notify), 1)
    try:
        yield path
    finally:
        with _guard:
            fd, depth = _held[key]
            if depth > 1:
                _held[key] = (fd, depth - 1)
            else:
                del _held[key]
                try:
                    os.ftruncate(fd, 0)  # a clean release leaves no record to report as stale
                finally:
                    os.close(fd)  # drops the flock


F = TypeVar("F", bound=Callable[..., Any])


def writes_run_dir(param: str = "run_dir", create: bool = True) -> Callable[[F], F]:
    """Decorator: the function holds the run directory passed as argument `param` while it
    runs (see :func:`run_dir_lock`)."""
    def deco(fn: F) -> F:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            with run_dir_lock(bound.arguments[param], create=create):
                return fn(*args, **kwargs)
        return wrapper  # type: ignore[return-value]
    return deco
