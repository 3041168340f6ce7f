"""The README a newcomer reads first (issue 46): a quick start of at most three lines before any
section, "Two commands" holding two, and every command of the CLI named in it (`intervene` was
missing from the command table)."""

from __future__ import annotations

import re
from pathlib import Path

import click

from evalaware.main import cli

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def command_paths(group: click.Group, prefix: str = "") -> list[str]:
    """Every leaf command of `group` as it is typed ("organism build", "run"); hidden ones (an old
    spelling kept for a while) are not listed."""
    out = []
    for name, cmd in sorted(group.commands.items()):
        if cmd.hidden:
            continue
        if isinstance(cmd, click.Group):
            out += command_paths(cmd, f"{prefix}{name} ")
        else:
            out.append(prefix + name)
    return out


def _block_after(text: str) -> list[str]:
    """The lines of the first ```bash block in `text`."""
    return text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()


def test_the_quick_start_comes_first_and_is_three_lines():
    top = README.split("\n## ", 1)[0]
    assert "```bash" in top and len(_block_after(top)) <= 3
    assert _block_after(top)[0].startswith("make demo")


def test_two_commands_are_two():
    section = README.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    assert [ln.split()[:2] for ln in _block_after(section)] == [["make", "demo"], ["make", "test"]]


def test_every_command_is_named_in_the_readme():
    paths = command_paths(cli)
    assert "intervene" in paths and "organism build" in paths
    named = set(re.findall(r"evalaware ([a-z][a-z ]*[a-z])", README))
    missing = [p for p in paths if not any(n == p or n.startswith(p + " ") for n in named)
               and f"`{p.split()[-1]}`" not in README.split("## Commands", 1)[1]]
    assert not missing, f"README names no `evalaware {missing[0]}`"
