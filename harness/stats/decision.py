"""One decision rule for every readout, declared before the data (issue 44, item 3).

The rule, in order; every readout (a method, the monitor, a frozen probe) is judged by it alike:

1. **Statistic**: the mean over pairs of the within-pair *double difference* on the readout's
   log-odds scale (nats): [lo(cue) - lo(no cue)] on the model minus the same on the reference.
2. **Uncertainty**: a multiway cluster-robust standard error over what varies between pairs: the
   category, the cue phrasing and the template that built the pair (Cameron, Gelbach & Miller
   2011: the inclusion-exclusion sum of the one-way variances of every intersection of the
   dimensions, each with its G/(G-1) factor; where that is not positive, the largest one-way
   variance). **Builds**: a side of a comparison that is builds of a recipe (an organism kind's
   seeds; a sham reference's; never the base, which is one fixed model) adds its builds' variance.
   One build-to-build variance is pooled over the sides of the comparison with B >= 2 builds,
   s2 = sum (B_i - 1) s_i^2 / sum (B_i - 1), and enters as ONE part, s2 x sum c_i^2 / B_i over
   every such side (c_i its coefficient in the statistic; a side of one build borrows s2 from the
   others rather than counting none), with sum (B_i - 1) df (:func:`builds_part`); where no side
   has two builds there is no such part and the inference is conditional on those builds (the
   verdict line says so). The t reference's degrees of freedom are Welch-Satterthwaite's over the
   clustered part (min(G) - 1) and the builds' part (:func:`satterthwaite`), capped at
   min(G) - 1 (few or unbalanced clusters: the clustered part's df already over-states).
3. **Primary family**: one test per row, corrected together with Holm's step-down at ``alpha``:
   a *sensitivity* row's difference from 0; a *specificity* or *null* row's equivalence (where it
   has a margin; else its difference). A specificity or null row's difference, where its
   equivalence is primary, is a secondary family, Holm-corrected apart.
4. **Verdicts**: sensitivity rows: ``sensitive`` (adjusted p < ``alpha``, effect > 0) or
   ``inverted`` (< 0), else ``not shown sensitive``. Specificity and null rows: ``equivalent``
   (the equivalence's adjusted p < ``alpha``), ``moved`` (the difference's adjusted p <
   ``alpha``), ``equivalent, and moved`` (both: small but not zero), else ``inconclusive``.
   Fewer than ``min_units`` clusters in a dimension, or no variance: ``no verdict``. With seeds,
   ``sensitive``/``inverted``/``moved`` also need every build's estimate (against the pooled
   reference) on the pooled sign, and ``equivalent`` every build's estimate inside the margin.
5. **Margin**: with a fixed ``margin_nats``, the two one-sided tests of |mean| < margin (TOST).
   Otherwise relative, ``margin_share`` (c) of the size of the readout's own aware effect, tested
   on the per-pair contrasts so that the margin's own uncertainty counts: mean(dd - c s dd_aware)
   < 0 and mean(dd + c s dd_aware) > 0, s the sign of mean(dd_aware) (an ``inverted`` aware effect
   sets the margin by its size, as a positive one does; each one-sided, the larger p); a readout
   without an aware row has no margin. A null row (the reference against the base) takes the
   aware effect against the base.
6. **Intervals**: each row prints its (1 - alpha) t interval and the Bonferroni interval at
   alpha / m over the primary family (simultaneous; Holm's own steps give no interval).

Everything here is pure (numbers in, numbers out); :mod:`harness.organisms.verdicts` applies it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from itertools import combinations
from typing import Any, Sequence

import numpy as np

#: The verdict kinds a row can get, whatever the readout.
VERDICTS = ("sensitive", "inverted", "not shown sensitive", "equivalent", "equivalent, and moved", "moved",
            "inconclusive", "no verdict")


@dataclass(frozen=True)
class Rule:
    """The declared rule's parameters (one place; printed with every table)."""

    alpha: float = 0.05
    margin_share: float = 0.5
    margin_nats: float | None = None
    min_units: int = 4

    def describe(self) -> str:
        margin = (f"+-{self.margin_nats:g} nats" if self.margin_nats is not None else
                  f"+-{self.margin_share:g} x the readout's aware effect, its uncertainty included")
        return (f"statistic: mean within-pair double difference on the readout's log-odds scale (nats); SE "
                f"cluster-robust over category, phrasing and template (+ the build-to-build variance pooled over "
                f"the sides with >= 2 builds, x sum c^2/B over every side of builds: one build borrows it; one build "
                f"a side: none, inference conditional on those builds), t with the Welch-Satterthwaite df of the "
                f"two parts (clustered: min(G)-1; builds: sum(B-1)) capped at min(G)-1; Holm at "
                f"{self.alpha:g} over one primary test per row; sensitive = adjusted p < "
                f"{self.alpha:g} and > 0; specific/null = equivalence within {margin}; fewer than "
                f"{self.min_units} clusters: no verdict")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Estimate:
    """A mean with its cluster-robust standard error and degrees of freedom (Welch-Satterthwaite's,
    so not always whole); `units`: the number of clusters in each dimension."""

    mean: float
    se: float
    df: float
    n: int
    units: tuple[int, ...]

    @property
    def min_units(self) -> int:
        return min(self.units) if self.units else 0

    def interval(self, level_alpha: float) -> tuple[float, float]:
        """The two-sided (1 - level_alpha) t interval."""
        from scipy.stats import t

        h = float(t.ppf(1 - level_alpha / 2, self.df)) * self.se
        return self.mean - h, self.mean + h

    def p_diff(self) -> float:
        """Two-sided p of mean = 0."""
        from scipy.stats import t

        if not self.se > 0:
            return 0.0 if self.mean != 0 else 1.0
        return float(2 * t.sf(abs(self.mean) / self.se, self.df))

    def p_below(self) -> float:
        """One-sided p of mean >= 0 (small where the mean is surely below 0)."""
        from scipy.stats import t

        return float(t.cdf(self.mean / self.se, self.df)) if self.se > 0 else float(self.mean >= 0)

    def p_above(self) -> float:
        """One-sided p of mean <= 0 (small where the mean is surely above 0)."""
        from scipy.stats import t

        return float(t.sf(self.mean / self.se, self.df)) if self.se > 0 else float(self.mean <= 0)

    def p_equiv(self, margin: float) -> float:
        """p of the two one-sided tests that |mean| < margin (the larger of the two)."""
        if margin <= 0:
            return 1.0
        return max(shifted(self, margin).p_below(), shifted(self, -margin).p_above())


def shifted(e: Estimate, by: float) -> Estimate:
    """`e` with its mean moved by -`by` (the same SE): for one-sided tests against a bound."""
    return Estimate(e.mean - by, e.se, e.df, e.n, e.units)


def _cluster_var(e: np.ndarray, keys: Sequence[str]) -> tuple[float, int]:
    """Cluster-robust variance of a mean from residuals `e` clustered by `keys` (G/(G-1) factor)."""
    sums: dict[str, float] = {}
    for k, v in zip(keys, e.tolist()):
        sums[k] = sums.get(k, 0.0) + v
    g = len(sums)
    if g < 2:
        return float("nan"), g
    n = len(e)
    return g / (g - 1) * sum(s * s for s in sums.values()) / (n * n), g


#: One independent part of an estimate's variance: (variance, its degrees of freedom).
Component = tuple[float, float]


def satterthwaite(parts: Sequence[Component]) -> float:
    """The Welch-Satterthwaite degrees of freedom of a sum of independent variance estimates
    (v_i, df_i): (sum v_i)^2 / sum(v_i^2 / df_i). Parts with no variance drop out; none left:
    the first part's df."""
    live = [(v, d) for v, d in parts if v > 0]
    if not live:
        return float(parts[0][1]) if parts else float("nan")
    return sum(v for v, _ in live) ** 2 / sum(v * v / d for v, d in live)


#: One side of a comparison made of builds of a recipe: (each build's estimate, none for one build;
#: the number of builds B; the side's coefficient c in the statistic).
Side = tuple[Sequence[float], int, float]


def builds_part(sides: Sequence[Side]) -> list[Component]:
    """The builds' part of a variance (module docstring, step 2): the build-to-build variance
    pooled over the `sides` with B >= 2 builds, s2 = sum (B_i - 1) s_i^2 / sum (B_i - 1), times
    sum c_i^2 / B_i over every side (one build included: it borrows s2), as one part with
    sum (B_i - 1) df; none where no side has two builds (the inference is then conditional on them)."""
    pooled = [(float(np.var(m, ddof=1)), b - 1) for m, b, _ in sides if b >= 2 and len(m) == b]
    if not pooled:
        return []
    df = sum(d for _, d in pooled)
    s2 = sum(v * d for v, d in pooled) / df
    return [(s2 * sum(c * c / b for _, b, c in sides), float(df))]


def conditional_on_builds(sides: Sequence[Side]) -> bool:
    """No side of the comparison has two builds: no build-to-build variance to count, so the
    inference is about these builds, not their recipes."""
    return not any(b >= 2 for _, b, _ in sides)


def multiway_mean(values: Sequence[float], dims: Sequence[Sequence[Any]], extra: Sequence[Component] = ()
                  ) -> Estimate | None:
    """Mean of `values` with the multiway cluster-robust SE over `dims` (one key list per
    dimension; module docstring, step 2) plus the independent parts `extra` (each (variance, df):
    the builds'), the t's df Welch-Satterthwaite's over the clustered part (min(G) - 1) and
    `extra`, capped at min(G) - 1; None for fewer than two values."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2 or not dims:
        return None
    e = v - v.mean()
    keys = [[str(k) for k in d] for d in dims]
    one_way = [_cluster_var(e, k) for k in keys]
    units = tuple(g for _, g in one_way)
    if not all(math.isfinite(var) for var, _ in one_way):
        return Estimate(float(v.mean()), float("nan"), 0, len(v), units)
    total = 0.0
    for r in range(1, len(keys) + 1):
        for subset in combinations(range(len(keys)), r):
            inter = ["\x1f".join(keys[d][i] for d in subset) for i in range(len(v))]
            var, _ = _cluster_var(e, inter)
            total += (-1) ** (r + 1) * (var if math.isfinite(var) else 0.0)
    if total <= 0:
        total = max(var for var, _ in one_way)
    clustered_df = float(max(min(units) - 1, 1))
    parts = [(max(total, 0.0), clustered_df), *extra]
    df = min(satterthwaite(parts), clustered_df)
    return Estimate(float(v.mean()), math.sqrt(sum(var for var, _ in parts)), df, len(v), units)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order (each capped at 1, monotone)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adj = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adj[i] = running
    return adj


def verdict(role: str, est: Estimate | None, p_diff_adj: float | None, p_equiv_adj: float | None,
            rule: Rule, seeds: Sequence[float] = (), seeds_inside: bool = True) -> str:
    """The verdict kind of one row (module docstring, step 4), the same for every readout;
    `seeds_inside`: every build's estimate lies inside the equivalence margin."""
    if est is None or not math.isfinite(est.se) or est.se <= 0 or est.min_units < rule.min_units:
        return "no verdict"
    same_sign = all(s * est.mean > 0 for s in seeds) if seeds else True
    moved = p_diff_adj is not None and p_diff_adj < rule.alpha and same_sign
    if role == "sensitivity":
        if moved:
            return "sensitive" if est.mean > 0 else "inverted"
        return "not shown sensitive"
    equivalent = p_equiv_adj is not None and p_equiv_adj < rule.alpha and seeds_inside
    if equivalent:
        return "equivalent, and moved" if moved else "equivalent"
    return "moved" if moved else "inconclusive"
