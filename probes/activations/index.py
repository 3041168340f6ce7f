"""A capture's index in the run's SQLite store: its tables, its settings, what it recorded.

Tables (in ``RUN/store.sqlite``):
- ``act_index``: (capture, sample_id, pooling, layer, shape, shard, offset), one row per vector;
  ``shard`` is the shard number n of ``shard-<n>.safetensors`` (an integer keeps the index small).
- ``act_samples``: (capture, sample_id, shard, info) marks a sample as captured (a pooling may be
  absent for it, e.g. no answer) with per-sample token counts.
- ``act_shards``: (capture, shard, n_samples, bytes, sha256).
Capture settings live in the store's ``meta`` under ``activations/<capture>``.
"""

from __future__ import annotations

import json
from typing import Any

from harness.core.errors import StoreError
from harness.runlog import RunLog, TableSpec
from probes.activations.shard_file import CorruptIndex, CorruptShard

ACT_INDEX = TableSpec("act_index", (
    ("capture", "TEXT"), ("sample_id", "TEXT"), ("pooling", "TEXT"), ("layer", "INTEGER"),
    ("shape", "TEXT"), ("shard", "INTEGER"), ("offset", "INTEGER")),
    ("capture", "pooling", "layer", "sample_id"), without_rowid=True)
ACT_SAMPLES = TableSpec("act_samples", (("capture", "TEXT"), ("sample_id", "TEXT"), ("shard", "TEXT"),
                                        ("info", "TEXT")), ("capture", "sample_id"))
ACT_SHARDS = TableSpec("act_shards", (
    ("capture", "TEXT"), ("shard", "TEXT"), ("n_samples", "INTEGER"), ("bytes", "INTEGER"),
    ("sha256", "TEXT"), ("created", "REAL")), ("capture", "shard"))


class CaptureIndex:
    """What the run log records of one capture (a name): its tables, settings and errors."""

    def __init__(self, store: RunLog, capture: str = "default") -> None:
        if not capture or "/" in capture or capture.startswith("."):
            raise StoreError(f"bad capture name {capture!r}")
        self.store, self.capture = store, capture
        self.index, self.sample_rows = store.table(ACT_INDEX), store.table(ACT_SAMPLES)
        self.shard_rows = store.table(ACT_SHARDS)
        self.where = {"capture": capture}
        self.dir = store.run_dir / "activations" / capture
        self.meta_key = f"activations/{capture}"

    @property
    def settings(self) -> dict[str, Any] | None:
        return self.store.get_meta(self.meta_key)

    def shards(self) -> list[str]:
        return [r[0] for r in self.shard_rows.select(["shard"], self.where, order_by=["shard"])]

    def done_ids(self) -> set[str]:
        return {r[0] for r in self.sample_rows.select(["sample_id"], self.where)}

    def poolings(self) -> list[str]:
        return [r[0] for r in self.index.select(["pooling"], self.where, order_by=["pooling"],
                                                distinct=True)]

    def layers(self) -> list[int]:
        s = self.settings
        return list(s["layers"]) if s else []

    def sample_info(self) -> dict[str, dict[str, Any]]:
        return {sid: json.loads(info)
                for sid, info in self.sample_rows.select(["sample_id", "info"], self.where)}

    # --- errors --------------------------------------------------------------------------
    def again(self) -> str:
        """The command that captures a bad shard's samples again."""
        run = self.store.run_dir
        return f"`evalaware activations capture --run {run}" + (
            f" --name {self.capture}`" if self.capture != "default" else "`")

    def corrupt(self, name: str, why: str) -> CorruptShard:
        """The one-line error for a bad shard file: which file, which capture, what to do."""
        return CorruptShard(f"{self.dir / name}: shard of capture {self.capture!r} is corrupt: "
                            f"{why}; re-run {self.again()} to capture its samples again")

    def bad_row(self, name: str, sample_id: str, why: str) -> CorruptIndex:
        """The one-line error for an index row that does not point at its sample's vector."""
        return CorruptIndex(f"{self.dir / name}: capture {self.capture!r}: the index row of sample "
                            f"{sample_id!r} is wrong ({why}); re-run {self.again()} to capture "
                            f"it again")
