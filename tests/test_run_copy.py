"""Copying a run directory (`harness.runlog.copy`): a consistent snapshot of the log even while a
writer holds it open with writes still in its journal; no lock, journals or exported records
carried; never over an existing path; an interrupted copy leaves nothing under the name."""

from __future__ import annotations

import pytest

from harness.core.errors import StoreError
from harness.core.sample import Message, Sample, SampleMeta
from harness.runlog import RunLog
from harness.runlog.copy import NOT_COPIED, copy_run
from harness.runlog.lock import LOCK_NAME


def _sample(i: int) -> Sample:
    return Sample(f"c:{i}", (Message("user", f"q{i}"),), "eval", SampleMeta("c"))


def _rec(i: int) -> dict:
    return {"sample_id": f"c:{i}", "method": "m", "label": "eval", "prediction": "eval", "score": i / 10,
            "n_valid": 1, "n_invalid": 0, "category": "c", "details": {}}


def test_a_copy_holds_what_the_open_writer_committed_and_nothing_of_the_run_s_lock(tmp_path):
    src = tmp_path / "src"
    writer = RunLog(src)  # held open: its commits sit in the WAL, not yet in store.sqlite
    writer.put_samples([_sample(i) for i in range(3)])
    writer.put_results("m", [_rec(i) for i in range(3)])
    writer.set_meta("settings/m", {"k": 1})
    (src / "results.jsonl").write_text("stale\n")
    (src / LOCK_NAME).write_text("{}")
    (src / "activations").mkdir()
    (src / "activations" / "x.bin").write_bytes(b"abc")
    assert (src / "store.sqlite-wal").stat().st_size > 0
    try:
        dst = copy_run(src, tmp_path / "dst")
    finally:
        writer.close()
    assert not {p.name for p in dst.iterdir()} & NOT_COPIED
    assert (dst / "activations" / "x.bin").read_bytes() == b"abc"
    with RunLog(dst, readonly=True) as st:
        assert [r["score"] for r in sorted(st.result_dicts("m"), key=lambda r: r["sample_id"])] == [0, 0.1, 0.2]
        assert st.get_meta("settings/m") == {"k": 1} and len(st.samples()) == 3
    with RunLog(dst, create=False) as st:  # a run directory of its own: writable, apart from the source
        st.put_results("m", [_rec(5)])
    with RunLog(src, readonly=True) as st:
        assert len(st.result_dicts("m")) == 3


def test_a_copy_never_replaces_a_path_and_a_failed_one_leaves_nothing(tmp_path):
    src = tmp_path / "src"
    with RunLog(src) as st:
        st.put_samples([_sample(0)])
    (tmp_path / "dst").mkdir()
    with pytest.raises(StoreError, match="exists"):
        copy_run(src, tmp_path / "dst")
    with pytest.raises(StoreError, match="not a run directory"):
        copy_run(tmp_path / "dst", tmp_path / "other")
    (tmp_path / ".new.copying-x1").mkdir()  # left by a killed copy to that name: cleared by the next
    copy_run(src, tmp_path / "new")
    assert not list(tmp_path.glob(".new.copying-*"))
    (src / "store.sqlite").write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError):
        copy_run(src, tmp_path / "broken")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dst", "new", "src"]  # no half copy, no temporary
