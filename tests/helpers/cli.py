"""The `evalaware` entry point run in-process, as the hostile tests drive it."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from typing import Any


def run_main(args: list[Any], monkeypatch: Any, capsys: Any) -> tuple[int, str, str]:
    """Run `evalaware ARGS` in-process: (exit code, stdout, stderr)."""
    from evalaware.main import main

    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["evalaware", *map(str, args)])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def in_process(*args: Any) -> subprocess.CompletedProcess[str]:
    """`evalaware ARGS` run in this process, reported as ``subprocess.run(capture_output=True,
    text=True)`` reports a fresh one (exit code, stdout, stderr), the quiet mode it sets undone.
    For tests of what a command does; a test of what a fresh interpreter imports, prints or
    exits with keeps a subprocess. Saves each call a fresh interpreter's torch and transformers
    imports (seconds). Needs no fixture, so module-scoped fixtures can use it too."""
    from evalaware.main import main
    from harness.core import console

    argv = ["evalaware", *map(str, args)]
    out, err = io.StringIO(), io.StringIO()
    saved, sys.argv = sys.argv, argv
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as e:
                code = int(e.code or 0)
    finally:
        sys.argv = saved
        console.reset()
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def one_line(code: int, err: str) -> str:
    """The one `error: ...` line of a refused command (exit 2, no traceback)."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert "Traceback" not in err
    return lines[0]
