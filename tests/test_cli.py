"""Every CLI command documents itself with examples; user errors are one line with exit 2."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

import evalaware.main
from evalaware.main import cli


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

    r = subprocess.run([sys.executable, "-m", "evalaware.main", "run", "--model", str(tiny_model_dir),
                        "--backend", "hf", "--dataset", "demo", "--limit", "1", "--methods", "nope",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: unknown method(s) nope")


def test_missing_model_is_a_clean_error(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "evalaware.main", "run", "--model", str(tmp_path / "none"),
                        "--backend", "hf", "--dataset", "demo", "--out", str(tmp_path / "r")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "neither a local directory nor a hub id" in r.stderr


# --- early refusal and backend lifecycle ----------------------------------------------------
def _spy_backends(monkeypatch):
    """Record every backend the CLI constructs and whether it was closed."""
    from harness.backends import registry

    opened = []
    real = registry.make_backend

    def spy(kind, model, **opts):
        b = real(kind, model, **opts)
        b.closed = False
        close = b.close

        def closing():
            b.closed = True
            close()
        b.close = closing
        opened.append((model, b))
        return b
    monkeypatch.setattr(registry, "make_backend", spy)
    return opened


def test_bad_options_refused_before_any_engine(tmp_path, tiny_model_dir, monkeypatch):
    import subprocess
    import sys

    from harness.backends import registry

    monkeypatch.setattr(registry, "make_backend", lambda *a, **k: pytest.fail("engine started"))
    base = ["run", "--model", str(tiny_model_dir), "--backend", "hf", "--dataset", "demo",
            "--out", str(tmp_path / "r")]
    for extra, message in [
        (["--methods", "binary,nosuch"], "unknown method(s) nosuch"),
        (["--methods", "binary,binary"], "named twice: binary"),
        (["--tensor-parallel-size", "2"], "--tensor-parallel-size applies to the vllm backend, not to hf"),
        (["--methods", "motivation", "--judge-backend", "openai"], "the openai backend needs --judge-base-url"),
        (["--methods", "motivation", "--judge-model", str(tmp_path / "none")], "neither a local directory"),
        (["--prompts", str(tmp_path / "none")], "prompt override directory does not exist"),
        (["--dataset", str(tmp_path / "none.jsonl")], "no such file"),
        (["--n-votes", "0"], "'--n-votes': 0 is not in the range 1<=x<=1000."),
    ]:
        res = CliRunner().invoke(cli, base + extra)
        assert res.exit_code != 0 and message in str(res.exception) + res.output, (extra, res.output)
    assert not (tmp_path / "r").exists()  # nothing written either
    # The order holds outside the test process too: the method is refused before the (missing)
    # model is even looked for; exit code 2.
    r = subprocess.run([sys.executable, "-m", "evalaware.main", "run", "--model", str(tmp_path / "none"),
                        "--backend", "vllm", "--dataset", "demo", "--methods", "nosuch",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown method(s) nosuch" in r.stderr


def test_judge_only_for_judging_methods_and_every_backend_closed(tmp_path, tiny_model_dir,
                                                                 monkeypatch):
    judge_dir = tmp_path / "judge"
    judge_dir.symlink_to(tiny_model_dir)  # another name: a separate judge backend
    opened = _spy_backends(monkeypatch)
    fast = ["--answer-tokens", "2", "--probe-tokens", "2", "--judge-tokens", "2", "--no-progress",
            "--backend", "hf", "--dataset", "demo", "--limit", "2", "--model", str(tiny_model_dir)]
    res = CliRunner().invoke(cli, ["run", "--methods", "binary", "--judge-model", str(judge_dir),
                                   "--out", str(tmp_path / "a"), *fast])
    assert res.exit_code == 0, res.output
    assert [m for m, _ in opened] == [str(tiny_model_dir)]  # no judge for binary
    assert all(b.closed for _, b in opened)
    opened.clear()
    res = CliRunner().invoke(cli, ["run", "--methods", "motivation", "--judge-model", str(judge_dir),
                                   "--out", str(tmp_path / "b"), *fast])
    assert res.exit_code == 0, res.output
    assert [m for m, _ in opened] == [str(tiny_model_dir), str(judge_dir)]
    assert all(b.closed for _, b in opened)
    # Ctrl-C in the middle of the run: both closed too.
    opened.clear()

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(evalaware.main, "run_methods", interrupted)  # the name `run` calls
    res = CliRunner().invoke(cli, ["run", "--methods", "motivation", "--judge-model", str(judge_dir),
                                   "--out", str(tmp_path / "c"), *fast])
    assert res.exit_code != 0 and len(opened) == 2 and all(b.closed for _, b in opened)


def test_quiet_by_default_one_line_per_engine_verbose_restores(tmp_path, tiny_model_dir):
    import subprocess
    import sys

    args = [sys.executable, "-m", "evalaware.main", "run", "--model", str(tiny_model_dir), "--backend",
            "hf", "--dataset", "demo", "--limit", "2", "--methods", "binary", "--answer-tokens", "2",
            "--probe-tokens", "2"]
    quiet = subprocess.run(args + ["--out", str(tmp_path / "q")], capture_output=True, text=True)
    assert quiet.returncode == 0, quiet.stderr
    assert "Loading weights" not in quiet.stderr
    ready = [ln for ln in quiet.stderr.splitlines() if " ready in " in ln]
    assert len(ready) == 1 and ready[0].startswith(f"model: {tiny_model_dir} (hf, cpu, float32)")
    assert "binary" in quiet.stderr  # our own progress bar stays
    verbose = subprocess.run(args + ["--out", str(tmp_path / "v"), "-v"], capture_output=True, text=True)
    assert verbose.returncode == 0 and "Loading weights" in verbose.stderr


def test_run_constrain_end_to_end(tmp_path, tiny_model_dir):
    """`run --constrain` on a random model: every binary answer parses, `show` marks the row,
    counts the cut sample answers and a second run without the flag is refused."""
    from tests.helpers.cli import in_process

    base = ["run", "--model", str(tiny_model_dir), "--backend", "hf",
            "--dataset", "demo", "--limit", "2", "--methods", "binary", "--temperature", "1",
            "--answer-tokens", "4", "--probe-tokens", "24", "--out", str(tmp_path / "r"), "--no-progress"]
    r = in_process(*base, "--constrain")
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("binary"))
    assert row.startswith("binary (constrained)")
    n, _, _, undecided, bad, cut = row[len("binary (constrained)"):].split()[:6]
    assert (n, bad, cut) == ("2", "0", "2/12")  # both 4-token sample answers were cut
    assert "2/12 (2 sample answers)" in row  # the cut cell as the report shows it (cut_cell)
    # answers to the samples, cut with text kept: a note that asks nothing, not a warning (issue 46)
    assert "note: binary: 2 of 12 answers so far (16.7%) were answers to the sample cut" in r.stderr
    assert "stopped at the token limit" not in r.stderr
    again = in_process(*base)
    assert again.returncode == 2 and "setting for method binary" in again.stderr


def test_data_parallel_on_the_offline_engine_is_refused_with_the_serve_recipe(tmp_path, tiny_model_dir):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "evalaware.main", "run", "--model", str(tiny_model_dir),
                        "--backend", "vllm", "--data-parallel-size", "2", "--dataset", "demo",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]
    assert "--data-parallel-size 2" in last and "vllm serve" in last and "--base-url" in last
    assert not (tmp_path / "r").exists()


def test_the_same_base_url_twice_is_a_clean_error(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "evalaware.main", "run", "--model", "smollm2",
                        "--backend", "openai", "--base-url", "http://127.0.0.1:9",
                        "--base-url", "http://127.0.0.1:9/v1", "--dataset", "demo",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert r.returncode == 2 and "given twice" in r.stderr.strip().splitlines()[-1]


def test_run_options_shared_and_checked_before_any_engine(tmp_path, monkeypatch):
    """`run`, `taxonomy`, `activations capture` and `steer run` take the same model, engine and
    dataset options (declared once in evalaware/options.py) and the commands that run methods
    the same method settings; bad values are refused before any engine starts (exit 2), and the
    capture's old `--dtype fp16` (now --store-dtype) is refused with a pointer."""
    from harness.backends import registry

    monkeypatch.setattr(registry, "make_backend", lambda *a, **k: pytest.fail("engine started"))
    cmds = {"run": cli.commands["run"], "taxonomy": cli.commands["taxonomy"],
            "capture": cli.commands["activations"].commands["capture"],
            "steer run": cli.commands["steer"].commands["run"]}
    flags = {n: {o for p in c.params for o in p.opts} for n, c in cmds.items()}
    for opt in ("--model", "--backend", "--dtype", "--max-model-len", "--gpu-memory-utilization",
                "--base-url", "--trust-remote-code", "--limit", "--first", "-v"):
        assert all(opt in f for f in flags.values()), opt
    for opt in ("--dataset", "--label", "--judge-model"):
        assert all(opt in flags[n] for n in ("run", "taxonomy", "steer run")), opt
    for opt in ("--constrain", "--words", "--min-coverage", "--answer-tokens", "--prompts"):
        assert all(opt in flags[n] for n in ("run", "steer run")), opt
    assert "--constrain" in flags["taxonomy"] and "--judge" in flags["taxonomy"]
    assert "--store-dtype" in flags["capture"] and "--engine" in flags["capture"]

    vec = tmp_path / "vec"
    vec.mkdir()
    steer = ["steer", "run", "--vector", str(vec), "--dataset", "demo", "--out", str(tmp_path / "s")]
    for args, message in [
        (steer + ["--methods", "nosuch"], "unknown method(s) nosuch"),
        (steer + ["--words", "eval=;deploy="], "--words"),
        (steer + ["--backend", "openai"], "the openai backend cannot steer"),
        (["activations", "capture", "--run", str(tmp_path), "--dtype", "fp16"], "--store-dtype fp16"),
        (["activations", "capture", "--run", str(tmp_path), "--tensor-parallel-size", "2"],
         "does not take --tensor-parallel-size"),
        (["taxonomy", "--dataset", "demo", "--out", str(tmp_path / "t")], "--dataset needs --model"),
    ]:
        r = subprocess.run([sys.executable, "-m", "evalaware.main", *args], capture_output=True, text=True)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
        res = CliRunner().invoke(cli, args)
        assert res.exit_code != 0 and message in str(res.exception) + res.output, (args, res.output)
    assert not (tmp_path / "s").exists() and not (tmp_path / "t").exists()
