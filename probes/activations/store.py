"""Pooled activations on disk: safetensors shards plus an index in the run's SQLite store.

Layout: ``RUN/activations/<capture>/shard-00000.safetensors`` holds one tensor per
(pooling, layer), named ``"<pooling>/<layer>"``, of shape (rows, hidden) in fp16 or bf16; row
``offset`` of that tensor belongs to the sample the index names. The parts:

- :mod:`probes.activations.shard_file`: one shard file (name, dtypes, row record, bytes' check);
- :mod:`probes.activations.index`: the capture's tables in ``RUN/store.sqlite`` and its settings;
- :mod:`probes.activations.integrity`: shards and index rows checked, bad ones dropped;
- :mod:`probes.activations.reading`: vectors read back (checked), the capture's sizes;
- here: :class:`ActivationStore`, which writes a capture and is the one handle callers use.

Crash safety: a shard is written to a temporary name, fsynced, renamed into place, and only then
indexed in one transaction. A crash before the transaction leaves an unindexed file, which the
next open deletes before the samples are captured again, so a resumed capture never duplicates a
shard or a sample. A resumed capture checks every shard and index row and drops the bad ones
(:meth:`ActivationStore.repair`), so their samples are captured again.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from harness.core.atomic import write_text
from harness.core.errors import StoreError
from probes.activations import integrity, reading
from probes.activations.index import CaptureIndex
from probes.activations.shard_file import (CANONICAL_DTYPE, DTYPES, ROWS_KEY, CorruptIndex, CorruptShard,
                                           save_shard, sha256, shard_name, shard_number, torch_dtype)

if TYPE_CHECKING:
    import torch

__all__ = ["ActivationStore", "CapturedSample", "CorruptShard", "CorruptIndex", "DTYPES", "CANONICAL_DTYPE"]


@dataclass
class CapturedSample:
    """One sample's pooled vectors: {pooling: array (n_layers, hidden)} (absent poolings omitted)."""

    sample_id: str
    vectors: dict[str, np.ndarray]
    info: dict[str, Any]


class ActivationStore(CaptureIndex):
    """Pooled activations of one capture (a name) inside a run directory."""

    # --- writing -------------------------------------------------------------------------
    def begin(self, settings: dict[str, Any]) -> list[str]:
        """Record settings, or check a resumed capture uses the same ones; then delete the
        leftovers of an interrupted capture (returned)."""
        old = self.settings
        new = json.loads(json.dumps(settings, sort_keys=True))
        if old is None:
            self.store.set_meta(self.meta_key, new)
        elif old != new:
            diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            raise StoreError(f"{self.store.run_dir}: capture {self.capture!r} was made with "
                             f"different settings ({', '.join(diff)}); use another --name")
        self.dir.mkdir(parents=True, exist_ok=True)
        write_text(self.dir / "capture.json", json.dumps(new, indent=1, sort_keys=True))
        return self.cleanup()

    def cleanup(self) -> list[str]:
        """Delete temporary and unindexed shard files (left by an interrupted capture)."""
        if not self.dir.exists():
            return []
        known = set(self.shards())
        removed = []
        for f in self.dir.iterdir():
            if f.name.endswith((".tmp", ".partial")) or (f.suffix == ".safetensors" and f.name not in known):
                f.unlink()
                removed.append(f.name)
        return removed

    def write_shard(self, rows: Sequence[CapturedSample], dtype: str = "fp16") -> str:
        """Write rows as one new shard and index it atomically; returns the shard name."""
        if not rows:
            raise ValueError("empty shard")
        import torch  # here, not at start-up
        tdtype = torch_dtype(dtype)
        done = self.done_ids()
        dup = [r.sample_id for r in rows if r.sample_id in done]
        if dup:
            raise StoreError(f"samples already captured in {self.capture!r}: {dup[:3]}")
        layers = self.settings["layers"] if self.settings else None
        tensors: dict[str, torch.Tensor] = {}
        index: list[tuple[Any, ...]] = []
        poolings = sorted({p for r in rows for p in r.vectors})
        number = max((shard_number(s) + 1 for s in self.shards()), default=0)
        name = shard_name(number)
        order: dict[str, str] = {}
        for p in poolings:
            have = [r for r in rows if p in r.vectors]
            order[ROWS_KEY + p] = json.dumps([r.sample_id for r in have])
            stack = np.stack([r.vectors[p] for r in have]).astype(np.float32)  # (rows, L, H)
            n_layers = stack.shape[1]
            ids = layers if layers is not None else list(range(n_layers))
            for k, layer in enumerate(ids):
                t = torch.from_numpy(np.ascontiguousarray(stack[:, k, :])).to(tdtype)
                tensors[f"{p}/{layer}"] = t
                shape = json.dumps([int(stack.shape[2])])
                index.extend((self.capture, r.sample_id, p, int(layer), shape, number, row)
                             for row, r in enumerate(have))
        self.dir.mkdir(parents=True, exist_ok=True)
        final = self.dir / name
        save_shard(final, tensors, {"capture": self.capture, "format": "evalaware-act-1", **order})
        self._index_shard(name, final, index, rows)
        return name

    def _index_shard(self, name: str, final: Path, index: list[tuple[Any, ...]],
                     rows: Sequence[CapturedSample]) -> None:
        size, digest = final.stat().st_size, sha256(final)
        with self.store.transaction():
            self.index.insert(index)
            self.sample_rows.insert([(self.capture, r.sample_id, name,
                                      json.dumps(r.info, sort_keys=True)) for r in rows])
            self.shard_rows.insert([(self.capture, name, len(rows), size, digest, time.time())])

    # --- integrity (probes.activations.integrity) ----------------------------------------
    def shard_problems(self, names: Iterable[str] | None = None) -> dict[str, str]:
        return integrity.shard_problems(self, names)

    def index_problems(self, skip: Iterable[str] = ()) -> dict[str, tuple[str, str]]:
        return integrity.index_problems(self, skip)

    def check(self) -> CorruptShard | None:
        return integrity.check(self)

    def repair(self) -> list[str]:
        return integrity.repair(self)

    # --- reading (probes.activations.reading) --------------------------------------------
    def load(self, pooling: str, layers: Iterable[int] | None = None,
             sample_ids: Sequence[str] | None = None) -> tuple[list[str], dict[int, np.ndarray]]:
        """(sample ids in run order, {layer: float32 array (n, hidden)}) for one pooling."""
        return reading.load(self, pooling, layers, sample_ids)

    def stats(self) -> dict[str, Any]:
        return reading.stats(self)
