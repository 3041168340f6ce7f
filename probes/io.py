"""Saved probes: ``probe.safetensors`` (weight, bias, scaler mean/scale as float32) and
``probe.json`` (everything else, and the tensor file's ``bytes`` and ``sha256``, checked on load
as a capture's shards are: :func:`probes.activations.shard_file.file_problem`). Never pickle: a
probe received from someone else can only carry numbers and JSON. Both files are written
atomically, never through a link planted in the directory.

score(x) = ((x - scaler_mean) / scaler_scale) . weight + bias; P(eval) = sigmoid(score).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors import SafetensorError

from harness.core.atomic import write_bytes, write_text
from harness.core.errors import EvalAwareError
from probes.activations.shard_file import file_problem

if TYPE_CHECKING:
    import torch

FORMAT = "evalaware-probe-1"
TENSORS = ("weight", "bias", "scaler_mean", "scaler_scale")


@dataclass
class LinearProbe:
    """A loaded probe: numbers plus metadata."""

    weight: np.ndarray
    bias: float
    scaler_mean: np.ndarray
    scaler_scale: np.ndarray
    meta: dict[str, Any]

    @property
    def layer(self) -> int:
        return int(self.meta["layer"])

    @property
    def pooling(self) -> str:
        return str(self.meta["pooling"])

    def decision(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.weight.shape[0]:
            raise EvalAwareError(f"probe expects vectors of size {self.weight.shape[0]}, got "
                                 f"shape {X.shape}")
        return ((X - self.scaler_mean) / self.scaler_scale) @ self.weight + self.bias

    def proba(self, X: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-self.decision(X)))


def save_probe(out_dir: str | Path, params: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """Write probe.safetensors + probe.json (with the tensor file's size and sha256) into
    out_dir; returns out_dir."""
    import torch
    from safetensors.torch import save

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: torch.from_numpy(np.asarray(params[k], dtype=np.float32).reshape(-1).copy())
               for k in TENSORS}
    data = save(tensors, metadata={"format": FORMAT})
    write_bytes(out / "probe.safetensors", data)
    write_text(out / "probe.json", json.dumps({**meta, "format": FORMAT, "bytes": len(data),
                                               "sha256": hashlib.sha256(data).hexdigest()},
                                              indent=1, sort_keys=True, default=_json_default))
    return out


def read_tensor_dir(path: str | Path, stem: str, fmt: str, what: str
                    ) -> tuple[Path, dict[str, Any], dict[str, torch.Tensor]]:
    """(directory, JSON metadata, tensors) of a `<stem>.json` + `<stem>.safetensors` pair in a
    directory (`path` may name either file); checks the metadata's format."""
    p = Path(path)
    d = p if p.is_dir() else p.parent
    meta_file, tensor_file = d / f"{stem}.json", d / f"{stem}.safetensors"
    for f in (meta_file, tensor_file):
        if not f.exists():
            raise EvalAwareError(f"{d}: not a {what} directory (missing {f.name})")
    try:
        meta = json.loads(meta_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise EvalAwareError(f"{meta_file}: invalid JSON ({e})") from e
    if not isinstance(meta, dict):
        raise EvalAwareError(f"{meta_file}: expected a JSON object, got {type(meta).__name__}")
    if meta.get("format") != fmt:
        raise EvalAwareError(f"{meta_file}: field 'format': {meta.get('format')!r}, expected {fmt!r}")
    from safetensors.torch import load_file  # imports torch
    try:
        tensors = load_file(str(tensor_file))
    except (SafetensorError, ValueError) as e:  # truncated, overwritten, not safetensors
        raise EvalAwareError(f"{tensor_file}: not a readable safetensors file ({e})") from e
    return d, meta, tensors


def load_probe(path: str | Path) -> LinearProbe:
    """Load from a probe directory (or either of its two files); checks what scoring relies on:
    an integer `layer` and a `pooling` name in the JSON, one bias, equal-length vectors, finite
    numbers and positive scales, and then that the tensor file is the one saved (its size and
    sha256 as recorded in the JSON)."""
    d, meta, t = read_tensor_dir(path, "probe", FORMAT, "probe")
    meta_file, tensor_file = d / "probe.json", d / "probe.safetensors"
    layer = meta.get("layer")
    if isinstance(layer, bool) or not isinstance(layer, int) or layer < 0:
        raise EvalAwareError(f"{meta_file}: field 'layer': "
                             + ("missing" if layer is None else f"{layer!r} is not a layer id")
                             + " (a non-negative integer)")
    if not isinstance(meta.get("pooling"), str) or not meta["pooling"]:
        raise EvalAwareError(f"{meta_file}: field 'pooling': "
                             + ("missing" if meta.get("pooling") is None
                                else f"{meta['pooling']!r} is not a pooling name"))
    missing = [k for k in TENSORS if k not in t]
    if missing:
        raise EvalAwareError(f"{tensor_file}: missing tensor(s) {', '.join(missing)}")
    a = {k: t[k].double().numpy() for k in TENSORS}
    w, mean, scale = a["weight"], a["scaler_mean"], a["scaler_scale"]
    if w.ndim != 1 or not w.size or not (w.shape == mean.shape == scale.shape) or a["bias"].size != 1:
        raise EvalAwareError(f"{tensor_file}: inconsistent tensor shapes (" + ", ".join(
            f"{k} {list(v.shape)}" for k, v in a.items()) + "); expected equal vectors and one bias")
    for k, v in a.items():
        bad = np.flatnonzero(~np.isfinite(v))
        if bad.size:
            raise EvalAwareError(f"{tensor_file}: tensor {k!r}: {bad.size} non-finite value(s) "
                                 f"(first at index {bad[0]}: {v[bad[0]]})")
    bad = np.flatnonzero(scale <= 0)
    if bad.size:
        raise EvalAwareError(f"{tensor_file}: tensor 'scaler_scale': {bad.size} value(s) <= 0 "
                             f"(first at index {bad[0]}: {scale[bad[0]]}); a scale divides")
    check_checksum(meta_file, tensor_file, meta)
    return LinearProbe(w, float(a["bias"][0]), mean, scale, meta)


def check_checksum(meta_file: Path, tensor_file: Path, meta: dict[str, Any]) -> None:
    """Refuse (one line) a tensor file that is not the one saved: its size and sha256 against
    those `probe.json` records (a probe saved before they were recorded has none: train it again)."""
    size, digest = meta.get("bytes"), meta.get("sha256")
    if not isinstance(digest, str) or isinstance(size, bool) or not isinstance(size, int):
        field = "sha256" if not isinstance(digest, str) else "bytes"
        raise EvalAwareError(f"{meta_file}: field {field!r}: "
                             + ("missing" if meta.get(field) is None else f"{meta.get(field)!r} is not valid")
                             + " (the tensor file's checksum; a probe saved before probes were checksummed: "
                               "train it again with `probes train`)")
    why = file_problem(tensor_file, size, digest)
    if why:
        raise EvalAwareError(f"{tensor_file}: not the tensors this probe saved: {why}; the sha256 and "
                             f"size are recorded in {meta_file.name}")


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
