"""Issue 48: every failure one line, no secret anywhere. The one boundary (evalaware/boundary.py:
exit 1 environment, 2 input, 3 a bug, control characters escaped, -v keeps the traceback), -M
engine arguments the engine refuses or that change the architecture, a disk that fills up while
a probe, a shard or a report is written, `probes eval --n-perm` 0 and -1, and a secret in a URL's
path parameter or in a server's error body. Each test here fails on c43d876."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import click
import pytest

from evalaware.boundary import classify, command_path, run_cli
from harness.core.errors import DiskFull, EvalAwareError
from harness.core.redact import redact_echo, redact_text, redact_url, url_secrets
from tests.helpers.cli import run_main as _cli
from tests.helpers.probe_runs import answer_run, random_samples

SECRET = "sk-ISSUE48secret0042"
ESC = "\x1b[2J\x1b[1;1Hall ok"


@pytest.fixture
def terminal(monkeypatch):
    """stderr as a terminal gets it: click strips escape sequences only when it is not one."""
    monkeypatch.setattr(click.utils, "should_strip_ansi", lambda *a, **k: False)


def _one_line(code: int, err: str, status: int = 2) -> str:
    lines = err.strip().splitlines()
    assert code == status and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    assert "Traceback" not in err and "\x1b" not in err
    return lines[0]


# --- the boundary ---------------------------------------------------------------------------------

@click.group()
def tree() -> None:
    """A group whose command raises what it is told to."""


@tree.command()
@click.argument("what")
def fail(what: str) -> None:
    raise {"bug": TypeError("unsupported format string passed to NoneType.__format__"),
           "memory": MemoryError(), "package": ModuleNotFoundError("No module named 'bnb'", name="bnb"),
           "full": OSError(errno.ENOSPC, "No space left on device", "/x/shard.safetensors"),
           "missing": FileNotFoundError(errno.ENOENT, "No such file or directory", "/x/in.jsonl"),
           "input": EvalAwareError(f"--name {ESC!r} at http://h/v1;{SECRET}: bad"),
           "disk": DiskFull("/x/probe.safetensors"), "interrupt": KeyboardInterrupt()}[what]


@pytest.mark.parametrize("what, status, says", [
    ("bug", 3, "internal error, TypeError: unsupported format string"),
    ("memory", 1, "out of memory"), ("package", 1, "pip install bnb"),
    ("full", 1, "/x/shard.safetensors: No space left on device; free space"),
    ("missing", 2, "/x/in.jsonl: No such file or directory"),
    ("input", 2, "--name '\\x1b[2J\\x1b[1;1Hall ok' at http://h/v1;***: bad"),
    ("disk", 1, "/x/probe.safetensors: No space left on device while writing it")])
def test_each_failure_is_one_line_naming_the_command_with_its_exit_code(what, status, says, capsys, terminal):
    with pytest.raises(SystemExit) as e:
        run_cli(tree, ["fail", what])
    line = _one_line(e.value.code, capsys.readouterr().err, status)
    assert says in line and line.endswith("(evalaware fail)") and SECRET not in line, line


def test_an_interrupt_is_130_and_a_usage_error_escapes_what_it_echoes(capsys, terminal, monkeypatch):
    with pytest.raises(SystemExit) as e:
        run_cli(tree, ["fail", "interrupt"])
    assert e.value.code == 130 and "re-run the same command to resume" in capsys.readouterr().err
    code, _, err = _cli(["run", "--backend", ESC, "--model", "x", "--dataset", "demo", "--out", "o"],
                        monkeypatch, capsys)
    assert code == 2 and "\x1b" not in err and "\\x1b[2J" in err and "Traceback" not in err, err


def test_a_bug_in_a_real_command_is_one_line_and_minus_v_keeps_the_traceback(monkeypatch, capsys, terminal):
    def planted(_samples):
        raise TypeError(f"planted {ESC}")

    monkeypatch.setattr("evalaware.main.summarize", planted)
    code, _, err = _cli(["data", "validate", "demo"], monkeypatch, capsys)
    line = _one_line(code, err, 3)
    assert "internal error, TypeError: planted \\x1b[2J" in line and "(evalaware data validate)" in line
    assert "evalaware -v" in line  # how to see the traceback
    code, _, err = _cli(["-v", "data", "validate", "demo"], monkeypatch, capsys)
    assert code == 3 and "Traceback (most recent call last)" in err and "\x1b" not in err
    assert err.strip().splitlines()[-1] == line  # the same line last


def test_command_path_names_the_subcommand():
    from evalaware.main import cli

    assert command_path(cli, ["-v", "probes", "eval", "--run", "x"]) == "evalaware probes eval"
    assert command_path(cli, ["nope"]) == "evalaware"
    assert classify(UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"))[0] == 2


def test_a_fifo_or_device_given_as_a_dataset_is_refused_not_read(tmp_path, monkeypatch, capsys):
    """Reading a FIFO waited for a writer forever; /dev/full is an endless stream of zeros."""
    fifo = tmp_path / "data.jsonl"
    os.mkfifo(fifo)
    for path in (fifo, "/dev/full"):
        code, _, err = _cli(["data", "validate", path], monkeypatch, capsys)
        assert "not a regular file" in _one_line(code, err)


# --- -M: what the engine refuses, what changes the architecture ---------------------------------------

def _run_with(model: Path, tmp_path: Path, *extra: str) -> list[str]:
    return ["run", "--model", model, "--backend", "hf", "--dataset", "demo", "--methods", "binary",
            "--limit", "2", "--out", tmp_path / "run", "--no-progress", *extra]


@pytest.mark.parametrize("arg, status, says", [
    ("subfolder=nope", 2, "-M subfolder=nope: the engine refused it: Unrecognized model"),
    (f"attn_implementation={ESC}", 2, "-M attn_implementation=\\x1b[2J\\x1b[1;1Hall ok: the engine refused it"),
    ("attn_implementation=" + "x" * 10_000, 2, "... (10000 characters): the engine refused it"),
    ('quantization_config={"load_in_4bit": true}', 1, "the engine refused it: Using `bitsandbytes`"),
    ("__class__=1", 2, "-M __class__: a private name"),
    ("num_hidden_layers=1", 2, "changes the model's architecture"),
    ('hf_overrides={"vocab_size": 7}', 2, "-M vocab_size: changes the model's architecture")])
def test_an_engine_argument_the_engine_refuses_is_one_line(arg, status, says, tiny_model_dir, tmp_path,
                                                           monkeypatch, capsys, terminal):
    if "quantization" in arg and importlib.util.find_spec("bitsandbytes") is not None:
        pytest.skip("bitsandbytes is installed here: the engine takes the argument")
    code, _, err = _cli(_run_with(tiny_model_dir, tmp_path, "-M", arg), monkeypatch, capsys)
    line = _one_line(code, err, status)
    assert says in line and len(line) < 1200, line


def test_an_architecture_change_runs_only_when_allowed_and_is_recorded(tiny_model_dir, tmp_path, monkeypatch,
                                                                      capsys):
    code, _, err = _cli(_run_with(tiny_model_dir, tmp_path, "-M", "num_hidden_layers=1",
                                  "--allow-architecture-change"), monkeypatch, capsys)
    assert code == 0, err
    assert "note: -M num_hidden_layers changes the model's architecture" in err
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert '"num_hidden_layers": 1' in json.dumps(manifest)


# --- a disk that fills up ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def captured(tmp_path_factory, tiny_model_dir, hf_tiny):
    """A run of 12 samples whose activations the CLI captured."""
    run = tmp_path_factory.mktemp("full") / "run"
    answer_run(run, random_samples(n_groups=4, per_group=3, seed=5), hf_tiny, answers=False).close()
    from click.testing import CliRunner

    from evalaware.main import cli

    out = CliRunner().invoke(cli, ["activations", "capture", "--run", str(run), "--model", str(tiny_model_dir),
                                   "--pooling", "mean_prompt", "--shard-size", "6", "--no-progress"])
    assert out.exit_code == 0, out.output + repr(out.exception)
    return run


class _Full:
    """A file whose writes fail as on a full disk."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def _disk_full(monkeypatch, suffix: str) -> None:
    """Writes through the atomic writer to a file named ...`suffix` fail with ENOSPC."""
    real = os.fdopen

    def fdopen(fd, *a, **k):
        f = real(fd, *a, **k)
        name = os.readlink(f"/proc/self/fd/{fd}")
        return _Full(f) if name.endswith(".partial") and suffix in name else f
    monkeypatch.setattr("harness.core.atomic.os.fdopen", fdopen)


def _nothing_partial(d: Path) -> None:
    assert not [p for p in d.rglob("*") if p.name.endswith(".partial")], list(d.rglob("*"))


def test_disk_full_writing_a_probe_is_one_line_naming_it_and_leaves_nothing(captured, tmp_path, monkeypatch,
                                                                             capsys):
    _disk_full(monkeypatch, "probe.safetensors")
    out = tmp_path / "probe"
    code, _, err = _cli(["probes", "train", "--run", captured, "--pooling", "mean_prompt", "--layer", "1",
                         "--out", out, "--n-boot", "10", "--cv", "grouped", "--no-progress"], monkeypatch, capsys)
    line = _one_line(code, err, 1)
    assert f"{out / 'probe.safetensors'}: No space left on device" in line and "probes train" in line
    assert not (out / "probe.safetensors").exists() and not (out / "probe.json").exists()
    _nothing_partial(tmp_path)


def test_disk_full_writing_a_shard_is_one_line_and_the_capture_resumes(captured, tiny_model_dir, tmp_path,
                                                                       monkeypatch, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(captured, run)
    shutil.rmtree(run / "activations")
    _disk_full(monkeypatch, "shard-00001")
    args = ["activations", "capture", "--run", run, "--model", tiny_model_dir, "--pooling", "mean_prompt",
            "--shard-size", "6", "--name", "default", "--no-progress"]
    code, _, err = _cli(args, monkeypatch, capsys)
    line = _one_line(code, err.strip().splitlines()[-1], 1)  # after the model's line
    assert "shard-00001.safetensors: No space left on device" in line and "activations capture" in line
    _nothing_partial(run)
    monkeypatch.undo()
    code, out, err = _cli(args, monkeypatch, capsys)
    assert code == 0 and re.search(r"captured \d+ samples \([1-9]\d* already done\)", out), out + err
    assert "store: 12 samples" in out


def test_disk_full_writing_a_report_is_one_line_exit_1(captured, tmp_path, monkeypatch, capsys):
    from tests.test_hostile_writes import _records_run

    run = _records_run(tmp_path / "records")
    _disk_full(monkeypatch, "report.md")
    code, _, err = _cli(["report", run, "--out", tmp_path / "rep", "--bootstrap", "0"], monkeypatch, capsys)
    assert "report.md: No space left on device" in _one_line(code, err, 1)
    _nothing_partial(tmp_path)


def test_dev_full_is_refused_as_an_output_and_a_full_stdout_is_exit_1(tmp_path, monkeypatch, capsys):
    from tests.test_hostile_writes import _records_run

    run = _records_run(tmp_path / "records")
    code, _, err = _cli(["export", run, "--out", "/dev/full"], monkeypatch, capsys)
    assert "/dev/full: is not a regular file (a device)" in _one_line(code, err)
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "evalaware.main", "export", str(run), "--out", "-"],
                           stdout=full, stderr=subprocess.PIPE, text=True)
    _one_line(p.returncode, p.stderr, 1)


# --- probes eval --n-perm ------------------------------------------------------------------------------

def test_probes_eval_n_perm_zero_says_no_null_and_minus_one_is_refused(captured, tmp_path, monkeypatch, capsys):
    args = ["probes", "eval", "--run", captured, "--n-boot", "10", "--baselines", "shuffled", "--cv", "grouped",
            "--no-progress", "--out", tmp_path / "ev"]
    code, out, err = _cli([*args, "--n-perm", "0"], monkeypatch, capsys)
    assert code == 0, err
    assert "best-layer null not drawn (--n-perm 0)" in out
    code, _, err = _cli([*args, "--n-perm", "-1"], monkeypatch, capsys)
    assert code == 2 and "--n-perm" in err and "Traceback" not in err


# --- URL secrets -------------------------------------------------------------------------------------

def test_a_path_parameter_is_masked_and_a_server_echo_of_any_secret_too():
    assert redact_url(f"http://h:8000/v1;{SECRET}") == "http://h:8000/v1;***"
    assert redact_url(f"http://h/v1;{SECRET}/chat?k={SECRET}#x") == "http://h/v1;***?k=***#***"
    assert SECRET in url_secrets(f"http://h/v1?{SECRET}")
    body = f"no route POST /v1;{SECRET}/chat/completions?{SECRET} (key {SECRET})"
    shown = redact_echo(body, [f"http://h/v1;{SECRET}"])
    assert SECRET not in shown and "no route POST /v1;***" in shown
    assert SECRET not in redact_text(f"error: http:/u:{SECRET}@h/v1: no such file")  # as Path() prints it


class _EchoingServer(BaseHTTPRequestHandler):
    """Lists one model; answers every completion 400 with a body that echoes the request path."""

    def _send(self, status: int, obj: dict) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self._send(200, {"data": [{"id": "served-model"}]})

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._send(400, {"error": {"message": f"unknown route {self.path}; did you mean ?{SECRET}"}})

    def log_message(self, *a: object) -> None:
        pass


def test_a_secret_in_a_path_parameter_is_in_no_file_and_not_printed(tmp_path, tiny_model_dir, monkeypatch,
                                                                    capsys):
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _EchoingServer)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/v1;{SECRET}"
    try:
        code, out, err = _cli(["run", "--backend", "openai", "--base-url", url, "--model", "served-model",
                               "--tokenizer", tiny_model_dir, "--dataset", "demo", "--limit", "2", "--methods",
                               "binary", "--out", tmp_path / "run", "--no-progress"], monkeypatch, capsys)
    finally:
        srv.shutdown()
        srv.server_close()
    line = _one_line(code, err.strip().splitlines()[-1])  # after the model's and the progress lines
    assert "HTTP 400" in line and "unknown route /v1;***" in line, line
    assert SECRET not in out + err
    written = [p for p in (tmp_path / "run").rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not written and (tmp_path / "run" / "manifest.json").exists()
