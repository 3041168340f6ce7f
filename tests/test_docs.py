"""Every measured table in the docs stands beside the command that makes it (issue 24, item 12):
a markdown table with measured numbers (decimals, times, ratios, percentages) must have a command
(`evalaware ...`, `python scripts/...`, `make ...`) in its own section before it or in the
preamble of an enclosing section."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
        *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("*/README.md"))]
COMMAND = re.compile(r"(evalaware |python scripts/|make [a-z]|pytest )")
MEASURED = re.compile(r"\b\d+\.\d{2,}\b|\b\d+(\.\d+)?\s?(s|ms|min)\b|\b\d+(\.\d+)?x\b|\b\d+(\.\d+)?%")


def _sections(text: str) -> list[tuple[int, list[str]]]:
    """(heading level, lines) per section; level 0 before the first heading."""
    out: list[tuple[int, list[str]]] = []
    cur: list[str] = []
    level = 0
    for line in text.splitlines():
        m = re.match(r"(#{1,6}) ", line)
        if m:
            out.append((level, cur))
            cur, level = [], len(m.group(1))
        cur.append(line)
    out.append((level, cur))
    return out


def _tables(lines: list[str]):
    code, j = False, 0
    while j < len(lines):
        if lines[j].startswith("```"):
            code = not code
        if not code and lines[j].startswith("|"):
            k = j
            while k < len(lines) and lines[k].startswith("|"):
                k += 1
            yield j, lines[j:k]
            j = k
            continue
        j += 1


def uncommanded_tables(text: str) -> list[str]:
    """Header rows of the measured tables in `text` with no command before them."""
    secs = _sections(text)
    bad = []
    for i, (level, lines) in enumerate(secs):
        context: list[str] = []
        want = level
        for lv, ls in reversed(secs[:i]):  # the enclosing sections' preambles
            if lv < want:
                context += ls
                want = lv
        for j, rows in _tables(lines):
            if MEASURED.search("\n".join(rows[2:])) and not COMMAND.search("\n".join(context + lines[:j])):
                bad.append(f"{lines[0][:60]!r}: {rows[0][:60]}")
    return bad


def test_the_checker_finds_a_table_without_its_command():
    doc = "# Results\n\nSome prose.\n\n## Speed\n\n| a | b |\n|---|---|\n| 1.23 | 4 s |\n"
    assert len(uncommanded_tables(doc)) == 1
    assert not uncommanded_tables(doc.replace("Some prose.", "`python scripts/bench_x.py`"))
    assert not uncommanded_tables(doc.replace("## Speed\n", "## Speed\n\n```bash\nevalaware run\n```\n"))
    assert len(uncommanded_tables(doc.replace("Some prose.", "## Other\n`make demo`"))) == 1  # a sibling's


@pytest.mark.parametrize("path", DOCS)
def test_every_measured_table_has_its_command(path):
    assert not uncommanded_tables((ROOT / path).read_text()), path
