"""Issue 46 item 6: the command tree. `--help` lists the commands in sections (run and read;
white-box; controls; data) with whole descriptions, `run --help` lists its options in sections, and
each meaning has one `validate` (the organisms' moved under `organism`, the old spelling kept with a
deprecation line)."""

from __future__ import annotations

import re

import click
from click.testing import CliRunner

from evalaware.help import COMMAND_SECTIONS, SectionedCommand, SectionedGroup, in_section
from evalaware.main import cli


def _sections(text: str) -> dict[str, list[str]]:
    """The help's sections: title -> the names of its rows (options or commands)."""
    out: dict[str, list[str]] = {}
    title = None
    for line in text.splitlines():
        if re.match(r"^\S.*:$", line):
            title = line[:-1]
            out[title] = []
        elif title and (m := re.match(r"^  (-\S+|\w[\w-]*)", line)):
            out[title].append(m.group(1).rstrip(","))
    return out


def test_the_commands_are_listed_in_sections_with_whole_descriptions():
    text = CliRunner().invoke(cli, ["--help"], terminal_width=100).output
    got = _sections(text)
    visible = sorted(n for n, c in cli.commands.items() if not c.hidden)
    assert list(got) == ["Options", *(t for t, _ in COMMAND_SECTIONS)]
    assert sorted(n for t, _ in COMMAND_SECTIONS for n in got[t]) == visible  # each exactly once
    for group in [[], *([n] for n, c in cli.commands.items() if isinstance(c, click.Group))]:
        body = CliRunner().invoke(cli, [*group, "--help"], terminal_width=100).output.split("\n", 1)[1]
        assert "..." not in body, group  # no description cut (the usage line's "ARGS]..." aside)
    assert "evalaware report runs/demo" in text  # the quick start ends with the report


def test_run_options_are_grouped_and_every_one_is_filed():
    text = CliRunner().invoke(cli, ["run", "--help"], terminal_width=100).output
    got = _sections(text)
    assert list(got) == ["Model and engine", "One backend's own engine settings", "Judge", "Dataset",
                             "Methods", "The run", "Options"]
    assert len(got["Options"]) == 1 and got["Options"][0] in ("-h", "--help")  # only the help is unfiled
    assert {"--model", "--backend", "-M"} <= set(got["Model and engine"])
    assert {"--max-model-len", "--base-url", "--hf-batch-size"} <= set(got["One backend's own engine settings"])
    assert {"--dataset", "--limit", "--label"} <= set(got["Dataset"])
    assert {"--methods", "--answer-tokens", "--batch-size"} <= set(got["Methods"])
    assert {"--out", "--schedule", "--window", "--no-progress", "-v"} <= set(got["The run"])


def test_in_section_files_what_it_adds_and_a_plain_command_keeps_one_list():
    @click.command(cls=SectionedCommand)
    @in_section("A", click.option("--a"), click.option("--b"))
    @click.option("--c")
    def cmd(a, b, c) -> None:
        """X."""

    text = CliRunner().invoke(cmd, ["--help"]).output
    assert _sections(text)["A"] == ["--a", "--b"] and _sections(text)["Options"] == ["--c", "--help"]
    group = SectionedGroup("g")
    group.add_command(cmd, "x")
    assert _sections(CliRunner().invoke(group, ["--help"]).output)["Commands"] == ["x"]


def test_one_validate_per_meaning_and_the_old_spelling_still_works(tmp_path):
    assert "validate" in cli.commands["organism"].commands and "validate" in cli.commands["data"].commands
    assert cli.commands["validate"].hidden  # the old top-level spelling of organism validate
    res = CliRunner().invoke(cli, ["validate", "--base", "smollm2", "--organism", str(tmp_path), "--out",
                                   str(tmp_path / "v"), "--backend", "openai"])
    assert "`evalaware validate` is deprecated; use `evalaware organism validate`" in res.output
    assert "cannot load a model directory" in str(res.exception) + res.output  # then it runs as before
