"""The report's document model (blocks rendered to Markdown and to HTML) and cell formats."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence


@dataclass
class Doc:
    """Blocks rendered both to Markdown and to HTML."""

    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def h(self, level: int, text: str) -> None:
        self.blocks.append(("h", (level, text)))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.blocks.append(("table", (list(header), [[cell(c) for c in r] for r in rows])))

    def fig(self, path: Path, caption: str, alt: str = "") -> None:
        self.blocks.append(("fig", (path.name, caption, alt or path.stem)))

    def markdown(self) -> str:
        """Markdown in which no text (dataset fields, model names, quotes) can add markup: HTML
        is entity-escaped, a table cell or heading stays on one line, a paragraph's later lines
        cannot start a heading or a block quote."""
        out = []
        for kind, v in self.blocks:
            if kind == "h":
                out.append("#" * v[0] + " " + md_line(v[1]))
            elif kind == "p":
                out.append(md_paragraph(v))
            elif kind == "table":
                head, rows = v
                esc = lambda c: md_line(c).replace("|", "\\|")  # noqa: E731
                out.append("| " + " | ".join(map(esc, head)) + " |\n|" + "---|" * len(head) + "\n" +
                           "\n".join("| " + " | ".join(map(esc, r)) + " |" for r in rows))
            else:
                out.append(f"![{md_line(v[2])}]({v[0]})\n\n*{md_line(v[1])}*")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        def inline(t: str) -> str:
            parts = html.escape(t).split("`")
            return "".join(f"<code>{p}</code>" if i % 2 else _BOLD.sub(r"<strong>\1</strong>", p)
                           for i, p in enumerate(parts))

        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
               "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;"
               "padding:0 1em;color:#222}table{border-collapse:collapse;margin:1em 0;font-size:90%}"
               "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f3f3f3}"
               "figure{margin:1.5em 0}img{max-width:100%}figcaption{font-size:85%;color:#555}"
               "code{background:#f5f5f5;padding:0 3px}</style></head><body>"]
        for kind, v in self.blocks:
            if kind == "h":
                out.append(f"<h{v[0]}>{inline(v[1])}</h{v[0]}>")
            elif kind == "p":
                out.append(f"<p>{inline(v)}</p>")
            elif kind == "table":
                head, rows = v
                out.append("<table><tr>" + "".join(f"<th>{inline(h)}</th>" for h in head) + "</tr>" +
                           "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in rows) +
                           "</table>")
            else:
                out.append(f"<figure><img src='{html.escape(v[0])}' alt='{html.escape(v[2])}'>"
                           f"<figcaption>{inline(v[1])}</figcaption></figure>")
        out.append("</body></html>")
        return "\n".join(out)


_BOLD = re.compile(r"\*\*(.+?)\*\*")
_TAG = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY = re.compile(r"&(?=#?\w+;)")


def md_inert(text: str) -> str:
    """`text` with no HTML that a Markdown viewer would render: a ``<`` that could open a tag
    and an ``&`` that could start an entity are escaped; ``P < 0.05`` stays as it is."""
    return _TAG.sub("&lt;", _ENTITY.sub("&amp;", text))


def md_line(text: str) -> str:
    """`text` for one line of Markdown: inert (:func:`md_inert`), line breaks and control
    characters made spaces (a newline in a cell or heading would start a new block)."""
    return "".join(" " if (ord(c) < 32 or c in "\u2028\u2029\x7f") else c for c in md_inert(text))


def md_paragraph(text: str) -> str:
    """`text` as a Markdown paragraph: inert; a later line cannot open a heading, quote or rule
    (``#``, ``>``, ``===``/``---`` are escaped at line start)."""
    lines = md_inert(text).split("\n")
    return "\n".join([lines[0]] + [("\\" + ln) if ln.lstrip()[:1] in ("#", "=", "-", ">") and
                                    not ln.lstrip().startswith("- ") else ln for ln in lines[1:]])


def cell(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "–" if math.isnan(v) else f"{v:.3f}"
    return str(v)


def pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.0f}%"


def ci(v: float | None, interval: Sequence[float] | None) -> str:
    """A value with its interval, `0.712 [0.61, 0.80]`."""
    if v is None:
        return "–"
    return f"{v:.3f}" + (f" [{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "")


def pct_ci(v: float | None, interval: Sequence[float] | None) -> str:
    return pct(v) + (f" [{100 * interval[0]:.0f}, {100 * interval[1]:.0f}]" if v is not None and interval else "")


def label_mass_cell(lm: dict | None) -> str:
    """The label-mass distribution of a summary (``summaries.label_mass``) in one cell: median
    [10th–90th percentile], and the votes withheld below the run's floor; "–" without one."""
    if not lm:
        return "–"
    floor = lm.get("min_label_mass")
    gate = (f" (< {floor:g})" if isinstance(floor, (int, float)) else
            " (no gate: recorded before --min-label-mass)" if floor is None else f" (< {floor})")
    return (f"{lm['median']:.3g} [{lm['q10']:.3g}–{lm['q90']:.3g}]; "
            f"{lm['withheld']}/{lm['n_votes']} votes withheld{gate}")


def slug(s: str) -> str:
    """A string safe in a file name."""
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in s)
