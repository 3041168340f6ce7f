"""The report's document model (blocks rendered to Markdown and to HTML) and cell formats."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence


@dataclass
class Doc:
    """Blocks rendered both to Markdown and to HTML."""

    blocks: list[tuple[str, Any]] = field(default_factory=list)

    def h(self, level: int, text: str) -> None:
        self.blocks.append(("h", (level, text)))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def ul(self, items: Sequence[str]) -> None:
        """A bulleted list, each item one line of inline text."""
        self.blocks.append(("ul", list(items)))

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.blocks.append(("table", ([_literal_cell(h) for h in header],
                                      [[_literal_cell(c) for c in r] for r in rows])))

    def fig(self, path: Path, caption: str, alt: str = "") -> None:
        self.blocks.append(("fig", (path.name, caption, alt or path.stem)))

    def markdown(self) -> str:
        """Markdown in which no text (dataset fields, model names, quotes) can add markup: HTML
        is entity-escaped, a table cell or heading stays on one line, a paragraph's later lines
        cannot start a heading or a block quote, and text marked :func:`lit` / :func:`code` (every
        table cell unless it carries marks of its own) renders as itself."""
        out = []
        for kind, v in self.blocks:
            if kind == "h":
                out.append("#" * v[0] + " " + _render_md(v[1], md_line, "inline"))
            elif kind == "p":
                out.append(_render_md(v, md_paragraph, "block"))
            elif kind == "ul":
                out.append("\n".join("- " + _render_md(t, md_line, "inline") for t in v))
            elif kind == "table":
                head, rows = v
                esc = lambda c: _render_md(c, lambda t: md_line(t).replace("|", "\\|"), "table")  # noqa: E731
                out.append("| " + " | ".join(map(esc, head)) + " |\n|" + "---|" * len(head) + "\n" +
                           "\n".join("| " + " | ".join(map(esc, r)) + " |" for r in rows))
            else:
                out.append(f"![{_render_md(v[2], md_line, 'inline')}]({v[0]})\n\n"
                           f"*{_render_md(v[1], md_line, 'inline')}*")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        def trusted(t: str) -> str:
            parts = html.escape(t).split("`")
            return "".join(f"<code>{p}</code>" if i % 2 else _BOLD.sub(r"<strong>\1</strong>", p)
                           for i, p in enumerate(parts))

        def inline(t: str) -> str:
            return _render(t, trusted, lambda part, is_code, _: (
                f"<code>{html.escape(part)}</code>" if is_code else html.escape(part)), "inline")

        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
               "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;"
               "padding:0 1em;color:#222}table{border-collapse:collapse;margin:1em 0;font-size:90%;"
               "display:block;overflow-x:auto;max-width:100%}"
               "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}th{background:#f3f3f3}"
               "figure{margin:1.5em 0}img{max-width:100%}figcaption{font-size:85%;color:#555}"
               "code{background:#f5f5f5;padding:0 3px}</style></head><body>"]
        sections = [(i, v[1]) for i, (kind, v) in enumerate(self.blocks) if kind == "h" and v[0] == 2]
        toc = ("<nav style='font-size:85%;color:#555'>Contents: " + " · ".join(
            f"<a href='#s{i}'>{inline(t)}</a>" for i, t in sections) + "</nav>"
               if len(sections) > 2 else "")  # one line, so the findings stay on the first screen
        for i, (kind, v) in enumerate(self.blocks):
            if kind == "h":
                anchor = f" id='s{i}'" if v[0] == 2 else ""
                out.append(f"<h{v[0]}{anchor}>{inline(v[1])}</h{v[0]}>")
                if v[0] == 1 and toc:
                    out.append(toc)
                    toc = ""
            elif kind == "p":
                out.append(f"<p>{inline(v)}</p>")
            elif kind == "ul":
                out.append("<ul>" + "".join(f"<li>{inline(t)}</li>" for t in v) + "</ul>")
            elif kind == "table":
                head, rows = v
                out.append("<table><tr>" + "".join(f"<th>{inline(h)}</th>" for h in head) + "</tr>" +
                           "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in rows) +
                           "</table>")
            else:
                out.append(f"<figure><img src='{html.escape(v[0])}' alt='{html.escape(plain(v[2]))}'>"
                           f"<figcaption>{inline(v[1])}</figcaption></figure>")
        out.append("</body></html>")
        return "\n".join(out)


# --- text from outside (a dataset, a model, the command line) ------------------------------------
# A section marks such text with lit() (literal text) or code() (a literal code span); rendering
# keeps the section's own markup (`code`, **bold**) and shows the marked text as itself in both
# formats: no link, emphasis, code span or heading can come from a category name or a model's quote.
_LIT, _CODE, _END, _HOLD, _HOLD_END = "\uE000", "\uE001", "\uE002", "\uE003", "\uE004"
_MARKS = re.compile("[\uE000-\uE004]")
_MARKED = re.compile("([\uE000\uE001])([^\uE000-\uE004]*)\uE002")
_HELD = re.compile("\uE003(\\d+)\uE004")


def lit(text: Any) -> str:
    """`text` marked to render as literal text (no Markdown or HTML markup of its own)."""
    return _LIT + _MARKS.sub("", str(text)) + _END


def code(text: Any) -> str:
    """`text` marked to render as a literal code span (a path, a method name)."""
    return _CODE + _MARKS.sub("", str(text)) + _END


def plain(text: str) -> str:
    """`text` with the marks removed (for an attribute or a file name)."""
    return _MARKS.sub("", text)


def _literal_cell(c: Any) -> str:
    """A table cell: literal text unless the section marked its parts itself."""
    s = cell(c)
    return s if _MARKS.search(s) else lit(s)


def _render(text: str, trusted: Callable[[str], str], literal: Callable[[str, bool, bool], str],
            mode: str) -> str:
    """`text` rendered: the marked parts by ``literal(part, is_code, at_line_start)``, the rest by
    `trusted`. `mode` "block" (a paragraph: its lines start lines), "inline" or "table"."""
    held: list[tuple[str, bool]] = []

    def hold(m: re.Match[str]) -> str:
        held.append((m.group(2), m.group(1) == _CODE))
        return f"{_HOLD}{len(held) - 1}{_HOLD_END}"

    text = _MARKED.sub(hold, text.replace(_HOLD, "").replace(_HOLD_END, ""))
    out = trusted(re.sub("[\uE000-\uE002]", "", text))

    def restore(m: re.Match[str]) -> str:
        before = out[:m.start()].rsplit("\n", 1)[-1]
        return literal(*held[int(m.group(1))], mode == "block" and not before.strip())
    return _HELD.sub(restore, out)


def _one_line(text: str) -> str:
    return "".join(" " if (ord(c) < 32 or c in "\u2028\u2029\x7f") else c for c in text)


_MD_PUNCT = re.compile(r"([\\`*|~$])")
_MD_LINK = re.compile(r"\](?=[(\[])")  # "](" or "][": what makes a bracket a link or an image
_MD_LINK_OR_END = re.compile(r"\](?=[(\[]|$)")  # and at the end, where a section's text follows
_MD_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")  # not inside a word: could open emphasis
_MD_LINE_START = re.compile(r"^(\s*)([#>+=\[-]|\d+[.)])")


def md_literal(text: str, is_code: bool = False, line_start: bool = False, table: bool = False) -> str:
    """`text` as Markdown that renders as itself, on one line: inert (:func:`md_inert`), and what
    could open emphasis, a code span, strike-through or math is backslash-escaped, as is a
    ``]`` that could close a link or image (followed by ``(`` or ``[``, or ending the text outside
    a table cell); at the start of a line a heading, quote, list, rule or link-definition marker
    is escaped. A code span (`is_code`) is fenced with more backticks than it holds. Brackets and
    the rest stay as they are, so ``0.71 [0.60, 0.80]`` reads as written."""
    t = _one_line(text)
    if is_code:
        fence = "`" * (max((len(r) for r in re.findall("`+", t)), default=0) + 1)
        pad = " " if t[:1] == "`" or t[-1:] == "`" or (t[:1] == " " and t[-1:] == " ") else ""
        return fence + pad + (t.replace("|", "\\|") if table else t) + pad + fence
    t = _MD_PUNCT.sub(r"\\\1", md_inert(t))
    t = _MD_UNDERSCORE.sub(r"\\_", (_MD_LINK if table else _MD_LINK_OR_END).sub(r"\\]", t))
    if line_start:
        t = _MD_LINE_START.sub(lambda m: m.group(1) + m.group(2)[:-1] + "\\" + m.group(2)[-1], t)
    return t


def _render_md(text: str, trusted: Callable[[str], str], mode: str) -> str:
    return _render(text, trusted, lambda part, is_code, start: md_literal(
        part, is_code, start, mode == "table"), mode)


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
    return _one_line(md_inert(text))


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


def rules_note(what: str, methods: Iterable[str | None]) -> str:
    """`what` and the rules that made those intervals as computed (each
    :class:`~harness.stats.metrics.Interval`'s ``method``, once): a caption never names a rule
    the code did not use."""
    rules = sorted({m for m in methods if m})
    return f"{what} (95%): {'; '.join(rules)}." if rules else f"{what}: none computed."


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
