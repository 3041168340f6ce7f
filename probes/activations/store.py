"""Pooled activations on disk: safetensors shards plus an index in the run's SQLite store.

Layout: ``RUN/activations/<capture>/shard-00000.safetensors`` holds one tensor per
(pooling, layer), named ``"<pooling>/<layer>"``, of shape (rows, hidden) in fp16 or bf16; row
``offset`` of that tensor belongs to the sample the index names.

Tables (in ``RUN/store.sqlite``):
- ``act_index``: (capture, sample_id, pooling, layer, shape, shard, offset), one row per vector;
  ``shard`` is the shard number n of ``shard-<n>.safetensors`` (an integer keeps the index small).
- ``act_samples``: (capture, sample_id, shard, info) marks a sample as captured (a pooling may be
  absent for it, e.g. no answer) with per-sample token counts.
- ``act_shards``: (capture, shard, n_samples, bytes, sha256).
Capture settings live in the store's ``meta`` under ``activations/<capture>``.

Crash safety: a shard is written to a temporary name, fsynced, renamed into place, and only then
indexed in one transaction. A crash before the transaction leaves an unindexed file, which the
next open deletes before the samples are captured again, so a resumed capture never duplicates a
shard or a sample.

Integrity: every read of a shard first checks its size and sha256 against ``act_shards`` (a file
is hashed once per process while its size, mtime and inode stay the same) and a mismatch, a
missing file or an unreadable one is a :class:`CorruptShard` naming the file and the capture. A
resumed capture checks every shard and drops a bad one's rows (:meth:`ActivationStore.repair`),
so its samples are captured again.

Index rows: a shard records, in its safetensors metadata (``rows/<pooling>``: a JSON list of sample
ids), which sample each row of that pooling's tensors holds; the metadata is part of the bytes
the sha256 covers. Every read checks each index row it uses against it (the shard is one the
capture recorded, the tensor exists, ``offset`` is inside it and the row there holds that
sample) and a mismatch is a :class:`CorruptIndex` naming the capture, the shard and the sample,
so a tampered or stale ``act_index`` (offsets out of range, swapped or shared between samples,
a row pointing at another shard) never reads another sample's vector. A shard written before
this metadata (format ``evalaware-act-1`` without ``rows/``) still reads, with the checks that
need no record: the shard is known, the offset is in range and no two samples share a row (two
swapped offsets there cannot be told apart). A resumed capture drops the samples whose rows fail
these checks and captures them again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from harness.core.atomic import write_text
from harness.core.errors import StoreError
from harness.runlog import RunLog, TableSpec

DTYPES = {"fp16": torch.float16, "float16": torch.float16, "bf16": torch.bfloat16,
          "bfloat16": torch.bfloat16, "fp32": torch.float32, "float32": torch.float32}
CANONICAL_DTYPE = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}

ACT_INDEX = TableSpec("act_index", (
    ("capture", "TEXT"), ("sample_id", "TEXT"), ("pooling", "TEXT"), ("layer", "INTEGER"),
    ("shape", "TEXT"), ("shard", "INTEGER"), ("offset", "INTEGER")),
    ("capture", "pooling", "layer", "sample_id"), without_rowid=True)
ACT_SAMPLES = TableSpec("act_samples", (("capture", "TEXT"), ("sample_id", "TEXT"), ("shard", "TEXT"),
                                        ("info", "TEXT")), ("capture", "sample_id"))
ACT_SHARDS = TableSpec("act_shards", (
    ("capture", "TEXT"), ("shard", "TEXT"), ("n_samples", "INTEGER"), ("bytes", "INTEGER"),
    ("sha256", "TEXT"), ("created", "REAL")), ("capture", "shard"))


@dataclass
class CapturedSample:
    """One sample's pooled vectors: {pooling: array (n_layers, hidden)} (absent poolings omitted)."""

    sample_id: str
    vectors: dict[str, np.ndarray]
    info: dict[str, Any]


def shard_name(number: int) -> str:
    return f"shard-{number:05d}.safetensors"


def shard_number(name: str) -> int:
    return int(name.split("-")[1].split(".")[0])


def _shard_name_of(number: Any) -> str:
    """The file name an index row's ``shard`` points at (a value that is no shard number, in a
    tampered index, names no recorded shard)."""
    return shard_name(number) if isinstance(number, int) else f"shard {number!r}"


_NOT_RECORDED = "it points at a shard the capture did not record"
_NO_ORDER: list[str] | None = None  # a shard written before it recorded its rows' samples


def _row_order(f: Any) -> dict[str, list[str] | None]:
    """{pooling: sample id of each row} from an open shard's metadata; a record that is not a
    list of ids reads as an empty one (every row then fails the check)."""
    out: dict[str, list[str] | None] = {}
    for k, v in (f.metadata() or {}).items():
        if k.startswith(ROWS_KEY):
            try:
                ids = json.loads(v)
            except ValueError:
                ids = []
            out[k[len(ROWS_KEY):]] = ids if isinstance(ids, list) else []
    return out


def _row_problem(order: list[str] | None, n_rows: int | None, sample_id: str, offset: Any,
                 shared: bool) -> str | None:
    """What is wrong with one index row (None: nothing): its tensor is missing, its offset is
    outside it, the shard's record says another sample is there, or (a shard without the
    record) another index row points at the same row."""
    if n_rows is None:
        return "the shard has no such tensor"
    if not isinstance(offset, int) or not 0 <= offset < n_rows:
        return f"offset {offset!r} is outside the shard's {n_rows} rows"
    if order is not None:
        there = order[offset] if offset < len(order) else None
        if there != sample_id:
            return f"offset {offset} holds sample {there!r}" if there is not None else \
                f"offset {offset} holds no recorded sample"
    elif shared:
        return f"offset {offset} is indexed for another sample too"
    return None


class CorruptShard(StoreError):
    """A shard file is missing, unreadable, or not the bytes its index recorded."""


class CorruptIndex(CorruptShard):
    """An ``act_index`` row does not point at its sample's row of a shard."""


ROWS_KEY = "rows/"  # shard metadata: "rows/<pooling>" -> JSON list of the sample id of each row


_VERIFIED: set[tuple[str, int, int, int, str]] = set()
"""(path, size, mtime_ns, inode, sha256) of the shard files already hashed by this process."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


class ActivationStore:
    """Pooled activations of one capture (a name) inside a run directory."""

    def __init__(self, store: RunLog, capture: str = "default") -> None:
        if not capture or "/" in capture or capture.startswith("."):
            raise StoreError(f"bad capture name {capture!r}")
        self.store, self.capture = store, capture
        self.index, self.sample_rows = store.table(ACT_INDEX), store.table(ACT_SAMPLES)
        self.shard_rows = store.table(ACT_SHARDS)
        self.where = {"capture": capture}
        self.dir = store.run_dir / "activations" / capture
        self.meta_key = f"activations/{capture}"

    # --- settings ------------------------------------------------------------------------
    @property
    def settings(self) -> dict[str, Any] | None:
        return self.store.get_meta(self.meta_key)

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
            if f.name.endswith(".tmp") or (f.suffix == ".safetensors" and f.name not in known):
                f.unlink()
                removed.append(f.name)
        return removed

    # --- writing -------------------------------------------------------------------------
    def shards(self) -> list[str]:
        return [r[0] for r in self.shard_rows.select(["shard"], self.where, order_by=["shard"])]

    # --- integrity -----------------------------------------------------------------------
    def shard_problems(self, names: Iterable[str] | None = None) -> dict[str, str]:
        """{shard name: what is wrong with its file} for the shards (default: all) whose file is
        missing, unreadable, or differs from the recorded size or sha256."""
        recorded = {n: (size, digest) for n, size, digest in
                    self.shard_rows.select(["shard", "bytes", "sha256"], self.where)}
        out = {}
        for name in (recorded if names is None else names):
            why = (self._file_problem(name, *recorded[name]) if name in recorded
                   else "not recorded in the index (act_shards)")
            if why:
                out[name] = why
        return out

    def _file_problem(self, name: str, size: int, digest: str) -> str | None:
        path = self.dir / name
        try:
            st = path.stat()
            if st.st_size != size:
                return f"{st.st_size} bytes, {size} recorded (truncated or overwritten)"
            key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino, digest)
            if key in _VERIFIED:
                return None
            got = _sha256(path)
        except FileNotFoundError:
            return "the file is missing"
        except OSError as e:
            return f"unreadable ({e.strerror or e})"
        if got != digest:
            return f"sha256 {got[:12]}..., {digest[:12]}... recorded (the bytes changed)"
        _VERIFIED.add(key)
        return None

    def _again(self) -> str:
        run = self.store.run_dir
        return f"`evalaware activations capture --run {run}" + (
            f" --name {self.capture}`" if self.capture != "default" else "`")

    def corrupt(self, name: str, why: str) -> CorruptShard:
        """The one-line error for a bad shard file: which file, which capture, what to do."""
        return CorruptShard(f"{self.dir / name}: shard of capture {self.capture!r} is corrupt: "
                            f"{why}; re-run {self._again()} to capture its samples again")

    def bad_row(self, name: str, sample_id: str, why: str) -> CorruptIndex:
        """The one-line error for an index row that does not point at its sample's vector."""
        return CorruptIndex(f"{self.dir / name}: capture {self.capture!r}: the index row of sample "
                            f"{sample_id!r} is wrong ({why}); re-run {self._again()} to capture "
                            f"it again")

    def index_problems(self, skip: Iterable[str] = ()) -> dict[str, tuple[str, str]]:
        """{sample id: (shard name, what is wrong)} for every sample with an ``act_index`` row
        that fails the row checks of the module docstring (shards named in `skip`, e.g. those
        whose file is bad, are not opened)."""
        recorded, skip = set(self.shards()), set(skip)
        rows = self.index.select(["sample_id", "pooling", "layer", "shard", "offset"], self.where)
        shared = Counter((sh, p, l, off) for _, p, l, sh, off in rows)
        by_shard: dict[Any, list[tuple[Any, ...]]] = {}
        for r in rows:
            by_shard.setdefault(r[3], []).append(r)
        out: dict[str, tuple[str, str]] = {}
        for number, rs in by_shard.items():
            name = _shard_name_of(number)
            if name in skip:
                continue
            if name not in recorded:
                for sid, *_ in rs:
                    out.setdefault(sid, (name, _NOT_RECORDED))
                continue
            try:
                with safe_open(str(self.dir / name), framework="pt") as f:
                    order = _row_order(f)
                    n_rows = {k: int(f.get_slice(k).get_shape()[0]) for k in f.keys()}
            except (SafetensorError, OSError, ValueError, IndexError) as e:
                for sid, *_ in rs:
                    out.setdefault(sid, (name, f"the shard is unreadable ({e})"))
                continue
            for sid, pooling, layer, _, off in rs:
                why = _row_problem(order.get(pooling, _NO_ORDER), n_rows.get(f"{pooling}/{layer}"),
                                   sid, off, shared[(number, pooling, layer, off)] > 1)
                if why:
                    out.setdefault(sid, (name, f"{pooling}, layer {layer}: {why}"))
        return out

    def check(self) -> CorruptShard | None:
        """Every shard file and index row checked (nothing changed): None when all are sound,
        else one error naming each bad shard and each sample with a bad index row."""
        bad = self.shard_problems()
        rows = self.index_problems(skip=bad)
        if not bad and not rows:
            return None
        parts = [f"{n} ({why})" for n, why in bad.items()] + [
            f"{name}: the index row of sample {sid!r} is wrong ({why})" for sid, (name, why) in rows.items()]
        return CorruptShard(f"{self.dir}: capture {self.capture!r}: {len(bad)} corrupt shard(s), "
                            f"{len(rows)} sample(s) with a wrong index row: {'; '.join(parts)}; "
                            f"re-run {self._again()} to capture their samples again")

    def repair(self) -> list[str]:
        """Check every shard; drop the index rows of each bad one and delete its file, so a
        resumed capture captures its samples again. Then check every index row
        (:meth:`index_problems`) and drop every row of each sample with a bad one, so that sample
        is captured again (its old vectors stay in their shard, unindexed). Returns "name (what
        was wrong)" per shard."""
        bad = self.shard_problems()
        for name in bad:
            with self.store.transaction():
                self.index.delete({**self.where, "shard": shard_number(name)})
                self.sample_rows.delete({**self.where, "shard": name})
                self.shard_rows.delete({**self.where, "shard": name})
            # after the commit: a crash in between leaves an unindexed file, which cleanup removes
            (self.dir / name).unlink(missing_ok=True)
        rows = self.index_problems(skip=bad)
        with self.store.transaction():
            for sid in rows:
                self.index.delete({**self.where, "sample_id": sid})
                self.sample_rows.delete({**self.where, "sample_id": sid})
        by_shard: dict[str, list[str]] = {}
        for sid, (name, why) in rows.items():
            by_shard.setdefault(name, []).append(f"sample {sid!r}: {why}")
        return [f"{n} ({why})" for n, why in bad.items()] + [
            f"{n} (index rows: {'; '.join(whys)})" for n, whys in by_shard.items()]

    # --- writing (continued) -------------------------------------------------------------
    def done_ids(self) -> set[str]:
        return {r[0] for r in self.sample_rows.select(["sample_id"], self.where)}

    def _next_shard(self) -> int:
        return max((shard_number(s) + 1 for s in self.shards()), default=0)

    def write_shard(self, rows: Sequence[CapturedSample], dtype: str = "fp16") -> str:
        """Write rows as one new shard and index it atomically; returns the shard name."""
        if not rows:
            raise ValueError("empty shard")
        tdtype = DTYPES[dtype]
        done = self.done_ids()
        dup = [r.sample_id for r in rows if r.sample_id in done]
        if dup:
            raise StoreError(f"samples already captured in {self.capture!r}: {dup[:3]}")
        layers = self.settings["layers"] if self.settings else None
        tensors: dict[str, torch.Tensor] = {}
        index: list[tuple[Any, ...]] = []
        poolings = sorted({p for r in rows for p in r.vectors})
        number = self._next_shard()
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
        tmp = self.dir / (name + ".tmp")
        save_file(tensors, str(tmp), metadata={"capture": self.capture, "format": "evalaware-act-1",
                                               **order})
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        self._index_shard(name, final, index, rows)
        return name

    def _index_shard(self, name: str, final: Path, index: list[tuple[Any, ...]],
                     rows: Sequence[CapturedSample]) -> None:
        size, digest = final.stat().st_size, _sha256(final)
        with self.store.transaction():
            self.index.insert(index)
            self.sample_rows.insert([(self.capture, r.sample_id, name,
                                      json.dumps(r.info, sort_keys=True)) for r in rows])
            self.shard_rows.insert([(self.capture, name, len(rows), size, digest, time.time())])

    # --- reading -------------------------------------------------------------------------
    def poolings(self) -> list[str]:
        return [r[0] for r in self.index.select(["pooling"], self.where, order_by=["pooling"],
                                                distinct=True)]

    def layers(self) -> list[int]:
        s = self.settings
        return list(s["layers"]) if s else []

    def sample_info(self) -> dict[str, dict[str, Any]]:
        return {sid: json.loads(info)
                for sid, info in self.sample_rows.select(["sample_id", "info"], self.where)}

    def load(self, pooling: str, layers: Iterable[int] | None = None,
             sample_ids: Sequence[str] | None = None) -> tuple[list[str], dict[int, np.ndarray]]:
        """(sample ids in run order, {layer: float32 array (n, hidden)}) for one pooling.

        Only samples that have the pooling at every requested layer are returned."""
        layers = list(self.layers() if layers is None else layers)
        missing = sorted(set(layers) - set(self.layers()))
        if missing:
            raise StoreError(f"capture {self.capture!r} has no layer(s) {missing}; captured: "
                             f"{self.layers()}")
        rows = self.index.select(["sample_id", "layer", "shard", "offset"],
                                 {**self.where, "pooling": pooling})
        position = self.store.sample_positions()  # run order; unknown ids first, then by id
        rows.sort(key=lambda r: (position.get(r[0], -1), r[0]))
        if not rows:
            raise StoreError(f"capture {self.capture!r} has no vectors for pooling {pooling!r}; "
                             f"available: {', '.join(self.poolings()) or 'none'}")
        want = set(layers)
        loc: dict[str, dict[int, tuple[int, int]]] = {}
        for sid, layer, shard, off in rows:
            if layer in want:
                loc.setdefault(sid, {})[layer] = (shard, off)
        ids = [sid for sid in loc if len(loc[sid]) == len(want)]  # run order (query order)
        if sample_ids is not None:
            keep = set(sample_ids)
            ids = [s for s in ids if s in keep]
        pos = {sid: i for i, sid in enumerate(ids)}
        shared = Counter((sh, l, off) for _, l, sh, off in rows)
        by_shard: dict[Any, dict[int, list[tuple[str, Any]]]] = {}  # shard -> layer -> (sample, offset)
        for sid in ids:
            for layer in layers:
                shard, off = loc[sid][layer]
                by_shard.setdefault(shard, {}).setdefault(layer, []).append((sid, off))
        recorded = set(self.shards())
        for shard, per_layer in by_shard.items():
            if _shard_name_of(shard) not in recorded:
                raise self.bad_row(_shard_name_of(shard), next(iter(per_layer.values()))[0][0],
                                   _NOT_RECORDED)
        names = [shard_name(n) for n in by_shard]
        bad = self.shard_problems(names)
        if bad:
            raise self.corrupt(*next(iter(bad.items())))
        out: dict[int, np.ndarray] = {}
        for name, (shard, per_layer) in zip(names, by_shard.items()):
            try:
                with safe_open(str(self.dir / name), framework="pt") as f:
                    order, keys = _row_order(f).get(pooling, _NO_ORDER), set(f.keys())
                    for layer, here in per_layer.items():
                        key = f"{pooling}/{layer}"
                        t = f.get_tensor(key).float().numpy() if key in keys else None
                        for sid, off in here:
                            why = _row_problem(order, None if t is None else t.shape[0], sid, off,
                                               shared[(shard, layer, off)] > 1)
                            if why:
                                raise self.bad_row(name, sid, f"{pooling}, layer {layer}: {why}")
                        assert t is not None
                        if layer not in out:
                            out[layer] = np.zeros((len(ids), t.shape[1]), dtype=np.float32)
                        out[layer][[pos[s] for s, _ in here]] = t[[off for _, off in here]]
            except (SafetensorError, OSError, IndexError, ValueError) as e:
                raise self.corrupt(name, f"unreadable ({e})") from e
        return ids, out

    def stats(self) -> dict[str, Any]:
        """Sizes: shard bytes per sample vs the theoretical n_layers x hidden x bytes per vector."""
        s = self.settings or {}
        n_samples = self.sample_rows.count(self.where)  # a recaptured sample counts once
        n_bytes = self.shard_rows.total("bytes", self.where)
        keys = self.index.select(["sample_id", "pooling", "shape"], self.where)
        n_vectors = len(keys)
        index_bytes = sum(len(self.capture) + len(a) + len(b) + len(c) + 12 for a, b, c in keys)
        index_db = self.index.page_bytes()  # actual pages of the table (all captures)
        itemsize = torch.tensor([], dtype=DTYPES[s.get("dtype", "fp16")]).element_size()
        hidden = int(s.get("hidden_size", 0))
        payload = n_vectors * hidden * itemsize
        per_pooling = self.index.count_by("pooling", self.where)
        n_layers = len(s.get("layers", []))
        return {
            "samples": int(n_samples), "shards": len(self.shards()), "shard_bytes": int(n_bytes),
            "vectors": int(n_vectors), "payload_bytes": int(payload),
            "bytes_per_sample": n_bytes / n_samples if n_samples else 0.0,
            "theoretical_bytes_per_sample": payload / n_samples if n_samples else 0.0,
            "theoretical_per_pooling": n_layers * hidden * itemsize,
            "overhead": (n_bytes - payload) / payload if payload else 0.0,
            "index_bytes_approx": int(index_bytes), "index_table_bytes": index_db,
            "vectors_per_pooling": {p: c // max(n_layers, 1) for p, c in per_pooling.items()},
        }
