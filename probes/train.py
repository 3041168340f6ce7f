"""Per-layer probe sweeps with honest cross-validation and baselines in the same table (the final
probe and the out-of-fold records: :mod:`probes.apply`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from harness.core.errors import EvalAwareError
from harness.runlog import RunLog

from probes.activations.store import ActivationStore, CorruptShard
from harness.stats.baselines import BASELINES, mean_defined, evaluate_baseline, human_baseline
from harness.stats.metrics import roc_auc

from harness.stats.cv import SCHEMES, auroc_ci, make_splits, oof_scores
from probes.data import ProbeData, load_aligned
from probes.models import PROBES, make_probe
from probes.selection import layer_aurocs, max_layer_null


@dataclass
class EvalConfig:
    """What a sweep evaluates; everything here goes into the result JSON."""

    poolings: list[str] | None = None
    layers: list[int] | None = None
    probes: tuple[str, ...] = PROBES
    schemes: tuple[str, ...] = ("grouped", "lofo", "random")
    baselines: tuple[str, ...] = BASELINES
    n_splits: int = 5
    C: float = 1.0
    n_boot: int = 1000
    n_perm: int = 200
    ci_by: str = "category"
    seed: int = 0
    label_source: str = "truth"
    group_key: str = "category"
    family_key: str = "family"

    def check(self) -> None:
        for v, allowed, what in ((self.probes, PROBES, "probe"), (self.schemes, SCHEMES, "CV scheme"),
                                 (self.baselines, BASELINES, "baseline"),
                                 ((self.ci_by,), ("category", "sample"), "resampling unit")):
            bad = [x for x in v if x not in allowed]
            if bad:
                raise EvalAwareError(f"unknown {what} {', '.join(bad)}; use {', '.join(allowed)}")


@dataclass
class SweepResult:
    """Rows of the table (probes per layer, then baselines) plus bookkeeping."""

    capture: str
    config: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    samples: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("load_s", "probes_s", "baselines_s", "null_s"), 0.0))
    selection: dict[str, dict[str, Any]] = field(default_factory=dict)  # "pooling/scheme" -> null

    def best(self, pooling: str, probe: str = "logreg", scheme: str = "grouped") -> dict[str, Any]:
        """The row with the highest AUROC for (pooling, probe, scheme)."""
        cand = [r for r in self.rows if r["pooling"] == pooling and r["model"] == probe
                and r["scheme"] == scheme and r["layer"] is not None and r["auroc"] is not None]
        if not cand:
            raise EvalAwareError(f"no {probe}/{scheme} rows for pooling {pooling!r}")
        return max(cand, key=lambda r: (r["auroc"], -r["layer"]))

    def selection_for(self, pooling: str, scheme: str = "grouped") -> dict[str, Any] | None:
        """The max-over-layers null of the logreg probe's selected layer, if it was computed."""
        return self.selection.get(f"{pooling}/{scheme}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _row(pooling: str, layer: int | None, model: str, scheme: str, data: ProbeData,
         res: dict[str, Any]) -> dict[str, Any]:
    return {"pooling": pooling, "layer": layer, "model": model, "scheme": scheme,
            "leaky": scheme == "random", "n": len(data.y), "n_eval": int(data.y.sum()),
            "label_source": data.label_source, **res}


def evaluate(store: RunLog, capture: str = "default", cfg: EvalConfig | None = None,
             progress: bool = True) -> SweepResult:
    """Sweep every (pooling, layer, probe, CV scheme) and the baselines of each scheme.

    A pooling that cannot be evaluated (too few samples or groups) is skipped and named in
    `skipped`, unless it is the only one."""
    cfg = cfg or EvalConfig()
    cfg.check()
    acts = ActivationStore(store, capture)
    if acts.settings is None:
        raise EvalAwareError(f"{store.run_dir}: no capture named {capture!r}; run "
                             f"`evalaware activations capture --run {store.run_dir}` first")
    poolings = cfg.poolings or acts.poolings()
    info = acts.sample_info()
    out = SweepResult(capture=capture, config=asdict(cfg))
    base_cache: dict[tuple[str, str, tuple[str, ...]], dict[str, Any]] = {}
    for pooling in poolings:
        try:
            _evaluate_pooling(store, acts, pooling, cfg, info, out, base_cache, progress)
        except CorruptShard:  # the store is damaged: no pooling is skipped over it
            raise
        except EvalAwareError as e:  # e.g. evidence found in too few samples to split
            if len(poolings) == 1:
                raise
            out.rows = [r for r in out.rows if r["pooling"] != pooling]
            out.samples.pop(pooling, None)
            out.skipped[pooling] = str(e)
    if not out.samples:
        raise EvalAwareError(f"no pooling could be evaluated: {out.skipped}")
    return out


def _evaluate_pooling(store: RunLog, acts: ActivationStore, pooling: str, cfg: EvalConfig,
                      info: dict[str, Any], out: SweepResult, base_cache: dict,
                      progress: bool) -> None:
    """Append the rows of one pooling to `out` (and its time to `out.timing`)."""
    t0 = time.perf_counter()
    data, X = load_aligned(store, acts, pooling, cfg.layers, cfg.label_source, cfg.group_key, cfg.family_key,
                           info)
    out.timing["load_s"] += time.perf_counter() - t0
    sweep_pooling(pooling, data, X, cfg, out, base_cache, progress)


def sweep_pooling(pooling: str, data: ProbeData, X: dict[int, np.ndarray], cfg: EvalConfig,
                  out: SweepResult, base_cache: dict | None = None, progress: bool = True) -> None:
    """Append the rows of one pooling's loaded, aligned activations (:func:`load_aligned`) to `out`."""
    base_cache = {} if base_cache is None else base_cache
    out.samples[pooling] = {"n": len(data.ids), "n_eval": int(data.y.sum()), **data.dropped}
    layers = sorted(X)
    boot_groups = data.groups if cfg.ci_by == "category" else None
    for scheme in cfg.schemes:
        splits = make_splits(scheme, data.y, data.groups, data.families, cfg.n_splits, cfg.seed)
        t0 = time.perf_counter()
        bar = tqdm(total=len(layers) * len(cfg.probes), desc=f"{pooling}/{scheme}",
                   disable=not progress, leave=False, dynamic_ncols=True)
        bases = per_layer = None
        for probe in cfg.probes:
            if probe == "logreg":  # every layer at once (batched_logreg.py), bases reused below
                dec, per_layer, bases = layer_aurocs(np.stack([X[l] for l in layers]), data.y,
                                                     splits, cfg.C)
            for li, layer in enumerate(layers):
                if probe == "logreg":
                    s = dec[li]
                    folds = [roc_auc(data.y[te], s[te]) for _, te in splits]
                else:
                    s, folds = oof_scores(lambda: make_probe(probe, cfg.C, cfg.seed), X[layer],
                                          data.y, splits)
                out.rows.append(_row(pooling, layer, probe, scheme, data, {
                    **auroc_ci(data.y, s, cfg.n_boot, cfg.seed, boot_groups),
                    "fold_auroc_mean": mean_defined(folds), "n_folds": len(splits)}))
                bar.update(1)
        bar.close()
        out.timing["probes_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        for b in cfg.baselines:
            if b in ("tfidf", "tfidf_char", "length"):
                key = (b, scheme, tuple(data.ids))  # same samples: same result for every pooling
                if key not in base_cache:
                    base_cache[key] = evaluate_baseline(b, splits, data.y, data.texts, data.lengths,
                                                        cfg.n_boot, cfg.seed, boot_groups)
                out.rows.append(_row(pooling, None, b, scheme, data, base_cache[key]))
        out.timing["baselines_s"] += time.perf_counter() - t0
        if "shuffled" in cfg.baselines and bases is not None:
            t0 = time.perf_counter()
            cells = [f"{g}\x1f{f}" for g, f in zip(data.groups, data.families)]  # each in one crossed test cell
            sel = max_layer_null(bases, data.y, per_layer, layers, splits, cfg.n_perm, cfg.seed,
                                 groups={"grouped": data.groups, "lofo": data.families, "crossed": cells}.get(scheme),
                                 C=cfg.C, within_folds=scheme != "lofo")  # lofo folds ignore y
            out.selection[f"{pooling}/{scheme}"] = sel
            out.rows.append(_row(pooling, sel["selected_layer"], "shuffled:logreg", scheme, data, {
                "auroc": sel["null_mean"], "ci_lo": sel.get("null_lo"), "ci_hi": sel.get("null_hi"),
                **{k: sel[k] for k in ("p_value", "null_q95", "observed", "selection", "n_perm")}}))
            out.timing["null_s"] += time.perf_counter() - t0
    if "human" in cfg.baselines:  # no training, so no CV scheme: one row per pooling
        res = human_baseline(data.y, data.human, cfg.n_boot, cfg.seed, boot_groups)
        if res is not None:
            res["source"] = data.human_source
            out.rows.append(_row(pooling, None, "human", "none", data, res))


def fit_probe(store: RunLog, capture: str, pooling: str, layer: int, probe: str = "logreg",
              C: float = 1.0, seed: int = 0, label_source: str = "truth"
              ) -> tuple[Any, ProbeData]:
    """Fit one probe on every labelled sample of the capture."""
    data, X = load_aligned(store, ActivationStore(store, capture), pooling, [layer], label_source)
    return fit_on(X[layer], data, probe, C, seed), data


def fit_on(Xl: np.ndarray, data: ProbeData, probe: str = "logreg", C: float = 1.0, seed: int = 0) -> Any:
    """One probe fitted on aligned rows `Xl` and their labels."""
    if len(set(data.y.tolist())) < 2:
        raise EvalAwareError("the labels hold one class only; cannot fit a probe")
    return make_probe(probe, C, seed).fit(Xl, data.y)
