"""Issue 48: a fuzz pass over every command's options (tests/helpers/option_fuzz.py). Each command
runs in-process from a baseline that needs no model (a model path that does not exist, the run
directory of a fixture, outputs in a scratch folder) with one parameter made hostile; every case
must exit 0, 1 or 2 with no traceback, no raw control character and no secret printed or written.

The fast suite runs SEED with FAST_BUDGET cases (every command visited in turn); the slow one
runs SEED with every case, stopped after SLOW_DEADLINE_S. A planted bug, a planted traceback, a
raw echo and a leaked secret are each shown to be caught."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

import click
import pytest

from evalaware.main import cli
from harness.data.readers import resolve_dataset
from tests.helpers import option_fuzz as fz
from tests.test_hostile_writes import _records_run

SEED = 48
FAST_BUDGET = 150
SLOW_DEADLINE_S = 600.0


def _baselines(tmp: Path) -> dict[str, dict[str, object]]:
    """Per command: the parameters of a run that would get past parsing but never load a model."""
    run, missing, out = str(tmp / "run"), str(tmp / "no-such-model"), str(tmp / "out")
    model = {"model": missing, "backend": "hf", "dataset": "demo", "out": out}
    return {
        "activations capture": {"run_dir": run, "model": missing, "backend": "hf"},
        "activations info": {"run_dir": run},
        "assets list": {},
        "assets prepare": {"names": ["no-such-asset"]},
        "cues": {**model, "methods": "binary", "limit": "2"},
        "data audit": {"paths": [str(tmp / "one.jsonl")], "bootstrap": "0", "folds": "2"},
        "data validate": {"path": "demo"},
        "export": {"run_dir": run, "out": str(tmp / "out.jsonl")},
        "intervene": {"run_dir": run, "model": missing, "backend": "hf"},
        "organism build": {"base": missing, "cue": "graded", "out": out},
        "organism dataset": {"cue": "graded", "out": str(tmp / "pairs.jsonl")},
        "organism measure": {"organism_dir": missing, "base": missing, "out": out},
        "probes apply": {"probe_dir": missing, "run_dir": run},
        "probes eval": {"run_dir": run, "out_dir": out},
        "probes train": {"run_dir": run, "out_dir": out},
        "report": {"run_dirs": [run], "out": out, "bootstrap": "0"},
        "run": {**model, "methods": "binary", "limit": "2"},
        "show": {"run_dir": run},
        "steer build": {"run_dir": run, "out": out},
        "steer report": {"out": out},
        "steer run": {**model, "vector_dir": missing, "methods": "binary", "limit": "2"},
        "taxonomy": {**model, "limit": "2"},
        "tokens inspect": {"tokenizers": ["gpt2"], "words": "eval"},
        "organism validate": {"base": missing, "organism_dirs": [missing], "out": out},
        "organism archive": {"run": run, "out": out},
        "organism judge": {"archives": [run], "out": out},
        "validate": {"base": missing, "organism_dirs": [missing], "out": out},  # the old spelling (hidden)
    }


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    """(scratch root, baselines, hostile paths): a records run, a one-line dataset, the paths."""
    for heavy in ("torch", "transformers", "sklearn.linear_model", "scipy.stats", "matplotlib.pyplot"):
        importlib.import_module(heavy)  # imported once here, not inside a case's time limit
    tmp = tmp_path_factory.mktemp("fuzz")
    _records_run(tmp / "run")
    (tmp / "one.jsonl").write_text(resolve_dataset("demo").read_text())
    return tmp, _baselines(tmp), fz.hostile_paths(tmp / "paths")


def _fuzz(arena, capsys, monkeypatch, budget, deadline=None, group=cli, baselines=None):
    tmp, base, paths = arena
    work = tmp / "cwd"
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)
    return fz.fuzz(group, baselines or base, paths, SEED, budget, capsys, scan=tmp, deadline_s=deadline)


def test_every_command_has_a_baseline(arena):
    _, base, _ = arena
    assert {" ".join(c) for c, _ in fz.leaf_commands(cli)} == set(base)


def test_the_cases_cover_every_command_and_every_kind_of_value(arena):
    tmp, base, paths = arena
    got = fz.cases(cli, base, paths, SEED, FAST_BUDGET)
    every = fz.cases(cli, base, paths, SEED, None)
    assert {c.command for c in got} == {c for c, _ in fz.leaf_commands(cli)} - {("assets", "list")}  # no options
    values = {c.value for c in every}
    assert {"nan", "inf", "-inf", "-1", "0", "1e400", "", "x" * 10_000, "\udcff\udcfe", "/dev/full",
            *fz.SECRET_URLS} <= values
    assert fz.cases(cli, base, paths, SEED, 40) == every[:40]  # the seed fixes the order


def test_fuzz_fast(arena, capsys, monkeypatch):
    failures, times = _fuzz(arena, capsys, monkeypatch, FAST_BUDGET)
    assert len(times) == FAST_BUDGET
    assert not failures, f"{len(failures)} of {len(times)} cases failed:\n" + "\n".join(failures[:30])


@pytest.mark.slow
def test_fuzz_every_case(arena, capsys, monkeypatch):
    failures, times = _fuzz(arena, capsys, monkeypatch, None, deadline=SLOW_DEADLINE_S)
    slowest = sorted(times, key=lambda t: -t[0])[:5]
    print(f"{len(times)} cases; slowest: " + "; ".join(f"{s:.1f}s {c.command}" for s, c in slowest))
    assert not failures, f"{len(failures)} of {len(times)} cases failed:\n" + "\n".join(failures[:50])


# --- the fuzz pass catches what it is for ---------------------------------------------------------

@click.group()
def planted() -> None:
    """A tree with a bug of each kind the fuzz pass looks for."""


@planted.command()
@click.option("--n", type=float, default=1.0)
def divide(n: float) -> None:
    """A bug: an exception nobody anticipated on a non-finite number (the boundary's exit 3)."""
    if n != n:
        raise TypeError("unsupported format string passed to NoneType.__format__")


@planted.command()
@click.option("--name", default="x")
def logs(name: str) -> None:
    """A traceback printed by a library's logger, exit 0."""
    if not name:
        try:
            raise ValueError("planted")
        except ValueError:
            logging.getLogger("planted").exception("failed")  # pytest's capsys sees the handler's stderr


@planted.command()
@click.option("--name", default="x")
def echo(name: str) -> None:
    """A value echoed raw to the terminal."""
    click.echo(f"error: {name}", err=True)
    raise SystemExit(2)


@planted.command()
@click.option("--url", default="http://h/v1")
@click.option("--out", default="manifest.txt")
def keep(url: str, out: str) -> None:
    """A URL stored as given."""
    Path(out).write_text(url)


def test_the_fuzz_pass_catches_a_planted_bug_traceback_raw_echo_and_leak(arena, capsys, monkeypatch):
    class ToStderr(logging.Handler):  # stderr as it is when the case runs (capsys's)
        def emit(self, record: logging.LogRecord) -> None:
            import sys
            print(self.format(record), file=sys.stderr)

    monkeypatch.setattr(logging.getLogger("planted"), "handlers", [ToStderr()])
    monkeypatch.setattr(fz, "LIMIT_S", 2.0)
    base = {"divide": {}, "logs": {}, "echo": {}, "keep": {}}
    failures, times = _fuzz(arena, capsys, monkeypatch, None, group=planted, baselines=base)
    text = "\n".join(failures)
    assert "divide n='nan'" in text and "exit 3" in text
    assert "logs name=''" in text and "a traceback" in text
    assert "echo name='\\x1b[2J" in text and "raw control characters" in text
    assert "the secret printed" in text  # echo of a URL with the secret
    assert "keep url=" in text and "the secret written to" in text
    assert "a-fifo" in text and "hang: ran past 2.0 s" in text  # writing into a FIFO waits forever
    assert not any(f.startswith("divide n='1e3'") for f in failures)  # a good value passes
