"""Help in sections: the command tree (``evalaware --help``) and a command's options (``run --help``).

:class:`SectionedGroup` lists its commands under :data:`COMMAND_SECTIONS` with their whole first
sentence (click cuts it to the terminal's width); so do the subgroups; :class:`SectionedCommand` lists a command's
options under the section each was filed in by :func:`in_section` (``Options`` for the rest).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

COMMAND_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Run and read", ("run", "show", "export", "report")),
    ("White-box", ("activations", "probes", "steer")),
    ("Controls", ("cues", "taxonomy", "intervene", "organism")),
    ("Data", ("data", "assets", "tokens")),
)
"""The top-level commands by what they are for, in the order a newcomer meets them."""

OTHER = "Options"


def in_section(title: str, *decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Apply click option `decorators` (or any that add options) and file the options they add
    under `title` in the command's help (:class:`SectionedCommand`)."""
    def deco(f: F) -> F:
        before = len(getattr(f, "__click_params__", []))
        for d in reversed(decorators):
            f = d(f)
        file_under(title, getattr(f, "__click_params__", [])[before:])
        return f
    return deco


def file_under(title: str, params: list[click.Parameter]) -> None:
    """File `params` under `title` (one not filed yet: a later, outer decorator does not refile)."""
    for p in params:
        if not hasattr(p, "help_section"):
            p.help_section = title  # type: ignore[attr-defined]


class SectionedCommand(click.Command):
    """A command whose ``--help`` lists its options by section, in the order they first appear."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        for p in self.get_params(ctx):
            rec = p.get_help_record(ctx)
            if rec is not None and not isinstance(p, click.Argument):
                sections.setdefault(getattr(p, "help_section", OTHER), []).append(rec)
        for title in sorted(sections, key=lambda t: t == OTHER):  # the unfiled (--help) last
            with formatter.section(title):
                formatter.write_dl(sections[title])


class SectionedGroup(click.Group):
    """A group whose ``--help`` lists its commands under `sections` (title, names; the rest under
    "Commands"), each with its first sentence uncut; its commands are :class:`SectionedCommand`
    and its subgroups SectionedGroups (without sections) by default."""

    command_class = SectionedCommand
    group_class = type

    def __init__(self, *args: Any, sections: tuple[tuple[str, tuple[str, ...]], ...] = (),
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sections = sections

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        shown = {n: c for n in self.list_commands(ctx) if (c := self.get_command(ctx, n)) and not c.hidden}
        filed = {n for _, names in self.sections for n in names}
        for title, names in (*self.sections, ("Commands", tuple(n for n in shown if n not in filed))):
            rows = [(n, shown[n].get_short_help_str(limit=10_000)) for n in names if n in shown]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


def deprecated_alias(cmd: click.Command, old: str, new: str) -> click.Command:
    """`cmd` under its old name `old`: hidden from the help, and one line on stderr before its
    options are read (so it shows even when they are refused)."""
    alias = copy.copy(cmd)
    alias.name, alias.hidden = old, True
    parse = cmd.parse_args

    def parse_args(ctx: click.Context, args: list[str]) -> list[str]:
        click.echo(f"note: `evalaware {old}` is deprecated; use `evalaware {new}`", err=True)
        return parse(ctx, args)

    alias.parse_args = parse_args  # type: ignore[method-assign]
    return alias
