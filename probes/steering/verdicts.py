"""One declared rule for every steering verdict: does the vector move a method more than every
control? The same rule for an awareness readout and for a behaviour (issue 45).

Declared before any steering data were read (2026-11-29, before `make steer-controls`'s first
report; revised the same day, still before it, after a review found that testing the strongest
control alone is not conservative). For each method and each alpha != 0 with a vector and controls:

- the family is every (method, alpha) row of the report; each interval is at the Bonferroni level
  0.05 / family size, over whole categories (:func:`probes.steering.report._mean_ci`: the cluster
  bootstrap, or the cluster-jackknife t interval below SMALL_SAMPLE_UNITS categories, where a
  t approximation carries it);
- the vector's effect is its paired change against alpha 0 on the samples every condition of
  that alpha scored (`delta`); an interval covering 0 is ``not shown to move it``;
- against every control (each random direction and each unrelated contrast), per sample: the
  vector's change signed by its own direction, minus the control's change and plus it; both
  intervals above 0 say |the vector's mean change| > |the control's| whichever way the control
  moves. All 2 x controls intervals above 0: ``moves it more than every control``, else
  ``moves it, not shown more than every control`` (an intersection-union test: the claim needs
  every comparison, so no correction over controls is due);
- an interval of zero width (every category's mean change the same, e.g. a 0/1 behaviour flipping
  alike everywhere: the jackknife has nothing to go on) is replaced by an exact sign-flip test over
  the categories (two-sided p = 2^(1 - categories) when all agree): within the level it is shown,
  a mean not above 0 is not, otherwise it cannot be decided;
- ``no verdict``: fewer than :data:`MIN_CATEGORIES` categories, no controls or fewer than the plan
  holds, no common samples, or a comparison that cannot be decided while none fails (a failed one
  gives ``moves it, not shown more than every control`` whatever the others).

What is compared is the mean (net) change: a direction that scatters samples both ways with no
net shift counts as a change of 0; the mean |per-sample change| is shown beside it.
"""

from __future__ import annotations

from typing import Any, Sequence

MIN_CATEGORIES = 4
MORE = "moves it more than every control"
NOT_MORE = "moves it, not shown more than every control"
NOT_SHOWN = "not shown to move it"
NO_VERDICT = "no verdict"
KINDS = (MORE, NOT_MORE, NOT_SHOWN, NO_VERDICT)

RULE = (f"Verdicts, one declared rule for every method (readout or behaviour) and alpha: intervals "
        f"over categories at the Bonferroni level 0.05 / the number of (method, alpha) rows of this report; "
        f"the vector's paired change against alpha 0 with an interval covering 0: '{NOT_SHOWN}'; against "
        f"each random direction and unrelated contrast, per sample the vector's change signed by its own "
        f"direction minus and plus the control's change, every one of these intervals above 0 (|mean "
        f"change| larger than each control's, whichever way it moves): '{MORE}', one of them not above 0: "
        f"'{NOT_MORE}'; an interval of zero width (every category alike) is replaced by an exact sign-flip "
        f"test over categories (p = 2^(1 - categories)); fewer than {MIN_CATEGORIES} categories, fewer "
        f"controls than planned, no common samples, or a comparison that cannot be decided: '{NO_VERDICT}'. "
        f"Mean (net) changes are compared; mean |per-sample change| is shown beside them.")


def _fmt_ci(ci: Any) -> str:
    return "no interval" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"


def steer_verdict(method: str, alpha: float, vector: dict[str, Any], controls: Sequence[dict[str, Any]],
                  scores: dict[str, dict[str, float]], base: dict[str, float], ids: Sequence[str],
                  groups: dict[str, str], level: float, mean_ci: Any,
                  planned: int | None = None) -> dict[str, Any]:
    """The verdict of one (method, alpha) row under the rule above. `scores`: per condition name,
    sample id -> score; `base`: the unsteered scores; `ids`: the samples compared (scored in every
    condition of the alpha and at alpha 0); `mean_ci(values, level)` -> (mean, ci, rule);
    `planned`: the controls the plan holds at this alpha (fewer present: no verdict)."""
    ids = [i for i in ids if i in base and i in scores.get(vector["condition"], {})]
    n_cat = len({groups[i] for i in ids})
    out: dict[str, Any] = {"method": method, "alpha": alpha, "n": len(ids), "n_categories": n_cat,
                           "ci_level": 1 - level, "n_controls": len(controls), "n_planned": planned}

    def say(kind: str, detail: str) -> dict[str, Any]:
        out["kind"] = kind
        out["sentence"] = f"{method} at alpha {alpha:+g}: {kind}" + (f" ({detail})" if detail else "")
        return out

    if not ids or not controls:
        return say(NO_VERDICT, "no common samples" if not ids else "no controls")
    if planned is not None and len(controls) < planned:
        return say(NO_VERDICT, f"{len(controls)} of the {planned} planned controls scored")
    if n_cat < MIN_CATEGORIES:
        return say(NO_VERDICT, f"{n_cat} categories, fewer than {MIN_CATEGORIES}")
    vs = scores[vector["condition"]]
    dv = {i: vs[i] - base[i] for i in ids}
    d, d_ci, rule = mean_ci(list(dv.items()), level)
    out.update({"vector_delta": d, "vector_delta_ci": d_ci, "ci_method": rule,
                "vector_mean_abs": float(sum(abs(x) for x in dv.values()) / len(dv))})
    where = f"{len(ids)} samples, {n_cat} categories; {100 * (1 - level):.2f}% intervals"
    if d_ci is None and all(v == 0 for v in dv.values()):
        return say(NOT_SHOWN, f"vector delta {d:+.3f}, no sample changed; {where}")
    moved = _above(abs(d), None, n_cat, level) if d_ci is None else not (d_ci[0] <= 0 <= d_ci[1])
    shown = _fmt_ci(d_ci) if d_ci is not None else f"(every category alike: sign-flip p {2.0 ** (1 - n_cat):.3g})"
    if moved is False:
        return say(NOT_SHOWN, f"vector delta {d:+.3f} {shown}; {where}")
    if moved is None:
        return say(NO_VERDICT, f"vector delta {d:+.3f} {shown}: every category changed by the same amount, too "
                               f"few categories for an exact sign-flip test at this level; {where}")
    sv = 1.0 if d > 0 else -1.0
    worst: dict[str, Any] | None = None
    states, mean_abs = [], []
    for c in controls:
        cs = scores[c["condition"]]
        dc = {i: cs[i] - base[i] for i in ids}
        mean_abs.append(float(sum(abs(x) for x in dc.values()) / len(dc)))
        for sign in (-1.0, 1.0):  # minus and plus the control's change: beaten whichever way it moves
            g, g_ci, _ = mean_ci([(i, sv * dv[i] + sign * dc[i]) for i in ids], level)
            state = _above(g, g_ci, n_cat, level)
            states.append(state)
            low = g_ci[0] if g_ci is not None else g
            if worst is None or low < worst["low"]:
                worst = {"condition": c["condition"], "name": c.get("contrast") or c["condition"],
                         "delta": c["delta"], "sign": sign, "gap": g, "gap_ci": g_ci, "low": low,
                         "mean_abs": mean_abs[-1]}
    assert worst is not None
    every = [r["delta"] for r in controls]
    rank = 1 + sum(abs(x) >= abs(d) for x in every)
    top_abs = max(mean_abs)
    out.update({"least_beaten_control": worst, "rank": rank, "controls_mean_abs_max": top_abs})
    kind = NOT_MORE if False in states else NO_VERDICT if None in states else MORE
    gap_ci = _fmt_ci(worst["gap_ci"]) if worst["gap_ci"] is not None else "(no interval: every category alike)"
    detail = (f"{'raises' if sv > 0 else 'lowers'} it: vector delta {d:+.3f} {shown}; the control it is least "
              f"shown to beat: {worst['name']} (delta {worst['delta']:+.3f}), the vector's change minus the "
              f"control's, {_frame(worst['sign'], sv)}: {worst['gap']:+.3f} {gap_ci}; rank {rank} "
              f"of {len(every) + 1} by |delta|; mean |per-sample change| vector {out['vector_mean_abs']:.3f}, "
              f"controls up to {top_abs:.3f}; {where}")
    return say(kind, detail)


def _frame(sign: float, sv: float) -> str:
    """What one comparison measures: sv * dv + sign * dc is the vector's change minus the control's
    along the vector's direction (sign = -sv) or with the control taken the other way (sign = sv)."""
    return "along the vector's direction" if sign == -sv else "the control taken the other way"


def _above(mean: float, ci: Any, n_cat: int, level: float) -> bool | None:
    """Is the quantity shown above 0? With an interval: its lower bound above 0. Without one (zero
    width: every category's mean is the same): an exact sign-flip test over the categories, whose
    two-sided p is 2^(1 - categories) when they all agree: True where that is within `level` and
    the mean is above 0, False where the mean is not above 0, None (undecidable) otherwise."""
    if ci is not None:
        return bool(ci[0] > 0)
    if mean <= 0:
        return False
    return True if 2.0 ** (1 - n_cat) <= level else None


def family_level(n_rows: int) -> float:
    """The Bonferroni level of each interval in a family of `n_rows` verdicts."""
    return 0.05 / max(int(n_rows), 1)


def tally(verdicts: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many rows got each verdict kind."""
    return {k: sum(v["kind"] == k for v in verdicts) for k in KINDS}
