"""Train a final probe from a run, and apply a saved probe to the activations of any run."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import EvalAwareError
from harness.runlog import RunLog

from probes.activations.store import ActivationStore
from harness.stats.metrics import roc_auc

from harness.stats.cv import auroc_ci, make_splits, oof_scores
from probes.io import LinearProbe, save_probe
from probes.models import linear_params, make_probe
from probes.records import probe_records, saved_probe_owner, sweep_owner, write_records
from probes.data import load_aligned
from probes.train import EvalConfig, SweepResult, fit_on, oof_for, sweep_pooling


def ids_digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()


def messages_digest(sample: Any) -> str:
    """sha256 of a sample's messages (roles and texts): the same prompt under another id (a
    dataset that reuses another's prompts) has the same digest."""
    return hashlib.sha256(json.dumps([[m.role, m.content] for m in sample.messages],
                                     ensure_ascii=False).encode()).hexdigest()


def train_and_save(store: RunLog, capture: str, pooling: str, layer: int | str, out_dir: str | Path,
                   probe: str = "logreg", cfg: EvalConfig | None = None,
                   progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """Pick the layer (``"best"`` = highest grouped-CV AUROC), record its CV scores under every
    scheme, fit on all labelled samples and save. Returns (directory, metadata)."""
    cfg = cfg or EvalConfig()
    acts = ActivationStore(store, capture)
    settings = acts.settings
    if settings is None:
        raise EvalAwareError(f"{store.run_dir}: no capture named {capture!r}")
    selection = "given"
    # the activations are read once: the layer sweep, the CV scores and the fit share them
    data, X = load_aligned(store, acts, pooling, cfg.layers if layer == "best" else [int(layer)],
                           cfg.label_source, cfg.group_key, cfg.family_key)
    if layer == "best":
        selection = ("best grouped-CV AUROC (optimistic: chosen on the same folds; "
                     "`probes eval` gives its max-over-layers null)")
        sweep_cfg = EvalConfig(**{**asdict(cfg), "poolings": [pooling], "probes": (probe,),
                                  "schemes": ("grouped",), "baselines": (), "n_boot": 0})
        sweep_cfg.check()
        sweep = SweepResult(capture=capture, config=asdict(sweep_cfg))
        sweep_pooling(pooling, data, X, sweep_cfg, sweep, progress=progress)
        layer = int(sweep.best(pooling, probe, "grouped")["layer"])
    layer = int(layer)
    Xl = X[layer]
    cv: dict[str, Any] = {}
    for scheme in cfg.schemes:
        splits = make_splits(scheme, data.y, data.groups, data.families, cfg.n_splits, cfg.seed)
        s, _ = oof_scores(lambda: make_probe(probe, cfg.C, cfg.seed), Xl, data.y, splits)
        groups = data.groups if cfg.ci_by == "category" else None  # as `probes eval` resamples
        cv[scheme] = {**auroc_ci(data.y, s, cfg.n_boot, cfg.seed, groups), "n_folds": len(splits),
                      "leaky": scheme == "random", "ci_by": cfg.ci_by}
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


def write_oof_records(store: RunLog, capture: str, pooling: str, layer: int, probe: str = "logreg",
                      scheme: str = "grouped", cfg: EvalConfig | None = None,
                      method: str = "probe", selection: dict[str, Any] | None = None) -> int:
    """Out-of-fold scores of one probe configuration as method records (honest: every sample is
    scored by a probe that did not see it, nor its group under grouped CV). `selection` (how the
    layer was chosen, and its null) goes into every record's details."""
    cfg = cfg or EvalConfig()
    data, dec, fold = oof_for(store, capture, pooling, layer, probe, scheme, cfg)
    proba = 1.0 / (1.0 + np.exp(-dec))
    details = {"probe": probe, "layer": layer, "pooling": pooling, "label_source": cfg.label_source,
               "capture": capture, "scores": f"out-of-fold ({scheme} CV)", "cv": scheme,
               **(selection or {"layer_selection": "given"})}
    recs = probe_records(store, data.ids, proba, dec, details,
                         per_sample=[{"fold": f} for f in fold], method=method)
    return write_records(store, recs, method, sweep_owner(capture))
