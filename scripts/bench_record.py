"""One record per benchmark run: the commit, the machine, its load, the command and every table
the script printed, as JSON (issue 38, item 5).

A script makes a :class:`BenchRecord` when it starts, passes each table it prints through
:meth:`BenchRecord.table` (or :meth:`BenchRecord.add` where it prints its own layout), and calls
:meth:`BenchRecord.write` at the end. The file goes to ``--json PATH``; without one, to
``runs/bench/<name>.json`` (ignored by git), so a run with other arguments never overwrites the
record a docs table is checked against. A docs table names its record in its command
(``--json docs/bench/<name>.json``); ``tests/test_docs.py`` checks the table's numbers against
the record's ``figures``.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]


def commit() -> dict[str, Any]:
    """HEAD's sha and whether tracked files differ from it (None where git cannot tell)."""
    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"sha": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def machine() -> dict[str, Any]:
    """CPU count and model, the GPU where torch sees one, the platform and Python."""
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = None
    torch = sys.modules.get("torch")  # only where the benchmark loaded it: importing it costs seconds
    if torch is not None and torch.cuda.is_available():
        gpu = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {"cpus": os.cpu_count(), "cpu_model": cpu_model, "gpu": gpu, "node": platform.node(),
            "platform": platform.platform(), "python": platform.python_version()}


def markdown(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "---") -> str:
    """A markdown table of `header` and `rows` (cells as given, str() of each)."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "|".join([align] * len(header)) + "|"]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


class BenchRecord:
    """What one benchmark run measured, with where and when; see the module docstring."""

    def __init__(self, name: str, script: str, argv: Sequence[str] | None = None):
        """`script`: the benchmark's ``__file__``; `argv`: its arguments (default: ``sys.argv[1:]``)."""
        self.name = name
        self.command = ["python", f"scripts/{Path(script).name}", *(sys.argv[1:] if argv is None else argv)]
        self.started = datetime.datetime.now(datetime.timezone.utc)
        self.load_start = list(os.getloadavg())
        self.figures: dict[str, dict[str, list]] = {}

    def add(self, title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Record a table under `title`: its header and its rows, each cell as printed."""
        if title in self.figures:
            raise ValueError(f"bench record {self.name!r}: table {title!r} recorded twice")
        self.figures[title] = {"header": [str(h) for h in header],
                               "rows": [[str(c) for c in r] for r in rows]}

    def table(self, title: str, header: Sequence[str], rows: Sequence[Sequence[Any]],
              align: str = "---") -> str:
        """Record a table (as :meth:`add`) and return it as markdown, to print."""
        self.add(title, header, rows)
        return markdown(header, rows, align)

    def write(self, path: str | Path | None = None, **data: Any) -> Path:
        """Write the record (`data`: the script's raw figures, beside the tables) and return its path."""
        out = Path(path) if path else ROOT / "runs" / "bench" / f"{self.name}.json"
        record = {"name": self.name, "command": self.command, "commit": commit(), "machine": machine(),
                  "load": {"start": self.load_start, "end": list(os.getloadavg())},
                  "date": self.started.isoformat(timespec="seconds"),
                  "seconds": round((datetime.datetime.now(datetime.timezone.utc) - self.started)
                                   .total_seconds(), 1),
                  "figures": self.figures, **data}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=1, default=str) + "\n")
        print(f"bench record: {out}", file=sys.stderr)
        return out
