"""The one boundary between a command and the terminal: whatever a command raises becomes one line
on stderr, ``error: <what, naming the input> (evalaware <command>)``, and an exit code.

=====  =====================================================================================
code   meaning
=====  =====================================================================================
0      done
1      the environment failed: disk full, out of memory, a missing package, a read-only or
       failing disk (:class:`~harness.core.errors.EnvironmentFailure` and what the system raises)
2      bad input: an option, a file, a dataset, an ``-M`` engine argument the engine refused
       (:class:`~harness.core.errors.EvalAwareError`, click's usage errors, a path that is wrong)
3      a bug: an exception nobody anticipated (the line says to re-run with ``-v`` and report it)
130    interrupted (re-run the same command to resume)
=====  =====================================================================================

Every echoed value is shown through :func:`harness.core.console.visible` (control characters
escaped: a value cannot drive the terminal or forge a line) and
:func:`harness.core.redact.redact_text` (no URL secret), and cut to :data:`MAX_LINE` characters.
``-v`` (on the command or before it: ``evalaware -v CMD``) prints the traceback, escaped and
redacted the same way, before the line.
"""

from __future__ import annotations

import errno
import io
import sys
import traceback
from typing import Sequence

import click

from harness.core import console
from harness.core.console import visible
from harness.core.errors import EvalAwareError, first_line, is_out_of_memory
from harness.core.redact import redact_text
from harness.runlog.connection import store_failure

MAX_LINE = 2000  # characters of one error line (a 10,000-character value is cut, and said so)
INTERRUPTED = 130
BUG = 3
#: errno values that are the machine's fault, not the input's: exit 1
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.ENOMEM, errno.EIO,
                                errno.EROFS, errno.EMFILE, errno.ENFILE})


def shown(text: str, limit: int = MAX_LINE) -> str:
    """`text` as it may reach a terminal: secrets redacted, control characters escaped, cut to
    `limit` characters (saying how many more there were)."""
    s = visible(redact_text(text))
    return s if len(s) <= limit else f"{s[:limit]}... ({len(s) - limit} more characters)"


def command_path(group: click.Group, args: Sequence[str]) -> str:
    """``evalaware CMD [SUB]``: the command `args` name (the group's own options skipped)."""
    path, cmd = ["evalaware"], group
    for a in args:
        if not isinstance(cmd, click.Group):
            break
        if a.startswith("-"):
            continue
        sub = cmd.commands.get(a)
        if sub is None:
            break
        path.append(a)
        cmd = sub
    return " ".join(path)




def classify(e: BaseException) -> tuple[int, str]:
    """(exit code, message) for an exception a command raised (not click's own, not an interrupt)."""
    if isinstance(e, EvalAwareError):
        return getattr(e, "exit_code", 2), str(e)
    if is_out_of_memory(e):
        return 1, (f"out of memory ({type(e).__name__}: {first_line(e)}); use a smaller model, batch "
                   f"(--batch-size) or context, or free memory")
    if isinstance(e, ImportError):
        name = e.name or "a package"
        return 1, (f"a package is missing: {first_line(e)}; install {name} into this environment "
                   f"(pip install {name})" if e.name else f"a package is missing: {first_line(e)}")
    if isinstance(e, OSError):
        where = "".join(f"{f}: " for f in (e.filename, e.filename2) if f)
        what = e.strerror or first_line(e)
        if e.errno in ENVIRONMENT_ERRNOS:
            return 1, f"{where}{what}; free space or memory, or write elsewhere, then re-run"
        return 2, f"{where}{what}"
    if (store := store_failure(e)) is not None:
        return store
    if isinstance(e, ValueError) and "null byte" in str(e):  # os.stat & co. on a path holding \x00
        return 2, "a path holds a NUL character (\\x00), which no file name can: give the path without it"
    if isinstance(e, UnicodeError):
        return 2, f"text that is not valid UTF-8: {first_line(e)}"
    return BUG, (f"internal error, {type(e).__name__}: {first_line(e)}; this is a bug: re-run with "
                 f"`evalaware -v ...` for the traceback and report it")


def _usage_error(e: click.ClickException) -> None:
    """Click's own message (usage, the bad option), each line made safe."""
    buf = io.StringIO()
    e.show(file=buf)
    for line in buf.getvalue().splitlines():
        click.echo(shown(line), err=True)


def _traceback() -> None:
    if console.is_verbose():
        for line in traceback.format_exc().splitlines():
            click.echo(shown(line), err=True)


def run_cli(group: click.Group, args: Sequence[str] | None = None) -> None:
    """Run `group` on `args` (default: the command line) and exit with the code of the table above."""
    args = list(sys.argv[1:] if args is None else args)
    try:
        code = group.main(args, standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted; re-run the same command to resume", err=True)
        sys.exit(INTERRUPTED)
    except click.ClickException as e:
        _usage_error(e)
        sys.exit(e.exit_code)
    except Exception as e:  # noqa: BLE001 - the boundary: every exception becomes one line
        _traceback()
        status, message = classify(e)
        click.echo(f"error: {shown(message)} ({command_path(group, args)})", err=True)
        sys.exit(status)
    if isinstance(code, int) and code:  # click's Exit (e.g. a context exited with a status)
        sys.exit(code)
