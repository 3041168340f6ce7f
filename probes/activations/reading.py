"""Reading a capture: a pooling's vectors as arrays in run order, and the capture's sizes.

Every read checks the shards it opens (:func:`probes.activations.integrity.shard_problems`) and
every index row it uses against its shard's row record before it hands out a vector.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Sequence

import numpy as np
from safetensors import SafetensorError, safe_open

from harness.core.errors import StoreError
from probes.activations.index import CaptureIndex
from probes.activations.integrity import shard_problems
from probes.activations.shard_file import (DTYPES, ITEMSIZE, NO_ORDER, NOT_RECORDED, row_order, row_problem, shard_name,
                                           shard_name_of)


def load(ix: CaptureIndex, pooling: str, layers: Iterable[int] | None = None,
         sample_ids: Sequence[str] | None = None) -> tuple[list[str], dict[int, np.ndarray]]:
    """(sample ids in run order, {layer: float32 array (n, hidden)}) for one pooling.

    Only samples that have the pooling at every requested layer are returned."""
    layers = list(ix.layers() if layers is None else layers)
    missing = sorted(set(layers) - set(ix.layers()))
    if missing:
        raise StoreError(f"capture {ix.capture!r} has no layer(s) {missing}; captured: "
                         f"{ix.layers()}")
    rows = ix.index.select(["sample_id", "layer", "shard", "offset"], {**ix.where, "pooling": pooling})
    position = ix.store.sample_positions()  # run order; unknown ids first, then by id
    rows.sort(key=lambda r: (position.get(r[0], -1), r[0]))
    if not rows:
        raise StoreError(f"capture {ix.capture!r} has no vectors for pooling {pooling!r}; "
                         f"available: {', '.join(ix.poolings()) or 'none'}")
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
    recorded = set(ix.shards())
    for shard, per_layer in by_shard.items():
        if shard_name_of(shard) not in recorded:
            raise ix.bad_row(shard_name_of(shard), next(iter(per_layer.values()))[0][0], NOT_RECORDED)
    names = [shard_name(n) for n in by_shard]
    bad = shard_problems(ix, names)
    if bad:
        raise ix.corrupt(*next(iter(bad.items())))
    out: dict[int, np.ndarray] = {}
    for name, (shard, per_layer) in zip(names, by_shard.items()):
        try:
            with safe_open(str(ix.dir / name), framework="pt") as f:
                order, keys = row_order(f).get(pooling, NO_ORDER), set(f.keys())
                for layer, here in per_layer.items():
                    key = f"{pooling}/{layer}"
                    t = f.get_tensor(key).float().numpy() if key in keys else None
                    for sid, off in here:
                        why = row_problem(order, None if t is None else t.shape[0], sid, off,
                                          shared[(shard, layer, off)] > 1)
                        if why:
                            raise ix.bad_row(name, sid, f"{pooling}, layer {layer}: {why}")
                    assert t is not None
                    if layer not in out:
                        out[layer] = np.zeros((len(ids), t.shape[1]), dtype=np.float32)
                    out[layer][[pos[s] for s, _ in here]] = t[[off for _, off in here]]
        except (SafetensorError, OSError, IndexError, ValueError) as e:
            raise ix.corrupt(name, f"unreadable ({e})") from e
    return ids, out


def stats(ix: CaptureIndex) -> dict[str, Any]:
    """Sizes: shard bytes per sample vs the theoretical n_layers x hidden x bytes per vector."""
    s = ix.settings or {}
    n_samples = ix.sample_rows.count(ix.where)  # a recaptured sample counts once
    n_bytes = ix.shard_rows.total("bytes", ix.where)
    keys = ix.index.select(["sample_id", "pooling", "shape"], ix.where)
    n_vectors = len(keys)
    index_bytes = sum(len(ix.capture) + len(a) + len(b) + len(c) + 12 for a, b, c in keys)
    index_db = ix.index.page_bytes()  # actual pages of the table (all captures)
    itemsize = ITEMSIZE[DTYPES[s.get("dtype", "fp16")]]
    hidden = int(s.get("hidden_size", 0))
    payload = n_vectors * hidden * itemsize
    per_pooling = ix.index.count_by("pooling", ix.where)
    n_layers = len(s.get("layers", []))
    return {
        "samples": int(n_samples), "shards": len(ix.shards()), "shard_bytes": int(n_bytes),
        "vectors": int(n_vectors), "payload_bytes": int(payload),
        "bytes_per_sample": n_bytes / n_samples if n_samples else 0.0,
        "theoretical_bytes_per_sample": payload / n_samples if n_samples else 0.0,
        "theoretical_per_pooling": n_layers * hidden * itemsize,
        "overhead": (n_bytes - payload) / payload if payload else 0.0,
        "index_bytes_approx": int(index_bytes), "index_table_bytes": index_db,
        "vectors_per_pooling": {p: c // max(n_layers, 1) for p, c in per_pooling.items()},
    }
