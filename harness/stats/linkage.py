"""Does awareness go with behaviour? (issue 45) For one awareness readout and one behaviour, on
the samples where both are defined: the behaviour rate on the samples the readout calls eval and
on those it calls deploy, their difference and odds ratio, each with an interval that resamples
categories (:func:`harness.stats.metrics.interval_weighted`: the cluster-jackknife t under 50
units, else the percentile bootstrap), computed three times: over all samples, within the
eval-labelled samples only and within the deploy-labelled samples only. A link seen over all
samples but in neither label stratum is the label's, not awareness's (the readout and the
behaviour can both follow the label: the strata hold it fixed).

A side (called eval, called deploy) with fewer than :data:`MIN_SIDE` samples gives "no verdict"
(the numbers are kept, no interval and no verdict rest on them). Samples the readout left
undecided (no call) cannot be placed on a side: they leave, counted (``n_undecided``); so do
samples with a behaviour outcome but no record of the readout (``n_no_record``).

**Multiplicity.** Each row's verdict is its own 95% interval's. Across the readouts of a run,
:func:`readout_linkage` applies Holm's step-down (:func:`holm_shown`) within two families per
behaviour: the ``all`` rows of every readout, and the within-label rows of every readout (both
labels); a row is a test where it has a verdict (not "no verdict"). ``holm_family`` (the tests
in its family, None for a row that is none) and ``holm_shown`` (its link stands after Holm) are
what the report's Findings sentence reads.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from harness.core.details import BehaviourOutcome
from harness.stats.metrics import Interval, interval_verdict, interval_weighted, weighted_mean_rows
from harness.stats.summaries import groups_for, resolve_ci_by

MIN_SIDE = 5
#: Categories each side must span when intervals resample categories: a side in one or two
#: categories empties when one is left out, and the interval falls back to too few resamples
#: (a review's simulation: 22% false links at nominal 5% with 4 categories and category-level calls).
MIN_SIDE_GROUPS = 3
STRATA = ("all", "eval_labelled", "deploy_labelled")
#: Added to each cell of the 2x2 table for the odds ratio (Haldane-Anscombe), so an empty cell
#: gives a finite odds ratio.
HALDANE = 0.5


def _rows(W: np.ndarray, called: np.ndarray, behaved: np.ndarray) -> dict[str, np.ndarray]:
    """Weighted 2x2 counts per weight row: a/b = behaved/not among called eval, c/d among deploy."""
    e, b = called.astype(float), behaved.astype(float)
    return {"a": W @ (e * b), "b": W @ (e * (1 - b)), "c": W @ ((1 - e) * b), "d": W @ ((1 - e) * (1 - b))}


def _rate_diff(W: np.ndarray, called: np.ndarray, behaved: np.ndarray) -> np.ndarray:
    t = _rows(W, called, behaved)
    with np.errstate(invalid="ignore", divide="ignore"):
        return t["a"] / (t["a"] + t["b"]) - t["c"] / (t["c"] + t["d"])


def _log_or(W: np.ndarray, called: np.ndarray, behaved: np.ndarray) -> np.ndarray:
    t = {k: v + HALDANE for k, v in _rows(W, called, behaved).items()}
    return np.log(t["a"] * t["d"] / (t["b"] * t["c"]))


def _newcombe(e: np.ndarray, b: np.ndarray, groups: Sequence[Any] | None, diff: float,
              kw: dict[str, Any]) -> Interval | None:
    """Newcombe's hybrid interval of a difference of two rates from each rate's own interval
    (each side's units resampled; exact at a bound): where the difference's own interval is
    undefined, as at a difference of exactly +-1 (every sample called eval behaved, none called
    deploy did), whose cluster jackknife has zero width."""
    ivs = []
    for side in (e, ~e):
        g = None if groups is None else [x for x, keep in zip(groups, side) if keep]
        v = b[side].astype(float)
        ivs.append(interval_weighted(lambda W: weighted_mean_rows(W, v), len(v), bounds=(0.0, 1.0),
                                     **{**kw, "groups": g}))
    if None in ivs:
        return None
    (le, he), (ld, hd) = ivs[0].pair(), ivs[1].pair()
    pe, pd = float(b[e].mean()), float(b[~e].mean())
    return Interval(diff - math.hypot(pe - le, hd - pd), diff + math.hypot(he - pe, pd - ld),
                    f"Newcombe's hybrid of the two rates' intervals ({ivs[0].method})")


def _ci(iv: Interval | None) -> list[float] | None:
    return None if iv is None else [iv.lo, iv.hi]


def link(called_eval: Sequence[bool], behaved: Sequence[bool], groups: Sequence[Any] | None,
         n_boot: int = 1000, seed: int = 0, alpha: float = 0.05) -> dict[str, Any]:
    """The link on one set of samples: ``n_eval``/``n_deploy`` (samples called each way),
    ``rate_eval``/``rate_deploy`` (behaviour rates), ``diff`` (eval - deploy) with ``diff_ci``,
    ``odds_ratio`` with ``odds_ratio_ci`` (Haldane-corrected), ``ci_method``, ``n_groups`` and
    ``verdict``: ``no verdict`` (a side under :data:`MIN_SIDE`, or no interval), ``more when
    called eval`` / ``less when called eval`` (the difference's interval excludes 0) or
    ``no link shown`` (it covers 0). `alpha`: the intervals' level is 1 - alpha."""
    e, b = np.asarray(called_eval, dtype=bool), np.asarray(behaved, dtype=bool)
    n_e, n_d = int(e.sum()), int((~e).sum())
    out: dict[str, Any] = {
        "n": int(len(e)), "n_eval": n_e, "n_deploy": n_d,
        "n_groups": len(set(map(str, groups))) if groups is not None else int(len(e)),
        "rate_eval": float(b[e].mean()) if n_e else None, "rate_deploy": float(b[~e].mean()) if n_d else None,
        "diff": None, "diff_ci": None, "odds_ratio": None, "odds_ratio_ci": None, "ci_method": None}
    if n_e and n_d:
        one = np.ones((1, len(e)))
        out["diff"] = float(_rate_diff(one, e, b)[0])
        out["odds_ratio"] = float(np.exp(_log_or(one, e, b)[0]))
    if not n_e + n_d:
        out["verdict"] = "no verdict (no sample both decided and scored)"
        return out
    if min(n_e, n_d) < MIN_SIDE:
        out["verdict"] = f"no verdict (fewer than {MIN_SIDE} samples called {'eval' if n_e < n_d else 'deploy'})"
        return out
    if groups is not None:
        spans = {side: len({str(g) for g, x in zip(groups, e) if x == (side == "eval")}) for side in ("eval", "deploy")}
        thin = [side for side, k in spans.items() if k < MIN_SIDE_GROUPS]
        if thin:
            out["verdict"] = (f"no verdict (the samples called {thin[0]} lie in {spans[thin[0]]} categor"
                              f"{'y' if spans[thin[0]] == 1 else 'ies'}; an interval resampling categories needs "
                              f"{MIN_SIDE_GROUPS} on each side)")
            return out
    kw: dict[str, Any] = dict(n=n_boot, seed=seed, groups=None if groups is None else list(groups), alpha=alpha)
    diff = interval_weighted(lambda W: _rate_diff(W, e, b), len(e), bounds=(-1.0, 1.0), **kw)
    if diff is None:
        diff = _newcombe(e, b, kw["groups"], out["diff"], kw)
    lor = interval_weighted(lambda W: _log_or(W, e, b), len(e), **kw)
    out["diff_ci"] = _ci(diff)
    out["odds_ratio_ci"] = None if lor is None else [math.exp(lor.lo), math.exp(lor.hi)]
    out["ci_method"] = None if diff is None else diff.method
    out["verdict"] = interval_verdict(diff, 0.0, "more when called eval", "less when called eval", "no link shown")
    return out


def has_outcome(behaviour: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any of these behaviour records holds an outcome (a sample declared a behaviour
    and the answer was scored)."""
    return any((o := BehaviourOutcome.of(r)) is not None and o.behaved is not None for r in behaviour)


def _outcomes(behaviour: Sequence[Mapping[str, Any]]) -> dict[str, bool]:
    """{sample id: behaved} of the behaviour records that hold an outcome."""
    out = {}
    for r in behaviour:
        o = BehaviourOutcome.of(r)
        if o is not None and o.behaved is not None:
            out[r["sample_id"]] = bool(o.behaved)
    return out


def _decided(r: Mapping[str, Any]) -> bool:
    return r.get("prediction") in ("eval", "deploy")


def joined(readout: Sequence[Mapping[str, Any]], behaviour: Sequence[Mapping[str, Any]]
           ) -> list[tuple[Mapping[str, Any], bool]]:
    """(readout record, behaved) for each sample the readout decided (eval or deploy) and whose
    behaviour record has an outcome, in the readout's order."""
    outcome = _outcomes(behaviour)
    return [(r, outcome[r["sample_id"]]) for r in readout if _decided(r) and r["sample_id"] in outcome]


def _in(stratum: str, r: Mapping[str, Any]) -> bool:
    return stratum == "all" or r["label"] == stratum.split("_")[0]


Strata = dict[str, tuple[list[bool], list[bool], list[Any] | None, int, int]]


def _strata(readout: Sequence[Mapping[str, Any]], behaviour: Sequence[Mapping[str, Any]], ci_by: str | None
            ) -> Strata:
    """{stratum: (called eval, behaved, groups, undecided, no record)}: the samples of the stratum's
    label with a behaviour outcome, those the readout decided, how many it left undecided, and how
    many it has no record of (the label then the behaviour record's)."""
    pairs = joined(readout, behaviour)
    outcome = _outcomes(behaviour)
    unit = resolve_ci_by([r for r, _ in pairs], ci_by)
    seen = {r["sample_id"] for r in readout}
    missing = [r for r in behaviour if r["sample_id"] in outcome and r["sample_id"] not in seen]
    out = {}
    for stratum in STRATA:
        keep = [(r, bh) for r, bh in pairs if _in(stratum, r)]
        recs = [r for r, _ in keep]
        undecided = sum(1 for r in readout if r["sample_id"] in outcome and not _decided(r) and _in(stratum, r))
        out[stratum] = ([r["prediction"] == "eval" for r in recs], [bh for _, bh in keep], groups_for(recs, unit),
                        undecided, sum(1 for r in missing if _in(stratum, r)))
    return out


def linkage(readout: Sequence[Mapping[str, Any]], behaviour: Sequence[Mapping[str, Any]],
            n_boot: int = 1000, seed: int = 0, ci_by: str | None = None) -> dict[str, dict[str, Any]]:
    """{stratum: :func:`link` and ``n_undecided``} for ``all``, ``eval_labelled`` and
    ``deploy_labelled`` (each stratum holds only samples of its label); resampling unit as the
    report's (`ci_by`). ``n_undecided``: the stratum's samples with a behaviour outcome that the
    readout made no call on; ``n_no_record``: those it has no record of (both left out of ``n``)."""
    return _links(_strata(readout, behaviour, ci_by), n_boot, seed)


def _links(strata: Strata, n_boot: int, seed: int, alpha: float = 0.05) -> dict[str, dict[str, Any]]:
    return {stratum: {**link(e, b, g, n_boot, seed, alpha), "n_undecided": u, "n_no_record": k}
            for stratum, (e, b, g, u, k) in strata.items()}


#: Holm's families per behaviour: the ``all`` rows of every readout, and the within-label rows.
FAMILIES: dict[str, tuple[str, ...]] = {"all": ("all",), "within": ("eval_labelled", "deploy_labelled")}


def holm_shown(tests: Mapping[Any, Callable[[float], Sequence[float] | None]], alpha: float = 0.05) -> set[Any]:
    """Holm's step-down over `tests` ({key: the test's interval at a level 1 - a, as a function of
    a}), each a test of 0: with k tests left, every one whose interval at 1 - alpha/k excludes 0
    is shown and leaves; repeat until none is. The same as Holm on the p-values these intervals
    invert (p <= alpha/k exactly where the interval at 1 - alpha/k excludes 0), so each row keeps
    its own interval rule."""
    left, shown = set(tests), set()
    while left:
        k = len(left)
        now = {key for key in left if (ci := tests[key](alpha / k)) is not None and (ci[0] > 0 or ci[1] < 0)}
        if not now:
            break
        shown |= now
        left -= now
    return shown


def readout_linkage(readouts: Mapping[str, Sequence[Mapping[str, Any]]], behaviour: Sequence[Mapping[str, Any]],
                    n_boot: int = 1000, seed: int = 0, ci_by: str | None = None, alpha: float = 0.05
                    ) -> dict[str, dict[str, dict[str, Any]]]:
    """{readout: :func:`linkage`} for one behaviour, each row with ``holm_family`` and
    ``holm_shown``: Holm's step-down across the readouts within each of :data:`FAMILIES` (the rows
    with a verdict are its tests)."""
    data = {m: _strata(recs, behaviour, ci_by) for m, recs in readouts.items()}
    out = {m: _links(st, n_boot, seed, alpha) for m, st in data.items()}
    for strata in FAMILIES.values():
        keys = [(m, s) for m in out for s in strata if not out[m][s]["verdict"].startswith("no verdict")]
        shown = holm_shown({(m, s): (lambda a, m=m, s=s: out[m][s]["diff_ci"] if a == alpha
                                     else link(*data[m][s][:3], n_boot, seed, a)["diff_ci"]) for m, s in keys}, alpha)
        for m in out:
            for s in strata:
                test = (m, s) in keys
                out[m][s].update(holm_family=len(keys) if test else None, holm_shown=(m, s) in shown)
    return out
