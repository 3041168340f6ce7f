"""One writer per run directory: a second writer is refused before any model loads, a lock left
by a killed process is taken over with a notice, readers work while a writer holds the lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from harness.runlog import lock as run_lock
from harness.runlog.lock import LOCK_NAME, RunDirBusy, run_dir_lock
from tests.helpers.cli import in_process

HOLD = ("import sys, time\n"
        "from harness.runlog.lock import run_dir_lock\n"
        "with run_dir_lock(sys.argv[1], command='test holder'):\n"
        "    print('locked', flush=True)\n"
        "    time.sleep(120)\n")


@pytest.fixture
def holder(tmp_path):
    """A separate process holding a directory's lock; yields (dir, process)."""
    procs = []

    def start(run_dir):
        p = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE,
                             text=True)
        assert p.stdout.readline().strip() == "locked"
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "evalaware.main", *map(str, args)],
                          capture_output=True, text=True, **kw)


def test_second_run_refused_at_once_naming_dir_and_pid(tmp_path, holder, tiny_model_dir,
                                                       monkeypatch):
    run_dir = tmp_path / "r"
    p = holder(run_dir)
    r = _cli("run", "--model", tiny_model_dir, "--backend", "hf", "--dataset", "demo",
             "--limit", "2", "--methods", "binary", "--out", run_dir)
    assert r.returncode == 2
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {run_dir} is in use by pid {p.pid} (test holder")
    assert "ready in" not in r.stderr  # no model was loaded
    # in process: the refusal comes before any backend is constructed
    from harness.backends import registry
    from evalaware.main import cli

    monkeypatch.setattr(registry, "make_backend", lambda *a, **k: pytest.fail("engine started"))
    res = CliRunner().invoke(cli, ["run", "--model", str(tiny_model_dir), "--backend", "hf",
                                   "--dataset", "demo", "--limit", "2", "--out", str(run_dir)])
    assert isinstance(res.exception, RunDirBusy), res.output


def test_every_writer_is_refused_and_readers_work(tmp_path, holder, tiny_model_dir):
    run_dir = tmp_path / "r"
    made = in_process("run", "--model", tiny_model_dir, "--backend", "hf", "--dataset", "demo",
                      "--limit", "2", "--methods", "binary", "--answer-tokens", "2", "--probe-tokens",
                      "2", "--no-progress", "--out", run_dir)
    assert made.returncode == 0, made.stderr
    assert (run_dir / LOCK_NAME).read_text() == ""  # released cleanly: no record left
    p = holder(run_dir)
    for args in (["activations", "capture", "--run", run_dir],
                 ["probes", "eval", "--run", run_dir],
                 ["taxonomy", "--run", run_dir, "--out", tmp_path / "tax", "--no-llm-names"]):
        r = in_process(*args)
        assert r.returncode == 2 and f"in use by pid {p.pid}" in r.stderr, (args, r.stderr)
    show = in_process("show", run_dir)
    assert show.returncode == 0 and "binary" in show.stdout, show.stderr
    exp = in_process("export", run_dir, "--out", tmp_path / "x.jsonl")
    assert exp.returncode == 0 and len((tmp_path / "x.jsonl").read_text().splitlines()) == 2
    rep = in_process("report", run_dir, "--out", tmp_path / "rep")
    assert rep.returncode == 0, rep.stderr


def test_killed_holder_is_taken_over_with_a_notice(tmp_path, holder):
    p = holder(tmp_path)
    with pytest.raises(RunDirBusy, match=f"in use by pid {p.pid}"):
        with run_dir_lock(tmp_path):
            pass
    p.send_signal(signal.SIGKILL)
    p.wait()
    notes = []
    with run_dir_lock(tmp_path, notify=notes.append):
        record = json.loads((tmp_path / LOCK_NAME).read_text())
        assert record["pid"] == os.getpid()
    assert len(notes) == 1 and f"lock left by pid {p.pid}" in notes[0] and "no longer running" in notes[0]
    with run_dir_lock(tmp_path, notify=notes.append):  # released cleanly: no notice this time
        pass
    assert len(notes) == 1


def test_without_flock_the_pid_record_decides(tmp_path, monkeypatch):
    """File systems without flock: a live recorded pid holds the directory, a dead one not."""
    monkeypatch.setattr(run_lock, "_flock", lambda fd: None)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        for pid, busy in ((live.pid, True), (dead.pid, False)):
            (tmp_path / LOCK_NAME).write_text(json.dumps(
                {"pid": pid, "host": os.uname().nodename, "command": "x", "started": "t"}))
            notes = []
            if busy:
                with pytest.raises(RunDirBusy, match=f"pid {pid}"):
                    with run_dir_lock(tmp_path, notify=notes.append):
                        pass
            else:
                with run_dir_lock(tmp_path, notify=notes.append):
                    pass
                assert f"pid {pid}" in notes[0] and "no longer running" in notes[0]
    finally:
        live.kill()
        live.wait()


def test_reentrant_in_one_process(tmp_path):
    with run_dir_lock(tmp_path):
        with run_dir_lock(tmp_path):  # e.g. the CLI, then run_methods
            pass
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
        r = subprocess.run([sys.executable, "-c", HOLD, str(tmp_path)], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode != 0 and "RunDirBusy" in r.stderr  # still held after the inner exit
    assert (tmp_path / LOCK_NAME).read_text() == ""


def test_zombie_counts_as_dead():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    for _ in range(1200):  # up to 60 s: a loaded machine (xdist workers, CLI subprocesses)
        time.sleep(0.05)
        with open(f"/proc/{p.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
    assert not run_lock.pid_alive(p.pid)  # exited, not yet reaped
    p.wait()
    assert run_lock.pid_alive(os.getpid())


def test_a_symlinked_lock_is_refused_and_its_target_untouched(tmp_path):
    """A link planted as the lock must not make a run truncate the file it points to."""
    from harness.core.errors import StoreError

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    (run_dir / LOCK_NAME).symlink_to(victim)
    with pytest.raises(StoreError, match="symbolic link"):
        with run_dir_lock(run_dir):
            pass
    assert victim.read_text() == "precious\n"
    r = _cli("data", "validate", "demo")  # readers are unaffected; a writer is refused:
    assert r.returncode == 0
    r = _cli("run", "--model", tmp_path / "none", "--backend", "hf", "--dataset", "demo",
             "--methods", "binary", "--out", run_dir)
    assert victim.read_text() == "precious\n"


def test_a_lock_that_is_not_a_regular_file_is_refused(tmp_path):
    from harness.core.errors import StoreError

    run_dir = tmp_path / "r"
    (run_dir / LOCK_NAME).mkdir(parents=True)
    with pytest.raises(StoreError, match="not a regular file|cannot open"):
        with run_dir_lock(run_dir):
            pass
