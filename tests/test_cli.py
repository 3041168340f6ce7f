"""Every CLI command documents itself with examples; user errors are one line with exit 2."""

from __future__ import annotations

import click
from click.testing import CliRunner

from harness.cli import cli


def _commands(group: click.Group, prefix: tuple[str, ...] = ()):
    for name, cmd in group.commands.items():
        path = prefix + (name,)
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, path)
        else:
            yield path


def test_every_command_has_help_with_examples():
    runner = CliRunner()
    top = runner.invoke(cli, ["--help"])
    assert top.exit_code == 0
    for name in ("assets", "data", "run", "show", "export"):
        assert name in top.output
    paths = list(_commands(cli))
    assert len(paths) >= 6
    for path in paths:
        r = runner.invoke(cli, list(path) + ["--help"])
        assert r.exit_code == 0, path
        assert "Example" in r.output, f"`evalaware {' '.join(path)} --help` shows no example"


def test_unknown_method_is_a_clean_error(tmp_path, tiny_model_dir):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--model", str(tiny_model_dir),
                        "--backend", "hf", "--dataset", "demo", "--limit", "1", "--methods", "nope",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: unknown method(s) nope")


def test_missing_model_is_a_clean_error(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--model", str(tmp_path / "none"),
                        "--backend", "hf", "--dataset", "demo", "--out", str(tmp_path / "r")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "neither a local directory nor in the local" in r.stderr


def test_run_constrain_end_to_end(tmp_path, tiny_model_dir):
    """`run --constrain` on a random model: every binary answer parses, `show` marks the row,
    counts the cut sample answers and a second run without the flag is refused."""
    import subprocess
    import sys

    base = [sys.executable, "-m", "harness.cli", "run", "--model", str(tiny_model_dir), "--backend", "hf",
            "--dataset", "demo", "--limit", "2", "--methods", "binary", "--temperature", "1",
            "--answer-tokens", "4", "--probe-tokens", "24", "--out", str(tmp_path / "r"), "--no-progress"]
    r = subprocess.run(base + ["--constrain"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("binary"))
    assert row.startswith("binary (constrained)")
    n, _, _, undecided, bad, cut = row[len("binary (constrained)"):].split()[:6]
    assert (n, bad, cut) == ("2", "0", "2/12")  # both 4-token sample answers were cut
    assert "binary: 2 of 12 answers so far (16.7%) stopped at the token limit" in r.stderr
    again = subprocess.run(base, capture_output=True, text=True)
    assert again.returncode == 2 and "setting for method binary" in again.stderr


def test_data_parallel_on_the_offline_engine_is_refused_with_the_serve_recipe(tmp_path, tiny_model_dir):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--model", str(tiny_model_dir),
                        "--backend", "vllm", "--data-parallel-size", "2", "--dataset", "demo",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]
    assert "--data-parallel-size 2" in last and "vllm serve" in last and "--base-url" in last
    assert not (tmp_path / "r").exists()


def test_the_same_base_url_twice_is_a_clean_error(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--model", "smollm2",
                        "--backend", "openai", "--base-url", "http://127.0.0.1:9",
                        "--base-url", "http://127.0.0.1:9/v1", "--dataset", "demo",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert r.returncode == 2 and "given twice" in r.stderr.strip().splitlines()[-1]
