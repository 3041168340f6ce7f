"""Train a final probe from a run, and apply a saved probe to the activations of any run."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.core.errors import EvalAwareError
from harness.runlog import RunLog

from probes.activations.store import ActivationStore
from harness.stats.metrics import roc_auc, roc_auc_rows

from harness.stats.cv import auroc_ci, make_splits, oof_scores
from probes.io import LinearProbe, save_probe
from probes.models import linear_params, make_probe
from probes.records import probe_records, saved_probe_owner, sweep_owner, write_records
from probes.data import ProbeData, load_aligned
from probes.selection import best_index, layer_decisions, nested_best_layer
from probes.train import EvalConfig, fit_on


def ids_digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()


def messages_digest(sample: Any) -> str:
    """sha256 of a sample's messages (roles and texts): the same prompt under another id (a
    dataset that reuses another's prompts) has the same digest."""
    return hashlib.sha256(json.dumps([[m.role, m.content] for m in sample.messages],
                                     ensure_ascii=False).encode()).hexdigest()


#: The CV scheme that chooses `--layer best` (outer and inner folds): category and family held out at once.
SELECT_SCHEME = "crossed"
#: What out-of-fold records' scores are not (each fold its own probe, and nested, its own layer).
FOLD_SCALES = ("each fold's probe (nested: and layer) is its own, so the scores are on their fold's decision "
               "scale, not comparable across folds (the pooled AUROC mixes those scales)")


def splits_for(data: ProbeData, cfg: EvalConfig):
    """`splits_of(scheme, ix=None)`: the folds of `scheme` over the samples `ix` of `data` (all
    where None), indices into `ix`: the outer folds and each training side's inner ones."""
    def splits_of(scheme: str, ix: np.ndarray | None = None) -> list:
        ix = np.arange(len(data.y)) if ix is None else ix
        return make_splits(scheme, data.y[ix], [data.groups[i] for i in ix], [data.families[i] for i in ix],
                           cfg.n_splits, cfg.seed)
    return splits_of


def held_out(data: ProbeData, cfg: EvalConfig) -> str:
    """What :data:`SELECT_SCHEME` holds out, in words (which field held the families out)."""
    return ("categories held out (no family field: --family-key)" if data.family_key == cfg.group_key
            else f"categories and families ({data.family_key}) held out")


def train_and_save(store: RunLog, capture: str, pooling: str, layer: int | str, out_dir: str | Path,
                   probe: str = "logreg", cfg: EvalConfig | None = None,
                   progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """Pick the layer (``"best"``: the highest out-of-fold AUROC under :data:`SELECT_SCHEME`,
    categories and families held out), record its CV scores under that scheme and every one of
    `cfg`, fit on all labelled samples and save. Returns (directory, metadata).

    With ``"best"`` each CV score is *nested* (:func:`probes.selection.nested_best_layer`): the
    layer is chosen again inside every outer training fold (inner folds: :data:`SELECT_SCHEME`
    on that side alone), so the held-out fold never took part in the choice; ``layers_chosen``
    lists each outer fold's layer. A given layer's CV scores are plain out-of-fold ones."""
    cfg = cfg or EvalConfig()
    acts = ActivationStore(store, capture)
    settings = acts.settings
    if settings is None:
        raise EvalAwareError(f"{store.run_dir}: no capture named {capture!r}")
    best = layer == "best"
    # the activations are read once: the layer choice, the CV scores and the fit share them
    data, X = load_aligned(store, acts, pooling, cfg.layers if best else [int(layer)],
                           cfg.label_source, cfg.group_key, cfg.family_key)
    layers = sorted(X)
    XL = np.stack([X[l] for l in layers])  # (L, n, d)
    splits_of = splits_for(data, cfg)

    selection, k = "given", 0
    if best:
        sel = layer_decisions(XL, data.y, splits_of(SELECT_SCHEME), probe, cfg.C, cfg.seed)
        k = best_index(roc_auc_rows(np.broadcast_to(data.y, sel.shape), sel))
        selection = (f"best {SELECT_SCHEME}-CV AUROC of {len(layers)} layers ({held_out(data, cfg)}); "
                     f"CV AUROCs nested: the layer chosen again inside each training fold")
    layer = layers[k]
    Xl = XL[k]
    cv: dict[str, Any] = {}
    groups = data.groups if cfg.ci_by == "category" else None  # as `probes eval` resamples
    for scheme in dict.fromkeys([SELECT_SCHEME, *cfg.schemes]):
        splits = splits_of(scheme)
        extra: dict[str, Any] = {}
        if best:
            s, chosen = nested_best_layer(XL, data.y, splits, lambda tr: splits_of(SELECT_SCHEME, tr), probe,
                                          cfg.C, cfg.seed)
            extra = {"nested": True, "layers_chosen": [layers[c] for c in chosen]}
        else:
            s, _ = oof_scores(lambda: make_probe(probe, cfg.C, cfg.seed), Xl, data.y, splits)
        cv[scheme] = {**auroc_ci(data.y, s, cfg.n_boot, cfg.seed, groups), "n_folds": len(splits),
                      "leaky": scheme == "random", "ci_by": cfg.ci_by, **extra}
    pipe = fit_on(Xl, data, probe, cfg.C, cfg.seed)
    meta = {
        "kind": probe, "layer": layer, "pooling": pooling, "label_source": cfg.label_source,
        "hidden_size": int(Xl.shape[1]), "C": cfg.C, "seed": cfg.seed,
        "model": settings.get("model_identity"),
        "capture": {k: settings.get(k) for k in ("engine", "layer_convention", "dtype",
                                                 "num_hidden_layers", "include_answer")},
        "cv": cv, "layer_selection": selection,
        "train": {"run": str(store.run_dir), "capture": capture, "n": len(data.ids),
                  "n_eval": int(data.y.sum()), "sample_ids": data.ids,
                  "sample_ids_sha256": ids_digest(data.ids),
                  "messages_sha256": sorted({messages_digest(s) for s in store.samples() if s.id in set(data.ids)})},
        "score": "sigmoid(((x - scaler_mean) / scaler_scale) . weight + bias) = P(eval)",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return save_probe(out_dir, linear_params(pipe), meta), meta


def apply_probe(probe: LinearProbe, store: RunLog, capture: str = "default",
                write: bool = False, method: str = "probe", force: bool = False,
                allow_train_overlap: bool = False) -> dict[str, Any]:
    """Score the capture's activations; optionally write records. Returns scores and AUROC."""
    acts = ActivationStore(store, capture)
    settings = acts.settings
    if settings is None:
        raise EvalAwareError(f"{store.run_dir}: no capture named {capture!r}")
    want = (probe.meta.get("model") or {}).get("weights_sha256")
    got = (settings.get("model_identity") or {}).get("weights_sha256")
    if want and got and want != got and not force:
        raise EvalAwareError(f"probe was trained on weights {want[:12]}..., capture {capture!r} "
                             f"comes from {got[:12]}...; --force to apply anyway")
    pconv = (probe.meta.get("capture") or {}).get("layer_convention")
    n_layers = settings.get("num_hidden_layers")
    if probe.layer == n_layers and pconv and pconv != settings.get("layer_convention") and not force:
        raise EvalAwareError(f"layer {probe.layer} means different things in the probe's capture "
                             f"and this one (final norm before/after); --force to apply anyway")
    ids, X = acts.load(probe.pooling, [probe.layer])
    dec, proba = probe.decision(X[probe.layer]), probe.proba(X[probe.layer])
    by_id = {s.id: s for s in store.samples()}
    y = np.array([int(by_id[s].label == "eval") for s in ids])
    overlap = sorted(set(ids) & set((probe.meta.get("train") or {}).get("sample_ids") or []))
    res: dict[str, Any] = {"ids": ids, "decision": dec, "proba": proba, "n": len(ids),
                           "auroc_truth": roc_auc(y, proba), "train_overlap": len(overlap)}
    if write:
        if overlap and not allow_train_overlap:
            raise EvalAwareError(f"{len(overlap)} of these samples were used to train the probe, so "
                                 f"their scores are in-sample; write out-of-fold records with "
                                 f"`probes eval --write-records`, or pass --allow-train-overlap")
        details = {"probe": probe.meta.get("kind"), "layer": probe.layer, "pooling": probe.pooling,
                   "label_source": probe.meta.get("label_source"), "capture": capture,
                   "scores": "applied", "train_run": (probe.meta.get("train") or {}).get("run")}
        recs = probe_records(store, ids, proba, dec, details, method=method)
        res["written"] = write_records(store, recs, method, saved_probe_owner(probe.meta))
    return res


def write_oof_records(store: RunLog, capture: str, pooling: str, layers: Sequence[int] | None = None,
                      probe: str = "logreg", cfg: EvalConfig | None = None, method: str = "probe",
                      selection: dict[str, Any] | None = None) -> dict[str, Any]:
    """Nested out-of-fold scores as method records: under :data:`SELECT_SCHEME` folds (categories
    and families held out at once, as `probes train --layer best` chooses), every sample is scored
    by a probe fitted without its fold, at a layer chosen without it: among several `layers`
    (None: every captured one) the best by inner :data:`SELECT_SCHEME` CV on that fold's training
    side alone (:func:`probes.selection.nested_best_layer`); one layer is given. Each record's
    details say which (``oof_scheme``, ``scores``, ``layer_selection``), its fold and the layer
    that scored it, and ``scores_comparable_across_folds`` False (:data:`FOLD_SCALES`);
    `selection` (the sweep's best layer and its null, ``sweep_*``) is added to them.

    Returns ``written``, the records' ``auroc``, ``layers_chosen`` (per fold) and ``oof_scheme``."""
    cfg = cfg or EvalConfig()
    data, X = load_aligned(store, ActivationStore(store, capture), pooling, layers, cfg.label_source,
                           cfg.group_key, cfg.family_key)
    layer_ids = sorted(X)
    XL = np.stack([X[l] for l in layer_ids])  # (L, n, d)
    splits_of = splits_for(data, cfg)
    outer = splits_of(SELECT_SCHEME)
    if len(layer_ids) > 1:
        dec, chosen = nested_best_layer(XL, data.y, outer, lambda tr: splits_of(SELECT_SCHEME, tr), probe,
                                        cfg.C, cfg.seed)
        scheme = "nested-" + SELECT_SCHEME
        how = (f"best {SELECT_SCHEME}-CV AUROC of {len(layer_ids)} layers, chosen again inside each training fold "
               f"(nested; {held_out(data, cfg)})")
    else:
        dec, chosen = layer_decisions(XL, data.y, outer, probe, cfg.C, cfg.seed)[0], [0] * len(outer)
        scheme, how = SELECT_SCHEME, "given"
    fold = np.zeros(len(data.y), dtype=int)
    for k, (_, te) in enumerate(outer):
        fold[te] = k
    proba = 1.0 / (1.0 + np.exp(-dec))
    details = {"probe": probe, "pooling": pooling, "label_source": cfg.label_source, "capture": capture,
               "cv": SELECT_SCHEME, "oof_scheme": scheme,
               "scores": f"out-of-fold, {scheme} CV ({held_out(data, cfg)}): no sample's fold saw its probe's fit"
                         + (" or its layer's choice" if len(layer_ids) > 1 else ""),
               "scores_comparable_across_folds": False, "scales": FOLD_SCALES,
               **(selection or {}), "layer_selection": how}
    per_sample = [{"fold": int(f), "layer": int(layer_ids[chosen[f]])} for f in fold]
    recs = probe_records(store, data.ids, proba, dec, details, per_sample=per_sample, method=method)
    n = write_records(store, recs, method, sweep_owner(capture))
    return {"written": n, "auroc": roc_auc(data.y, dec), "layers_chosen": [int(layer_ids[c]) for c in chosen],
            "oof_scheme": scheme}
