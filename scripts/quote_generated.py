"""Re-quote a command's printed verdict lines into the docs (issue 44, item 6: verdicts generated,
not written).

A block in README.md or docs/*.md written as::

    <!-- quote: docs/generated/judge-archives-logprob.md match=REGEX -->
    ```
    ...
    ```
    <!-- /quote -->

holds the verdict and spillover lines of that generated file (its lines that start with ``- ``
before the first blank line: `validate`/`judge` print those first, then the secondary tables),
those matching REGEX (``re.search``; optional, no spaces) only, verbatim and in their order. This
script rewrites every such block from its file; ``--check`` rewrites nothing and exits 1 naming each
block that differs, which tests/test_docs_verdicts.py runs, so a quoted block cannot go stale
when its command is re-run (`make judge-archives` re-makes its files, then runs this script).

    python scripts/quote_generated.py [--check] [DOC ...]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPEN = re.compile(r"^<!-- quote: (?P<path>\S+)(?: match=(?P<match>\S+))? -->$")
CLOSE = "<!-- /quote -->"


class QuoteError(ValueError):
    """A malformed block or a generated file that is missing: names the doc and line."""


def printed_lines(generated: Path, match: str | None = None) -> list[str]:
    """The lines of `generated` that start with ``- `` before its first blank line (its first
    line, the command's header, skipped), those matching `match` only."""
    out: list[str] = []
    text = generated.read_text().splitlines()
    if not text or not text[0].startswith("<!-- command:"):
        raise QuoteError(f"{generated.name}: its first line does not name the command that wrote it")
    for line in text[1:]:
        if not line.strip():
            break
        if line.startswith("- ") and (match is None or re.search(match, line)):
            out.append(line)
    return out


def requote(doc: Path, root: Path = ROOT) -> tuple[str, list[str]]:
    """`doc`'s text with every quote block re-made from its file, and ``doc:line`` of each block
    that changed."""
    lines = doc.read_text().splitlines(keepends=True)
    name = doc.relative_to(root) if doc.is_relative_to(root) else doc
    out: list[str] = []
    stale: list[str] = []
    k = 0
    while k < len(lines):
        m = OPEN.match(lines[k].rstrip("\n"))
        if not m and lines[k].lstrip().startswith("<!-- quote:"):
            raise QuoteError(f"{name}:{k + 1}: not a quote opening (`<!-- quote: PATH [match=REGEX] -->` "
                             "alone on its line, the regex with no spaces)")
        out.append(lines[k])
        k += 1
        if not m:
            continue
        start = k
        while k < len(lines) and lines[k].rstrip("\n") != CLOSE:
            if lines[k].lstrip().startswith("<!-- quote:"):
                raise QuoteError(f"{name}:{start}: a quote block with no {CLOSE!r} before the next one")
            k += 1
        if k == len(lines):
            raise QuoteError(f"{name}:{start}: a quote block with no {CLOSE!r} after it")
        try:
            re.compile(m["match"] or "")
        except re.error as e:
            raise QuoteError(f"{name}:{start}: match={m['match']}: {e}") from None
        src = root / m["path"]
        if not src.is_file():
            raise QuoteError(f"{name}:{start}: the quoted file {m['path']} does not exist")
        try:
            quoted = printed_lines(src, m["match"])
        except QuoteError as e:
            raise QuoteError(f"{name}:{start}: {e}") from None
        if not quoted:
            raise QuoteError(f"{name}:{start}: no printed line of {m['path']}"
                             + (f" matches {m['match']!r}" if m["match"] else ""))
        new = ["```\n", *(q + "\n" for q in quoted), "```\n"]
        if lines[start:k] != new:
            stale.append(f"{name}:{start}")
        out.extend(new)
    return "".join(out), stale


def docs(root: Path = ROOT) -> list[Path]:
    """The docs a quote block may sit in: README.md and docs/*.md."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a block differs")
    ap.add_argument("--root", type=Path, default=ROOT, help="the paths in quote blocks are relative to it")
    ap.add_argument("doc", nargs="*", type=Path, help="docs to re-quote (default: README.md, docs/*.md)")
    args = ap.parse_args(argv)
    stale_all: list[str] = []
    for doc in args.doc or docs(args.root):
        try:
            text, stale = requote(doc, args.root)
        except QuoteError as e:
            print(f"quote_generated: {e}", file=sys.stderr)
            return 2
        stale_all += stale
        if stale and not args.check:
            doc.write_text(text)
            print(f"re-quoted {', '.join(stale)}")
    if args.check and stale_all:
        print("stale quote blocks (run python scripts/quote_generated.py): " + ", ".join(stale_all),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
