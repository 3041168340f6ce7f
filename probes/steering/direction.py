"""Steering vectors: the per-layer eval-minus-deploy direction, saved, loaded, scaled.

A vector directory holds ``vector.safetensors`` (``direction/<layer>``: unit direction, float32;
``raw/<layer>``: the unnormalised difference) and ``vector.json`` (layers, pooling, source,
model weights hash, per-layer mean residual norm, train and held-out sample ids, the split, the
held-out AUROC of the projection per layer). Nothing is pickled.

Sources:
- ``diffmean`` (default): difference of class means (eval minus deploy) of one pooling of a
  run's captured activations, computed on a *training* split only. The split holds out whole
  categories (StratifiedGroupKFold, `holdout_folds` folds, the first fold held out), so
  ``steer run`` can be evaluated on samples, and categories, the vector never saw.
- ``probe``: the weight vector of a saved probe mapped back to activation space
  (weight / scaler scale); its training samples are the probe's.
- ``pairs``: mean of (eval - deploy) over explicit contrastive prompt pairs, captured on the fly
  at the last prompt token.

Scale: ``steer run`` adds ``alpha * unit direction * norm[layer]``, where ``norm[layer]`` is the
mean L2 norm of one residual-stream position at that layer, measured at the last prompt token
(``last_prompt`` pooling) over the training samples. The random control is a Gaussian direction
per layer (fixed seed), unit-normalised and scaled the same way; so are the unrelated-contrast
controls (``contrast/<name>/<layer>`` in the same file, :mod:`probes.steering.contrasts`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.core.atomic import write_bytes, write_text
from harness.core.errors import EvalAwareError
from harness.stats.metrics import roc_auc

from probes.io import read_tensor_dir

FORMAT = "evalaware-steering-vector-1"
CONTROLS = ("vector", "random", "contrast:<name>")
CONTRAST = "contrast:"
NORM_POOLING = "last_prompt"


@dataclass
class SteeringVector:
    """Unit directions and residual norms per layer id, plus provenance (`meta`)."""

    directions: dict[int, np.ndarray]
    raw: dict[int, np.ndarray]
    norms: dict[int, float]
    meta: dict[str, Any]
    path: Path | None = None
    #: Unrelated-contrast controls: {name: {layer: unit direction}} (:mod:`probes.steering.contrasts`).
    contrasts: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)

    @property
    def layers(self) -> list[int]:
        return sorted(self.directions)

    @property
    def sha256(self) -> str:
        """Hash of the directions, norms and contrast directions (not of file bytes, which carry
        metadata; a vector without contrasts hashes as before they existed)."""
        h = hashlib.sha256()
        for l in self.layers:
            h.update(f"|{l}|{self.norms[l]!r}|".encode())
            h.update(np.ascontiguousarray(self.directions[l], dtype=np.float32).tobytes())
        for name in sorted(self.contrasts):
            for l in sorted(self.contrasts[name]):
                h.update(f"|{CONTRAST}{name}|{l}|".encode())
                h.update(np.ascontiguousarray(self.contrasts[name][l], dtype=np.float32).tobytes())
        return h.hexdigest()

    def best_layer(self) -> int:
        """The layer whose projection separates best on the inner split of the training
        categories (``selection_auroc``), so the held-out samples the vector is judged and
        steered on played no part in the choice; else the middle layer. (A vector saved before
        this chose on its held-out AUROC, an optimistic choice: such a vector says so in
        ``layer_selection``.)"""
        au = {int(k): v for k, v in (self.meta.get("selection_auroc") or {}).items() if v is not None}
        if not au and "selection_auroc" not in self.meta and self.meta.get("heldout_auroc"):
            au = {int(k): v for k, v in self.meta["heldout_auroc"].items() if v is not None}
            self.meta.setdefault("layer_selection", "held-out AUROC (an older vector: optimistic, "
                                                    "chosen on the samples it is judged on)")
        if au:
            return max(au, key=lambda l: (abs(au[l] - 0.5), -l))
        self.meta.setdefault("layer_selection", "the middle layer (no selection AUROC)")
        return self.layers[len(self.layers) // 2]

    def unit(self, layer: int, control: str = "vector", seed: int = 0) -> np.ndarray:
        """The unit direction at `layer`, the random control's (seeded per layer), or contrast
        `name`'s (``control="contrast:<name>"``): every control is scaled as the vector is."""
        if layer not in self.directions:
            raise EvalAwareError(f"the vector has no layer {layer}; it has {self.layers}")
        if control == "vector":
            return self.directions[layer]
        if control.startswith(CONTRAST):
            name = control[len(CONTRAST):]
            if name not in self.contrasts:
                raise EvalAwareError(f"the vector has no contrast {name!r}; it has "
                                     f"{', '.join(sorted(self.contrasts)) or 'none'} (`steer build` builds them)")
            return self.contrasts[name][layer]
        if control == "random":
            rng = np.random.default_rng([seed, layer])
            r = rng.standard_normal(self.directions[layer].shape[0])
            return (r / np.linalg.norm(r)).astype(np.float32)
        raise EvalAwareError(f"unknown control {control!r}; use {', '.join(CONTROLS)}")

    def additions(self, layers: Sequence[int], alpha: float, control: str = "vector",
                  seed: int = 0) -> dict[int, np.ndarray]:
        """{layer: alpha * unit * norm[layer]} (float32)."""
        return {int(l): (alpha * self.norms[l] * self.unit(l, control, seed)).astype(np.float32)
                for l in layers}

    def save(self, out: str | Path) -> Path:
        import torch
        from safetensors.torch import save

        d = Path(out)
        d.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for l in self.layers:
            tensors[f"direction/{l}"] = torch.from_numpy(np.ascontiguousarray(self.directions[l],
                                                                              dtype=np.float32))
            tensors[f"raw/{l}"] = torch.from_numpy(np.ascontiguousarray(self.raw[l], dtype=np.float32))
            for name, dirs in self.contrasts.items():
                tensors[f"contrast/{name}/{l}"] = torch.from_numpy(np.ascontiguousarray(dirs[l], dtype=np.float32))
        write_bytes(d / "vector.safetensors", save(tensors, metadata={"format": FORMAT}))
        meta = {**self.meta, "format": FORMAT, "layers": self.layers,
                "norms": {str(l): self.norms[l] for l in self.layers}, "sha256": self.sha256}
        write_text(d / "vector.json", json.dumps(meta, indent=1, sort_keys=True))
        self.path = d
        return d


def load_vector(path: str | Path) -> SteeringVector:
    """Load a vector directory (or either of its files), refusing with one line naming the file:
    a ``layers`` field that is not a non-empty list of layer ids; a layer without its
    ``direction/<layer>`` (and ``raw/<layer>``) tensor or its norm; a non-finite value in any
    tensor; a norm that is not a finite number > 0; a direction whose length is not 1; and a
    ``sha256`` (of the directions and norms, recorded by every :meth:`SteeringVector.save`) that
    is missing or does not match, i.e. an edited or hand-made vector."""
    d, meta, t = read_tensor_dir(path, "vector", FORMAT, "steering vector")
    meta_file, tensor_file = d / "vector.json", d / "vector.safetensors"
    layers = meta.get("layers")
    if not isinstance(layers, list) or not layers or any(
            isinstance(l, bool) or not isinstance(l, int) or l < 0 for l in layers):
        raise EvalAwareError(f"{meta_file}: field 'layers': {layers!r} is not a non-empty list of "
                             f"layer ids")
    missing = [l for l in layers if f"direction/{l}" not in t or f"raw/{l}" not in t]
    if missing:
        raise EvalAwareError(f"{tensor_file}: no direction for layer(s) {missing}")
    for k, v in t.items():
        a = v.double().numpy().reshape(-1)
        bad = np.flatnonzero(~np.isfinite(a))
        if bad.size:
            raise EvalAwareError(f"{tensor_file}: tensor {k!r}: {bad.size} non-finite value(s) "
                                 f"(first at index {bad[0]}: {a[bad[0]]})")
    norms = meta.get("norms")
    norms = norms if isinstance(norms, dict) else {}
    for l in layers:
        n = norms.get(str(l))
        if isinstance(n, bool) or not isinstance(n, (int, float)) or not np.isfinite(n) or n <= 0:
            raise EvalAwareError(f"{meta_file}: field 'norms' of layer {l}: "
                                 + ("missing" if n is None else f"{n!r}")
                                 + " (the residual norm steering scales by: a finite number > 0)")
    names = sorted({k.split("/")[1] for k in t if k.startswith("contrast/")})
    units = [f"direction/{l}" for l in layers] + [f"contrast/{c}/{l}" for c in names for l in layers]
    for k in units:
        if k not in t:
            raise EvalAwareError(f"{tensor_file}: no tensor {k!r} (a contrast has every layer of the vector)")
        length = float(np.linalg.norm(t[k].double().numpy()))
        if abs(length - 1) > 1e-3:
            raise EvalAwareError(f"{tensor_file}: tensor {k!r}: length {length:.6g}, "
                                 f"expected 1 (a unit direction)")
    v = SteeringVector({l: t[f"direction/{l}"].numpy() for l in layers},
                       {l: t[f"raw/{l}"].numpy() for l in layers},
                       {l: float(norms[str(l)]) for l in layers}, meta, d,
                       {c: {l: t[f"contrast/{c}/{l}"].numpy() for l in layers} for c in names})
    if not isinstance(meta.get("sha256"), str) or not meta["sha256"]:
        raise EvalAwareError(f"{meta_file}: field 'sha256': missing; every saved vector records "
                             f"the hash of its directions and norms (a hand-made or edited file? "
                             f"build it with `evalaware steer build`)")
    if meta["sha256"] != v.sha256:
        raise EvalAwareError(f"{meta_file}: the directions and norms do not match the recorded "
                             f"sha256 (edited file?)")
    return v


def from_differences(raw: dict[int, np.ndarray], norms: dict[int, float],
                     meta: dict[str, Any]) -> SteeringVector:
    """Unit-normalise per layer; refuse a zero difference."""
    dirs = {}
    for l, r in raw.items():
        n = float(np.linalg.norm(r))
        if not np.isfinite(n) or n == 0:
            raise EvalAwareError(f"layer {l}: the eval-minus-deploy difference is zero; nothing "
                                 f"to steer along")
        dirs[int(l)] = (r / n).astype(np.float32)
    return SteeringVector(dirs, {int(l): np.asarray(r, dtype=np.float32) for l, r in raw.items()},
                          {int(l): float(v) for l, v in norms.items()},
                          {**meta, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "raw_norms": {str(l): float(np.linalg.norm(r)) for l, r in raw.items()}})


def heldout_split(y: np.ndarray, groups: Sequence[str], folds: int, seed: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """(train idx, held-out idx): the first fold of a StratifiedGroupKFold by group."""
    from harness.stats.cv import make_splits  # scikit-learn (~1.4 s), not at CLI start-up

    tr, te = make_splits("grouped", y, groups, groups, n_splits=folds, seed=seed)[0]
    return tr, te


def projection_auroc(X: np.ndarray, y: np.ndarray, direction: np.ndarray) -> float | None:
    """AUROC of the projection onto `direction` (None with one class)."""
    if len(set(y.tolist())) < 2:
        return None
    return roc_auc(y.tolist(), (X @ direction).tolist())
