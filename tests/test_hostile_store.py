"""A hostile or unlucky run directory: a second dataset into one run, a read-only copy, a
hard-linked lock, a full disk. Each is refused or survived with one line, the log intact."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from harness.data.readers import load_dataset, write_jsonl
from tests.helpers.cli import in_process

ROOT = Path(__file__).parents[1]
FAST = ["--backend", "hf", "--methods", "binary", "--answer-tokens", "2", "--probe-tokens", "2",
        "--no-progress"]


def _cli(*args: object, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    """`evalaware ARGS` in this process; under `prefix` (a read-only mount) in a fresh one."""
    if prefix is None:
        return in_process(*args)
    return subprocess.run([*prefix, "-m", "evalaware.main", *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def _run(model: Path, data: object, out: Path, *extra: object) -> subprocess.CompletedProcess[str]:
    return _cli("run", "--model", model, *FAST, "--dataset", data, "--out", out, *extra)


def _error_line(r: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused command prints (no traceback)."""
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    return r.stderr.strip().splitlines()[-1]


def _records(run: Path) -> dict[str, str]:
    db = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True)
    try:
        return dict(db.execute("SELECT sample_id, record FROM results"))
    finally:
        db.close()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_model_dir) -> Path:
    """A real run (tiny random model, 2 demo samples, binary) that ended cleanly."""
    run = tmp_path_factory.mktemp("finished") / "run"
    r = _run(tiny_model_dir, "demo", run, "--limit", "2")
    assert r.returncode == 0, r.stderr
    return run


# --- 1. one run directory, one dataset ---------------------------------------------------------

def test_a_second_dataset_into_one_run_dir_is_refused_before_any_model_loads(tmp_path,
                                                                               tiny_model_dir):
    demo = load_dataset("demo")
    mine, other = tmp_path / "mine.jsonl", tmp_path / "other.jsonl"
    write_jsonl(demo[:3], mine)
    write_jsonl(demo[-3:], other)  # other ids: put_samples alone would merge them in
    out = tmp_path / "run"
    assert _run(tiny_model_dir, mine, out, "--limit", "2").returncode == 0
    first = _records(out)
    assert len(first) == 2

    r = _run(tiny_model_dir, other, out)
    line = _error_line(r)
    assert line.startswith(f"error: {out}: this run directory belongs to dataset {mine} (sha256 ")
    assert f"{other} (sha256 " in line and "is another dataset: use a new --out directory" in line
    assert " ready in " not in r.stderr  # refused before the model loaded
    assert _records(out) == first
    assert json.loads((out / "manifest.json").read_text())["dataset"]["path"] == str(mine)

    # the same file grows (--limit 3) and shrinks (--limit 1): still its run; the same bytes
    # under another name are the same dataset
    assert _run(tiny_model_dir, mine, out, "--limit", "3").returncode == 0
    copy = tmp_path / "copy.jsonl"
    shutil.copy(mine, copy)
    r = _run(tiny_model_dir, copy, out, "--limit", "1")
    assert r.returncode == 0, r.stderr
    assert set(_records(out)) == {s.id for s in demo[:3]}
    show = _cli("show", out)
    assert "samples: 3" in show.stdout

    # the file changed under the same name (the last one used): refused, naming it
    with copy.open("a") as f:
        f.write(json.dumps({"id": "new:1", "label": "eval", "messages": [
            {"role": "user", "content": "hi"}], "metadata": {"category": "new"}}) + "\n")
    line = _error_line(_run(tiny_model_dir, copy, out))
    assert f"belongs to dataset {copy} (sha256 " in line and "that file has changed since" in line
    assert set(_records(out)) == {s.id for s in demo[:3]}


# --- 5. readers never write --------------------------------------------------------------------

def _read_only_prefix(run: Path) -> list[str] | None:
    """A command prefix under which `run` lies on a read-only file system. Root ignores
    permission bits: there a read-only bind mount in a user namespace; else the bits (None:
    this process sees them)."""
    if os.geteuid() != 0:
        for p in [run, *run.iterdir()]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        return None
    mount = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" && exec "$@"'
    prefix = ["unshare", "-Urm", "sh", "-c", mount, str(run), sys.executable]
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare: no read-only file system to test on")
    probe = subprocess.run(prefix[:-1] + ["sh", "-c", f'! touch "{run}/probe" 2>/dev/null'],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"running as root, no read-only bind mount here: {probe.stderr.strip()}")
    return prefix


def test_show_export_report_read_a_run_on_a_read_only_file_system(tmp_path, finished_run):
    run = tmp_path / "ro"
    shutil.copytree(finished_run, run)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    prefix = _read_only_prefix(run)
    try:
        show = _cli("show", run, prefix=prefix)
        assert show.returncode == 0, show.stderr
        assert "samples: 2" in show.stdout and "binary" in show.stdout
        export = _cli("export", run, "--out", tmp_path / "x.jsonl", prefix=prefix)
        assert export.returncode == 0, export.stderr
        assert len((tmp_path / "x.jsonl").read_text().splitlines()) == 2
        report = _cli("report", run, "--out", tmp_path / "rep", prefix=prefix)
        assert report.returncode == 0, report.stderr
        assert (tmp_path / "rep" / "report.md").is_file()
    finally:
        for p in [run, *run.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


def test_a_reader_opens_the_log_read_only_and_never_migrates_it(tmp_path):
    """An old (version-0) log is read as it is: no migration, no lock, no byte of the file
    changed; writing through a reader is refused in one line."""
    from harness.core.errors import StoreError
    from harness.runlog import RunLog
    from tests.test_runlog import _v0_run

    run = tmp_path / "old"
    _v0_run(run)
    log = run / "store.sqlite"
    stat, data = log.stat(), log.read_bytes()
    show = _cli("show", run)
    assert show.returncode == 0, show.stderr
    assert "samples: 2" in show.stdout
    assert _cli("export", run, "--out", tmp_path / "x.jsonl").returncode == 0
    assert len((tmp_path / "x.jsonl").read_text().splitlines()) == 2
    assert _cli("report", run, "--out", tmp_path / "rep").returncode == 0
    reader = RunLog(run, readonly=True)
    assert [s.id for s in reader.samples()] == ["c:2", "c:1"] and reader.model_calls() == []
    with pytest.raises(StoreError, match="cannot write the run log .*readonly database"):
        reader.put_results("binary", reader.results("binary")[:1])
    reader.close()
    assert log.read_bytes() == data and log.stat().st_mtime_ns == stat.st_mtime_ns
    assert not (run / ".evalaware-lock").exists()
    wal = run / "store.sqlite-wal"  # SQLite's read index may stay; it holds no data
    assert not wal.exists() or wal.stat().st_size == 0


# --- 10. a hard-linked lock --------------------------------------------------------------------

def test_a_hard_linked_lock_is_refused_and_the_other_file_keeps_its_bytes(tmp_path, tiny_model_dir):
    from harness.core.errors import StoreError
    from harness.runlog.lock import LOCK_NAME, run_dir_lock

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run = tmp_path / "r"
    run.mkdir()
    os.link(victim, run / LOCK_NAME)
    with pytest.raises(StoreError, match=r"is a hard link \(2 names for one file\); refusing .*remove it"):
        with run_dir_lock(run):
            pass
    assert victim.read_text() == "precious\n"
    r = _run(tiny_model_dir, "demo", run, "--limit", "1")
    assert "hard link" in _error_line(r) and " ready in " not in r.stderr
    assert victim.read_text() == "precious\n"


# --- 7. a full disk ----------------------------------------------------------------------------

def test_a_full_disk_is_one_line_and_keeps_what_was_committed(tmp_path, finished_run, tiny_model_dir,
                                                             monkeypatch):
    run = tmp_path / "full"
    shutil.copytree(finished_run, run)
    before = _records(run)
    real = sqlite3.connect

    def connect(*a, **k):  # the database may not grow: SQLite's own 'database or disk is full'
        db = real(*a, **k)
        db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
        return db

    with monkeypatch.context() as m:
        m.setattr(sqlite3, "connect", connect)
        r = _run(tiny_model_dir, "demo", run, "--limit", "6")
    line = _error_line(r)
    assert line.startswith(f"error: {run / 'store.sqlite'}: cannot write the run log (database or "
                           f"disk is full); this write was rolled back")
    assert _records(run) == before
    db = sqlite3.connect(run / "store.sqlite")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    show = _cli("show", run)
    assert show.returncode == 0 and "binary" in show.stdout
    # resumed once there is room: the records that failed to commit are computed now
    assert _run(tiny_model_dir, "demo", run, "--limit", "6").returncode == 0
    assert len(_records(run)) == 6


def test_a_batch_that_does_not_fit_is_rolled_back_whole(tmp_path, finished_run, monkeypatch):
    from harness.core.errors import StoreError
    from harness.runlog import RunLog

    run = tmp_path / "full"
    shutil.copytree(finished_run, run)
    log = RunLog(run, create=False)
    recs = log.results("binary")
    log.close()
    connect = sqlite3.connect

    def limited(*a, **k):
        db = connect(*a, **k)
        db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0] + 2}")
        return db

    monkeypatch.setattr(sqlite3, "connect", limited)
    log = RunLog(run, create=False)
    big = [{**r.to_dict(), "sample_id": f"x:{i}", "details": {"pad": "x" * 3000}}
           for i, r in enumerate(recs * 20)]  # 40 records, ~30 pages: the first few would fit
    with pytest.raises(StoreError, match="database or disk is full"):
        log.put_results("binary", big)
    assert [r.sample_id for r in log.results("binary")] == [r.sample_id for r in recs]
    log.put_results("binary", big[:1])  # the connection still works
    log.close()
