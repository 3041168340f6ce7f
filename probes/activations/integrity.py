"""A capture's integrity: every shard file and every index row checked against what was recorded.

A shard file is checked by its size and sha256 against ``act_shards``
(:func:`probes.activations.shard_file.file_problem`); a mismatch, a missing file or an unreadable
one is a :class:`CorruptShard` naming the file and the capture. Every index row is checked
against its shard (the shard is one the capture recorded, the tensor exists, ``offset`` is inside
it and the shard's row record puts that sample there; for a shard without the record, no two
samples share a row) and a mismatch is a :class:`CorruptIndex`, so a tampered or stale
``act_index`` never reads another sample's vector. :func:`repair` drops what fails, so a resumed
capture captures those samples again.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from safetensors import SafetensorError, safe_open

from probes.activations.index import CaptureIndex
from probes.activations.shard_file import (NO_ORDER, NOT_RECORDED, CorruptShard, file_problem, row_order,
                                           row_problem, shard_name_of, shard_number)


def shard_problems(ix: CaptureIndex, names: Iterable[str] | None = None) -> dict[str, str]:
    """{shard name: what is wrong with its file} for the shards (default: all) whose file is
    missing, unreadable, or differs from the recorded size or sha256."""
    recorded = {n: (size, digest) for n, size, digest in
                ix.shard_rows.select(["shard", "bytes", "sha256"], ix.where)}
    out = {}
    for name in (recorded if names is None else names):
        why = (file_problem(ix.dir / name, *recorded[name]) if name in recorded
               else "not recorded in the index (act_shards)")
        if why:
            out[name] = why
    return out


def index_problems(ix: CaptureIndex, skip: Iterable[str] = ()) -> dict[str, tuple[str, str]]:
    """{sample id: (shard name, what is wrong)} for every sample with an ``act_index`` row that
    fails the row checks (shards named in `skip`, e.g. those whose file is bad, are not opened)."""
    recorded, skip = set(ix.shards()), set(skip)
    rows = ix.index.select(["sample_id", "pooling", "layer", "shard", "offset"], ix.where)
    shared = Counter((sh, p, l, off) for _, p, l, sh, off in rows)
    by_shard: dict[Any, list[tuple[Any, ...]]] = {}
    for r in rows:
        by_shard.setdefault(r[3], []).append(r)
    out: dict[str, tuple[str, str]] = {}
    for number, rs in by_shard.items():
        name = shard_name_of(number)
        if name in skip:
            continue
        if name not in recorded:
            for sid, *_ in rs:
                out.setdefault(sid, (name, NOT_RECORDED))
            continue
        try:
            with safe_open(str(ix.dir / name), framework="pt") as f:
                order = row_order(f)
                n_rows = {k: int(f.get_slice(k).get_shape()[0]) for k in f.keys()}
        except (SafetensorError, OSError, ValueError, IndexError) as e:
            for sid, *_ in rs:
                out.setdefault(sid, (name, f"the shard is unreadable ({e})"))
            continue
        for sid, pooling, layer, _, off in rs:
            why = row_problem(order.get(pooling, NO_ORDER), n_rows.get(f"{pooling}/{layer}"),
                              sid, off, shared[(number, pooling, layer, off)] > 1)
            if why:
                out.setdefault(sid, (name, f"{pooling}, layer {layer}: {why}"))
    return out


def check(ix: CaptureIndex) -> CorruptShard | None:
    """Every shard file and index row checked (nothing changed): None when all are sound, else
    one error naming each bad shard and each sample with a bad index row."""
    bad = shard_problems(ix)
    rows = index_problems(ix, skip=bad)
    if not bad and not rows:
        return None
    parts = [f"{n} ({why})" for n, why in bad.items()] + [
        f"{name}: the index row of sample {sid!r} is wrong ({why})" for sid, (name, why) in rows.items()]
    return CorruptShard(f"{ix.dir}: capture {ix.capture!r}: {len(bad)} corrupt shard(s), "
                        f"{len(rows)} sample(s) with a wrong index row: {'; '.join(parts)}; "
                        f"re-run {ix.again()} to capture their samples again")


def repair(ix: CaptureIndex) -> list[str]:
    """Check every shard; drop the index rows of each bad one and delete its file, so a resumed
    capture captures its samples again. Then check every index row (:func:`index_problems`) and
    drop every row of each sample with a bad one, so that sample is captured again (its old
    vectors stay in their shard, unindexed). Returns "name (what was wrong)" per shard."""
    bad = shard_problems(ix)
    for name in bad:
        with ix.store.transaction():
            ix.index.delete({**ix.where, "shard": shard_number(name)})
            ix.sample_rows.delete({**ix.where, "shard": name})
            ix.shard_rows.delete({**ix.where, "shard": name})
        # after the commit: a crash in between leaves an unindexed file, which cleanup removes
        (ix.dir / name).unlink(missing_ok=True)
    rows = index_problems(ix, skip=bad)
    with ix.store.transaction():
        for sid in rows:
            ix.index.delete({**ix.where, "sample_id": sid})
            ix.sample_rows.delete({**ix.where, "sample_id": sid})
    by_shard: dict[str, list[str]] = {}
    for sid, (name, why) in rows.items():
        by_shard.setdefault(name, []).append(f"sample {sid!r}: {why}")
    return [f"{n} ({why})" for n, why in bad.items()] + [
        f"{n} (index rows: {'; '.join(whys)})" for n, whys in by_shard.items()]
