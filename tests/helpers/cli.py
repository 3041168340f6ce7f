"""The `evalaware` entry point run in-process, as the hostile tests drive it."""

from __future__ import annotations

import sys
from typing import Any


def run_main(args: list[Any], monkeypatch: Any, capsys: Any) -> tuple[int, str, str]:
    """Run `evalaware ARGS` in-process: (exit code, stdout, stderr)."""
    from harness.cli.main import main

    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["evalaware", *map(str, args)])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line(code: int, err: str) -> str:
    """The one `error: ...` line of a refused command (exit 2, no traceback)."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert "Traceback" not in err
    return lines[0]
