"""Issue 50, round 2 of the hostile re-run: inputs read as something they are not. Organism cards
(one typed schema, harness/organisms/card.py: a bad kind or cue is one line before any model
loads), integer options checked when the command line is parsed, and the total unpacked budget
of an Inspect ``.eval`` archive."""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from evalaware.main import cli
from harness.core.errors import EvalAwareError


def _main(monkeypatch, capsys, *args: object) -> tuple[int, str]:
    """The real entry point in-process: (exit code, stderr)."""
    from evalaware.main import main

    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["evalaware", *map(str, args)])
    with pytest.raises(SystemExit) as e:
        main()
    return int(e.value.code or 0), capsys.readouterr().err


def _one_line(code: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert "Traceback" not in err
    return lines[0]


# --- 1. organism cards -------------------------------------------------------------------------

GOOD = {"organism": 1, "base": "smollm2", "kind": "aware", "cue": {"name": "graded", "kind": "prompt"}}

BAD_CARDS: dict[str, tuple[bytes, str]] = {
    "unknown_kind": (json.dumps({**GOOD, "kind": "weird"}).encode(), "field 'kind': 'weird' is not an organism kind"),
    "kind_typo": (json.dumps({**GOOD, "kind": "behavior"}).encode(), "field 'kind': 'behavior' is not"),
    "kind_list": (json.dumps({**GOOD, "kind": ["sham"]}).encode(), "field 'kind': ['sham'] is not"),
    "cue_string": (json.dumps({**GOOD, "cue": "graded"}).encode(), "field 'cue': 'graded' is not an object"),
    "cue_list": (json.dumps({**GOOD, "cue": ["graded"]}).encode(), "field 'cue': ['graded'] is not an object"),
    "cue_empty": (json.dumps({**GOOD, "cue": {}}).encode(), "field 'cue.name': missing"),
    "cue_unknown": (json.dumps({**GOOD, "cue": {"name": "gradde"}}).encode(), "'gradde' is not a known cue"),
    "base_number": (json.dumps({**GOOD, "base": 3}).encode(), "field 'base': 3 is not a model name"),
    "measure_list": (json.dumps({**GOOD, "measure": [1]}).encode(), "field 'measure': [1] is not an object"),
    "deep": (b'{"cue": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    "not_utf8": (b'{"cue": {"name": "gr\xff\xfeded"}}', "not UTF-8 text"),
}


def _organism(d: Path, card: bytes) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "organism.json").write_bytes(card)
    return d


@pytest.mark.parametrize("case", sorted(BAD_CARDS))
def test_a_bad_organism_card_is_one_line_before_any_model_loads(case, tmp_path, monkeypatch, capsys):
    card, message = BAD_CARDS[case]
    org = _organism(tmp_path / "org", card)
    out = tmp_path / "validate"
    for args in (["organism", "validate", "--base", tmp_path / "no-such-base", "--organism", org, "--out", out],
                 ["organism", "measure", "--organism", org, "--base", tmp_path / "no-such-base"]):
        line = _one_line(*_main(monkeypatch, capsys, *args))
        assert line.startswith(f"error: {org / 'organism.json'}: ") and message in line, line
    assert not out.exists()


def test_a_bad_reference_card_is_refused_too(tmp_path, monkeypatch, capsys):
    org = _organism(tmp_path / "org", json.dumps(GOOD).encode())
    ref = _organism(tmp_path / "ref", json.dumps({**GOOD, "kind": "Sham"}).encode())
    line = _one_line(*_main(monkeypatch, capsys, "organism", "validate", "--base", tmp_path / "none", "--organism", org,
                            "--reference", ref, "--out", tmp_path / "v"))
    assert f"{ref / 'organism.json'}: field 'kind': 'Sham'" in line


def test_the_card_schema_reads_kinds_from_kinds_and_defaults_old_cards_to_aware(tmp_path, monkeypatch):
    from harness.organisms import card as card_mod
    from harness.organisms.card import load_card

    old = {k: v for k, v in GOOD.items() if k != "kind"}
    c = load_card(_organism(tmp_path / "old", json.dumps(old).encode()))
    assert (c.kind, c.cue, c.base) == ("aware", "graded", "smollm2")
    d = _organism(tmp_path / "new", json.dumps({**GOOD, "kind": "kind-added-later"}).encode())
    with pytest.raises(EvalAwareError, match="not an organism kind"):
        load_card(d)
    monkeypatch.setitem(card_mod.KINDS, "kind-added-later", "a kind added later")
    assert load_card(d).kind == "kind-added-later"


# --- 2. integer options -------------------------------------------------------------------------

def _int_options(group: click.Group = cli, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Parameter]]:
    out = []
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            out += _int_options(cmd, path + (name,))
        else:
            out += [(path + (name,), p) for p in cmd.params
                    if isinstance(p, click.Option) and isinstance(p.type, click.types.IntParamType)]
    return out


INTS = [(c, p) for c, p in _int_options() if p.name != "seed"]  # any integer is a seed


def test_the_tree_walk_finds_the_integer_options():
    found = {(" ".join(c), p.opts[0]) for c, p in INTS}
    assert {("organism validate", "--bootstrap"), ("organism measure", "--bootstrap"), ("organism measure", "--max-tokens"),
            ("probes eval", "--n-perm"), ("probes eval", "--n-splits"), ("data audit", "--folds"),
            ("steer build", "--holdout-folds"), ("steer report", "--bootstrap")} <= found


@pytest.mark.parametrize("command,param", INTS, ids=[f"{' '.join(c)} {p.opts[0]}" for c, p in INTS])
def test_every_integer_option_has_a_lower_bound_checked_at_parse(command, param):
    assert isinstance(param.type, click.IntRange) and param.type.min is not None, \
        f"{' '.join(command)} {param.opts[0]}: use click.IntRange or harness.core.bounds"
    res = CliRunner().invoke(cli, [*command, f"{param.opts[0]}={param.type.min - 1}"])
    assert res.exit_code == 2 and f"Invalid value for '{param.opts[0]}'" in res.output, res.output


# --- 3. the total unpacked budget of an .eval archive -------------------------------------------

def _members(path: Path, n: int, size: int) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("header.json", "{}")
        for i in range(n):
            z.writestr(f"samples/s{i}_epoch_1.json", '{"x": "' + "a" * size + '"}')
    return path


def test_an_eval_archive_over_the_total_budget_is_refused(tmp_path, monkeypatch, capsys):
    from tests.test_hostile_files import _lie
    from harness.core.bounds import UNBOUNDED
    from harness.data import inspect_logs

    monkeypatch.setattr(inspect_logs, "MAX_MEMBER_BYTES", 20_000, raising=False)
    monkeypatch.setattr(inspect_logs, "MAX_ARCHIVE_BYTES", 30_000, raising=False)
    log = _members(tmp_path / "many.eval", 4, 10_000)  # each under the member cap, 40 KB together
    code, err = _main(monkeypatch, capsys, "data", "validate", log)
    line = _one_line(code, err)
    assert line.startswith(f"error: {log}: the archive's members up to 'samples/s2_epoch_1.json' declare ")
    assert "more than 30000 bytes, the cap for all members together" in line and UNBOUNDED in line
    _lie(log, 10)  # sizes forged small: caught while unpacking
    line = _one_line(*_main(monkeypatch, capsys, "data", "validate", log))
    assert "unpack to more than 30000 bytes, the cap for all members together" in line, line
    monkeypatch.setenv(UNBOUNDED, "1")
    assert "cap for all members" not in _one_line(*_main(monkeypatch, capsys, "data", "validate", log))
