"""`evalaware steer build`: a steering vector from a run's captured activations, a saved probe,
or explicit contrastive pairs (see :mod:`probes.steering.direction` for the definitions)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.core.errors import EvalAwareError
from harness.runlog import RunLog
from harness.core.sample import Message

from probes.activations.store import ActivationStore
from probes.data import load_aligned
from harness.backends.base import Backend
from probes.io import load_probe
from probes.steering.contrasts import contrast_directions, jsonl_records, last_prompt_states
from probes.steering.direction import NORM_POOLING, SteeringVector, from_differences, heldout_split, projection_auroc


def _mean_norms(acts: ActivationStore, layers: Sequence[int], ids: Sequence[str],
                pooling: str) -> tuple[dict[int, float], str]:
    """Mean L2 norm of one residual position per layer over `ids` (last prompt token when
    captured, else the chosen pooling's vectors), and the pooling it used."""
    src = NORM_POOLING if NORM_POOLING in acts.poolings() else pooling
    got_ids, X = acts.load(src, layers, ids)
    if not got_ids:
        raise EvalAwareError(f"no {src} activations for the training samples")
    return {l: float(np.linalg.norm(X[l], axis=1).mean()) for l in layers}, src


def steerable_layers(settings: dict[str, Any], wanted: Sequence[int] | None = None) -> list[int] | None:
    """The captured layer ids (of `wanted`, default all captured) that can be steered: 1..L-1
    (0 = embeddings, L = after the final norm); None when the capture does not record L."""
    n = int(settings.get("num_hidden_layers") or 0)
    if not n:
        return None
    have = list(settings.get("layers") or [])
    return [l for l in (have if wanted is None else wanted) if l in have and 1 <= l < n]


def add_contrasts(vec: SteeringVector, backend: Backend | None, sets: dict[str, Path] | None) -> None:
    """Give `vec` the unrelated-contrast controls of `sets` (:mod:`probes.steering.contrasts`) at
    its layers, built on `backend` (the vector's model: refused when its weights differ)."""
    if not sets:
        return
    if backend is None:
        raise EvalAwareError("contrast controls need the model (pass --model)")
    want, got = vec.meta.get("weights_sha256"), backend.identity.get("weights_sha256")
    if want and got and want != got:
        raise EvalAwareError(f"the contrasts' model has weights {got[:12]}..., the vector's "
                             f"{want[:12]}...; pass the run's model")
    dirs, meta = contrast_directions(backend, sets, vec.layers)
    vec.contrasts, vec.meta["contrasts"] = orient(dirs, meta, vec.directions)


def orient(dirs: dict[str, dict[int, np.ndarray]], meta: dict[str, dict[str, Any]],
           vector: dict[int, np.ndarray]) -> tuple[dict[str, dict[int, np.ndarray]], dict[str, dict[str, Any]]]:
    """Each contrast's direction turned, per layer, to the vector's side (a - b or b - a: which of
    a contrast's two sides comes first is arbitrary, so unoriented signs would cancel in any mean
    over contrasts); decided by the cosine with the vector alone, never by an outcome. The meta
    records each layer's cosine before turning (``cosine_with_vector``)."""
    out = {}
    for name, by_layer in dirs.items():
        cos = {l: float(np.dot(d, vector[l])) / float(np.linalg.norm(vector[l]) or 1.0) for l, d in by_layer.items()}
        out[name] = {l: (d if cos[l] >= 0 else -d).astype(np.float32) for l, d in by_layer.items()}
        meta[name]["cosine_with_vector"] = {str(l): c for l, c in cos.items()}
    return out, meta


def build_from_run(run_dir: str | Path, out: str | Path, pooling: str = "last_prompt",
                   layers: Sequence[int] | None = None, capture: str = "default",
                   probe: str | Path | None = None, holdout_folds: int = 2, seed: int = 0,
                   labels: str = "truth", group_key: str = "category",
                   contrasts: dict[str, Path] | None = None, backend: Backend | None = None) -> SteeringVector:
    """Difference of class means on a training split (or a probe's weights), per layer; with
    `contrasts`, their control directions built on `backend` (:func:`add_contrasts`)."""
    store = RunLog(run_dir, create=False)
    try:
        acts = ActivationStore(store, capture)
        if acts.settings is None:
            raise EvalAwareError(f"{run_dir}: no capture named {capture!r}; run `evalaware "
                                 f"activations capture --run {run_dir}` first")
        identity = store.get_meta("model_identity") or {}
        man = store.get_meta("manifest") or {}
        if probe is not None:
            vec = _from_probe(store, acts, probe, identity, man)
            add_contrasts(vec, backend, contrasts)
            vec.save(out)
            return vec
        all_layers = acts.layers()
        want = list(layers) if layers else all_layers
        data, X = load_aligned(store, acts, pooling, want, label_source=labels, group_key=group_key)
        tr, te = heldout_split(data.y, data.groups, holdout_folds, seed)
        train_ids = [data.ids[i] for i in tr]
        held_ids = [data.ids[i] for i in te]
        raw, auroc = {}, {}
        for l in want:
            Xl = X[l].astype(np.float64)
            yt = data.y[tr]
            raw[l] = Xl[tr][yt == 1].mean(0) - Xl[tr][yt == 0].mean(0)
        norms, norm_src = _mean_norms(acts, want, train_ids, pooling)
        meta = {"source": "diffmean", "source_run": str(Path(run_dir).resolve()),
                "capture": capture, "pooling": pooling, "label_source": labels,
                "model_identity": identity, "weights_sha256": identity.get("weights_sha256"),
                "model": (man.get("model") or {}).get("model"),
                "layer_convention": acts.settings.get("layer_convention"),
                "norm_pooling": norm_src,
                "split": {"scheme": "grouped", "group_key": group_key, "folds": holdout_folds,
                          "seed": seed, "heldout_fold": 0},
                "train_ids": train_ids, "heldout_ids": held_ids,
                "n_train": {"eval": int((data.y[tr] == 1).sum()), "deploy": int((data.y[tr] == 0).sum())},
                "n_heldout": {"eval": int((data.y[te] == 1).sum()), "deploy": int((data.y[te] == 0).sum())},
                "heldout_groups": sorted(set(data.groups[i] for i in te)),
                "dropped": data.dropped}
        vec = from_differences(raw, norms, meta)
        for l in want:
            auroc[str(l)] = projection_auroc(X[l][te], data.y[te], vec.directions[l])
        vec.meta["heldout_auroc"] = auroc
        vec.meta["selection_auroc"], vec.meta["layer_selection"] = _inner_selection(
            {l: X[l][tr].astype(np.float64) for l in want}, data.y[tr],
            [data.groups[i] for i in tr], seed)
        add_contrasts(vec, backend, contrasts)
        vec.save(out)
        return vec
    finally:
        store.close()


def _inner_selection(X: dict[int, np.ndarray], y: np.ndarray, groups: Sequence[str],
                     seed: int) -> tuple[dict[str, float | None], str]:
    """Per layer, the AUROC of a direction built on half of the training categories, scored on
    the other half: the layer is chosen here, so the held-out samples stay unseen by the choice."""
    try:
        itr, ite = heldout_split(y, groups, 2, seed + 1)
    except EvalAwareError as e:
        return {}, f"none: the training categories cannot be split ({e}); the middle layer"
    out: dict[str, float | None] = {}
    for l, Xl in X.items():
        d = Xl[itr][y[itr] == 1].mean(0) - Xl[itr][y[itr] == 0].mean(0)
        n = float(np.linalg.norm(d))
        out[str(l)] = projection_auroc(Xl[ite], y[ite], d / n) if n > 0 else None
    return out, "inner split of the training categories (held-out samples unseen)"


def _from_probe(store: RunLog, acts: ActivationStore, probe: str | Path,
                identity: dict[str, Any], man: dict[str, Any]) -> SteeringVector:
    p = load_probe(probe)
    want, got = p.meta.get("weights_sha256"), identity.get("weights_sha256")
    if want and got and want != got:
        raise EvalAwareError(f"{probe}: trained on weights {want[:12]}..., the run used "
                             f"{got[:12]}...")
    layer = p.layer
    raw = {layer: (p.weight / p.scaler_scale).astype(np.float64)}
    train_ids = list((p.meta.get("train") or {}).get("sample_ids") or [])
    run_ids = [s.id for s in store.samples()]
    held = [s for s in run_ids if s not in set(train_ids)]
    norms, norm_src = _mean_norms(acts, [layer], train_ids or run_ids, p.pooling)
    meta = {"source": "probe", "probe": str(Path(probe).resolve()), "pooling": p.pooling,
            "source_run": str(store.run_dir.resolve()), "capture": acts.capture,
            "model_identity": identity, "weights_sha256": identity.get("weights_sha256"),
            "model": (man.get("model") or {}).get("model"), "norm_pooling": norm_src,
            "split": {"scheme": "probe training samples"}, "train_ids": train_ids,
            "heldout_ids": held, "label_source": p.meta.get("label_source")}
    return from_differences(raw, norms, meta)


def read_pairs(path: str | Path) -> list[tuple[str, str]]:
    """JSONL with one {"eval": "...", "deploy": "..."} object per line."""
    pairs = []
    p = Path(path)
    if not p.exists():
        raise EvalAwareError(f"{p}: no such file")
    for n, rec in jsonl_records(p):
        for k in ("eval", "deploy"):
            if not isinstance(rec, dict) or not isinstance(rec.get(k), str) or not rec[k].strip():
                raise EvalAwareError(f"{p}:{n}: field {k!r} must be a non-empty string")
        pairs.append((rec["eval"], rec["deploy"]))
    if not pairs:
        raise EvalAwareError(f"{p}: no pairs")
    return pairs


def build_from_pairs(pairs_file: str | Path, backend: Backend, out: str | Path,
                     layers: Sequence[int] | None = None, batch_size: int = 8,
                     contrasts: dict[str, Path] | None = None) -> SteeringVector:
    """Mean (eval - deploy) last-prompt-token residual over the pairs, each prompt rendered as
    a single user turn with the model's chat template (as runs render samples); `backend` has
    the `hidden_states` capability. With `contrasts`, their control directions too."""
    pairs = read_pairs(pairs_file)
    n = backend.hidden_layout().n_layers
    want = list(layers) if layers else list(range(1, n))
    H = last_prompt_states(backend, [(Message("user", t),) for pair in pairs for t in pair], want, batch_size)
    ev, de = H[0::2], H[1::2]  # (pairs, layers, hidden) each: eval, deploy
    raw = {l: (ev[:, j] - de[:, j]).mean(0) for j, l in enumerate(want)}
    norms = {l: float(np.linalg.norm(H[:, j], axis=1).mean()) for j, l in enumerate(want)}
    data = Path(pairs_file).read_bytes()
    meta = {"source": "pairs", "pairs_file": str(Path(pairs_file).resolve()),
            "pairs_sha256": hashlib.sha256(data).hexdigest(), "n_pairs": len(pairs),
            "pooling": NORM_POOLING, "norm_pooling": NORM_POOLING,
            "model_identity": backend.identity, "weights_sha256": backend.identity.get("weights_sha256"),
            "model": getattr(backend, "model_name", None), "split": None, "train_ids": [],
            "heldout_ids": None}
    vec = from_differences(raw, norms, meta)
    # Paired separation on the pairs themselves (in-sample: the vector was built from them).
    y = np.array([1, 0] * len(pairs))
    vec.meta["insample_auroc"] = {str(l): projection_auroc(H[:, j], y, vec.directions[l])
                                  for j, l in enumerate(want)}
    add_contrasts(vec, backend, contrasts)
    vec.save(out)
    return vec
