"""Paired effect estimates of the factors from the scores of originals and variants.

Sign convention: an effect is score(factor present) - score(factor absent), whichever way the
variant was made (add: variant - original; remove: original - variant), so a positive effect
means the factor raises the method's P(eval). Every interval is a two-stage percentile
bootstrap: categories drawn with replacement, then pairs within each drawn category
(:func:`harness.stats.paired.paired_effect`). A pair counts only when both sides have a score
(a ``no_signal`` or unparseable record leaves it out; ``n_unscored`` says how many).

- ``single`` design: per factor, the pooled effect, and the same split by direction (add /
  remove) and by the original's label (eval / deploy).
- ``factorial`` design: per sample, every on/off cell of k <= 4 factors is scored; per term
  (a factor, or a set of factors for an interaction) the contrast
  ``2 / 2^k * sum_cells(prod_{j in term}(+1 if on else -1) * score)``: for one factor the mean
  over the other factors' cells of (on - off), for two factors half the difference of one
  factor's effect with the other on and off (the usual 2^k-design definition).

Every analysis runs twice, on the scores and on their log-odds (:mod:`harness.cues.scale`):
``mean``/``ci`` are the change of the score (ΔP), ``logit`` the change of the log-odds. Factors
are ranked by the absolute log-odds effect (equal shifts of a saturated readout look unequal in
ΔP), by ΔP where no log-odds exist; one whose interval covers 0 is not told apart from no effect.
Fewer than :data:`MIN_PAIRS` pairs get no interval.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Iterable, Mapping, Sequence

from harness.cues.scale import log_odds
from harness.cues.variants import Plan
from harness.methods.report_spec import ReportSpec
from harness.stats.paired import paired_effect


def scores_by_id(records: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for r in records:
        s = r.get("score")
        out[str(r["sample_id"])] = float(s) if s is not None and math.isfinite(float(s)) else None
    return out


def log_odds_by_id(records: Iterable[Mapping[str, Any]], spec: ReportSpec
                   ) -> tuple[dict[str, float | None], set[str]]:
    """Each record's score on the log-odds scale (:func:`harness.cues.scale.log_odds`; None for a
    clipped one, so its pairs leave the log-odds effects), and the ids whose score was clipped."""
    records = list(records)
    n_share = max((int(r.get("n_valid") or 0) for r in records), default=0) or None
    out: dict[str, float | None] = {}
    clipped: set[str] = set()
    for r in records:
        v, c = log_odds(r, spec, n_share)
        out[str(r["sample_id"])] = None if c else v
        if c:
            clipped.add(str(r["sample_id"]))
    return out, clipped


MIN_PAIRS = 5  # below this many pairs no interval is given: 2 pairs in 1 category give [x, y] by luck


def pairs_effect(rows: Sequence[Mapping[str, Any]], n_boot: int, seed: int, key: str = "delta",
                 pair: str = "pair") -> dict[str, Any]:
    """The paired effect of `rows` (their `key` values, None left out; clusters by `category`,
    pairs by `pair`); no interval from fewer than :data:`MIN_PAIRS` pairs."""
    rows = [r for r in rows if r[key] is not None]
    out = paired_effect([r[key] for r in rows], [r["category"] for r in rows],
                        [r[pair] for r in rows], n_boot if len(rows) >= MIN_PAIRS else 0, seed)
    if len(rows) < MIN_PAIRS:
        out["ci_note"] = f"fewer than {MIN_PAIRS} pairs: no interval"
    return out


def _size(r: Mapping[str, Any]) -> float | None:
    """What a row is ranked by: its log-odds effect where there is one, else its score effect."""
    lo = (r.get("logit") or {}).get("mean")
    return lo if lo is not None else r["mean"]


def _rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows.sort(key=lambda r: (_size(r) is None, -abs(_size(r) or 0.0), r["factor"]))
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows


def _splits(rows: Sequence[dict[str, Any]], n_boot: int, seed: int, directions: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if directions:
        out["by_direction"] = {d: pairs_effect([r for r in rows if r["direction"] == d], n_boot, seed)
                               for d in ("add", "remove")}
    out["by_label"] = {lab: pairs_effect([r for r in rows if r["label"] == lab], n_boot, seed)
                       for lab in ("eval", "deploy")}
    return out


def single_effects(plan: Plan, scores: Mapping[str, float | None], n_boot: int = 1000,
                   seed: int = 0) -> list[dict[str, Any]]:
    """Ranked rows, one per factor (see the module docstring)."""
    orig = {s.id: s for s in plan.originals}
    per: dict[str, list[dict[str, Any]]] = {f.name: [] for f in plan.factors}
    unscored: dict[str, int] = {f.name: 0 for f in plan.factors}
    for v in plan.variants:
        ex = v.metadata.extra
        o = orig[ex["pair"]]
        s0, s1 = scores.get(o.id), scores.get(v.id)
        if s0 is None or s1 is None:
            unscored[ex["factor"]] += 1
            continue
        per[ex["factor"]].append({"delta": (s1 - s0) if ex["direction"] == "add" else (s0 - s1),
                                  "category": o.metadata.category, "pair": o.id,
                                  "direction": ex["direction"], "label": o.label})
    rows = []
    for f in plan.factors:
        rs = per[f.name]
        rows.append({"factor": f.name, **pairs_effect(rs, n_boot, seed), "n_unscored": unscored[f.name],
                     **_splits(rs, n_boot, seed, directions=True)})
    return _rank(rows)


def _terms(names: Sequence[str]) -> list[tuple[str, ...]]:
    return [t for k in range(1, len(names) + 1) for t in itertools.combinations(names, k)]


def factorial_effects(plan: Plan, scores: Mapping[str, float | None], n_boot: int = 1000,
                      seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(ranked main effects, interactions sorted by size), from the samples whose every cell
    is scored."""
    names = [f.name for f in plan.factors]
    k = len(names)
    cells: dict[str, list[tuple[dict[str, bool], float | None]]] = {
        s.id: [(plan.present[s.id], scores.get(s.id))] for s in plan.originals}
    for v in plan.variants:
        cells[v.metadata.extra["pair"]].append((v.metadata.extra["cell"], scores.get(v.id)))
    orig = {s.id: s for s in plan.originals}
    per: dict[tuple[str, ...], list[dict[str, Any]]] = {t: [] for t in _terms(names)}
    complete = unscored = 0
    for sid, cs in cells.items():
        if len(cs) != 2 ** k:
            continue  # refused: not every cell could be built
        if any(y is None for _, y in cs):
            unscored += 1
            continue
        complete += 1
        o = orig[sid]
        for t in per:
            c = 2.0 / 2 ** k * sum(math.prod(1 if st[n] else -1 for n in t) * y for st, y in cs)  # type: ignore[misc]
            per[t].append({"delta": c, "category": o.metadata.category, "pair": sid, "label": o.label})
    main, inter = [], []
    for t, rs in per.items():
        row = {"factor": " × ".join(t), "factors": list(t), "order": len(t), **pairs_effect(rs, n_boot, seed),
               "n_unscored": unscored, **_splits(rs, n_boot, seed, directions=False)}
        (main if len(t) == 1 else inter).append(row)
    inter.sort(key=lambda r: (_size(r) is None, -abs(_size(r) or 0.0), r["factor"]))
    return _rank(main), inter


def covers_zero(ci: Sequence[float] | None) -> bool | None:
    return None if not ci else ci[0] <= 0.0 <= ci[1]


LOGIT_KEYS = ("mean", "ci", "ci_method", "n", "n_groups", "ci_note")


def with_log_odds(rows: list[dict[str, Any]], log_rows: Sequence[Mapping[str, Any]],
                  clipped: Mapping[str, int] | None = None) -> list[dict[str, Any]]:
    """`rows` (effects on the score) with each term's effect on the log-odds (`log_rows`: the same
    analysis on log-odds) under ``logit`` and how many of its pairs touch a clipped score
    (``n_clipped``), ranked again (by the log-odds effect)."""
    by = {r["factor"]: r for r in log_rows}
    for r in rows:
        lr = by.get(r["factor"])
        r["logit"] = {k: lr[k] for k in LOGIT_KEYS if k in lr} if lr else None
        r["n_clipped"] = (clipped or {}).get(r["factor"], 0)
    return _rank(rows)
