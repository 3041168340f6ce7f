"""One declared rule for every steering verdict: does the vector move a method more than every
control? The same rule for an awareness readout and for a behaviour (issue 45).

Declared before any steering data were read (2026-11-29, before `make steer-controls`'s first
report). For each method and each alpha != 0 with a vector and controls:

- the family is every (method, alpha) row of the report; each interval is at the Bonferroni level
  0.05 / family size, over whole categories (:func:`probes.steering.report._mean_ci`: the cluster
  bootstrap, or the cluster-jackknife t interval below SMALL_SAMPLE_UNITS categories);
- the vector's effect is its paired change against alpha 0 on the samples every condition of
  that alpha scored (`delta`); an interval covering 0, or none (no sample changed), is
  ``not shown to move it``;
- the strongest control is the random direction or unrelated contrast with the largest |delta|;
  the comparison is per sample, |vector effect| − |strongest control's effect| (each effect
  signed by its own mean change, so a control moving the method the other way counts as much as
  one moving it the same way); its interval above 0 is ``moves it more than every control``
  (which also puts the vector at rank 1 by |delta|); otherwise ``moves it, not shown more than
  every control``;
- fewer than :data:`MIN_CATEGORIES` categories, no controls, or no common samples: ``no verdict``.

The strongest control is chosen by its outcome, which makes the test harder for the vector to
pass, never easier.
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
        f"over categories at the Bonferroni level 0.05 / the number of (method, alpha) rows; the "
        f"vector's paired change against alpha 0 with an interval covering 0 (or no sample "
        f"changed): '{NOT_SHOWN}'; per sample |vector effect| − |strongest control's effect| "
        f"(strongest by |delta| among the random directions and unrelated contrasts, each effect "
        f"signed by its own mean change) with its interval above 0: '{MORE}'; else '{NOT_MORE}'; "
        f"fewer than {MIN_CATEGORIES} categories, no controls or no common samples: '{NO_VERDICT}'.")


def _fmt_ci(ci: Any) -> str:
    return "no interval" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"


def steer_verdict(method: str, alpha: float, vector: dict[str, Any], controls: Sequence[dict[str, Any]],
                  scores: dict[str, dict[str, float]], base: dict[str, float], ids: Sequence[str],
                  groups: dict[str, str], level: float, mean_ci: Any) -> dict[str, Any]:
    """The verdict of one (method, alpha) row under the rule above. `scores`: per condition name,
    sample id -> score; `base`: the unsteered scores; `ids`: the samples compared (scored in every
    condition of the alpha and at alpha 0); `mean_ci(values, level)` -> (mean, ci, rule)."""
    ids = [i for i in ids if i in base and i in scores.get(vector["condition"], {})]
    n_cat = len({groups.get(i, i) for i in ids})
    out: dict[str, Any] = {"method": method, "alpha": alpha, "n": len(ids), "n_categories": n_cat,
                           "ci_level": 1 - level, "n_controls": len(controls)}

    def say(kind: str, detail: str) -> dict[str, Any]:
        out["kind"] = kind
        out["sentence"] = f"{method} at alpha {alpha:+g}: {kind}" + (f" ({detail})" if detail else "")
        return out

    if not ids or not controls:
        return say(NO_VERDICT, "no common samples" if not ids else "no controls")
    if n_cat < MIN_CATEGORIES:
        return say(NO_VERDICT, f"{n_cat} categories, fewer than {MIN_CATEGORIES}")
    vs = scores[vector["condition"]]
    dv = {i: vs[i] - base[i] for i in ids}
    d, d_ci, rule = mean_ci(list(dv.items()), level)
    out.update({"vector_delta": d, "vector_delta_ci": d_ci, "ci_method": rule})
    where = f"{len(ids)} samples, {n_cat} categories; {100 * (1 - level):.2f}% intervals"
    if d_ci is None or d_ci[0] <= 0 <= d_ci[1]:
        why = "no sample changed" if d_ci is None and all(v == 0 for v in dv.values()) else ""
        return say(NOT_SHOWN, f"vector delta {d:+.3f} {_fmt_ci(d_ci)}; {why + '; ' if why else ''}{where}")
    top = max(controls, key=lambda r: abs(r["delta"]))
    cs = scores[top["condition"]]
    sv = 1.0 if d >= 0 else -1.0
    sc = 1.0 if top["delta"] >= 0 else -1.0
    gap = [(i, sv * dv[i] - sc * (cs[i] - base[i])) for i in ids]
    g, g_ci, _ = mean_ci(gap, level)
    every = [r["delta"] for r in controls]
    rank = 1 + sum(abs(x) >= abs(d) for x in every)
    name = top.get("contrast") or top["condition"]
    out.update({"strongest_control": {"condition": top["condition"], "name": name, "delta": top["delta"]},
                "gap": g, "gap_ci": g_ci, "rank": rank})
    detail = (f"vector delta {d:+.3f} {_fmt_ci(d_ci)}; strongest control {name} {top['delta']:+.3f}; "
              f"|vector| − |strongest| {g:+.3f} {_fmt_ci(g_ci)}; rank {rank} of {len(every) + 1} by |delta|; "
              f"{where}")
    return say(MORE if g_ci is not None and g_ci[0] > 0 else NOT_MORE, detail)


def family_level(n_rows: int) -> float:
    """The Bonferroni level of each interval in a family of `n_rows` verdicts."""
    return 0.05 / max(int(n_rows), 1)


def tally(verdicts: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many rows got each verdict kind."""
    return {k: sum(v["kind"] == k for v in verdicts) for k in KINDS}
