"""Agreement between methods: the declared pairs' kappa tables (the paper's Table 1), every pair
with a heatmap, and kappa vs number of votes (the paper's footnote 3)."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.stats import summaries as S
from harness.reporting.context import ReportContext
from harness.reporting.doc import ci, lit, rules_note, slug
from harness.reporting.runs import human_name

MIN_VOTES_EXPERIMENT = 25


def kappa_section(ctx: ReportContext) -> None:
    d = ctx.doc
    d.h(2, "Agreement between methods (Cohen's kappa)")
    d.p("Kappa on the samples both methods decided (undecided/unparseable samples left out; "
        "n = shared decided samples). – = undefined (both methods constant and equal on the shared "
        "samples). `(no interval)`: every resample gives the same kappa (one method constant on the "
        "shared samples gives 0 throughout), so there is no measure of its uncertainty. The rules "
        "of the intervals are named under each table (resampling unit in the `resampled` column).")
    kw = {"n_boot": ctx.n_boot, "seed": ctx.seed, "ci_by": ctx.ci_by}
    for a, b, pair in ctx.specs.pairs():
        rows, rules = [], []
        for r in ctx.runs:
            if a in r.records and b in r.records:
                v = S.kappa_pairs({a: r.records[a], b: r.records[b]}, **kw)[tuple(sorted((a, b)))]
                rows.append([r.label, kappa_cell(v, ctx.n_boot), v["n"], v["ci_by"]])
                rules.append(v["ci_method"])
        if rows:
            d.h(3, pair.title)
            d.table(["model", "kappa [95% CI]", "n", "resampled"], rows)
            d.p(rules_note("Interval rules", rules))
    for r in ctx.runs:
        recs = dict(r.records)
        names = ctx.specs.order(recs)
        if ctx.human[r.label]:
            names.append(human_name(ctx.human[r.label]))
            recs[names[-1]] = ctx.human[r.label]
        if len(names) < 2:
            continue
        pairs = S.kappa_pairs(recs, **kw)
        mat = np.full((len(names), len(names)), np.nan)
        rows, rules = [], []
        for i, a in enumerate(names):
            mat[i, i] = 1.0
            for j, b in enumerate(names):
                if i < j:
                    v = pairs[tuple(sorted((a, b)))]
                    mat[i, j] = mat[j, i] = np.nan if v["kappa"] is None else v["kappa"]
                    rows.append([a, b, kappa_cell(v, ctx.n_boot), v["n"]])
                    rules.append(v["ci_method"])
        d.h(3, f"All pairs: {lit(r.label)}")
        d.table(["method", "method", "kappa [95% CI]", "n"], rows)
        d.p(rules_note("Interval rules", rules))
        path = ctx.plots.kappa_heatmap(ctx.out / f"kappa_{slug(r.label)}.png", names, mat,
                                       f"Cohen's kappa: {r.label}")
        d.fig(path, ctx.caption("Pairwise Cohen's kappa", [r]))


def kappa_cell(v: dict[str, Any], n_boot: int) -> str:
    """A kappa with its interval, or said to have none where the rule gave none."""
    if v["kappa"] is not None and v["ci"] is None and n_boot:
        return f"{v['kappa']:.3f} (no interval)"
    return ci(v["kappa"], v["ci"])


def vote_count_section(ctx: ReportContext) -> None:
    """Kappa vs number of votes for every declared pair with ``votes_experiment``: the partner's
    votes aggregated by majority, the declaring method's by mean >= 0.5
    (:func:`harness.stats.summaries.vote_count_experiment`)."""
    pairs = [(a, b, p) for a, b, p in ctx.specs.pairs() if p.votes_experiment]
    if not pairs:
        return
    d = ctx.doc
    d.h(2, "Kappa vs number of votes")
    for a, b, pair in pairs:
        curves, used, rows = {}, [], []
        for r in ctx.runs:
            if a not in r.records or b not in r.records:
                continue
            va, vb = S.votes_by_sample(r.records[a]), S.votes_by_sample(r.records[b])
            shared = set(va) & set(vb)
            if not shared or min(min(len(va[s]), len(vb[s])) for s in shared) < MIN_VOTES_EXPERIMENT:
                continue
            res = S.vote_count_experiment(va, vb, seed=ctx.seed)
            if res:
                curves[r.label] = res
                used.append(r)
                rows += [[r.label, x["n_votes"], x["kappa_mean"], f"[{x['ci_low']:.3f}, {x['ci_high']:.3f}]",
                          x["n_samples"]] for x in res]
        if not curves:
            d.p(f"Not run: needs {a} and {b} runs with at least {MIN_VOTES_EXPERIMENT} "
                "answers per sample (e.g. `--n-votes 25 --temperature 0.7`).")
            continue
        d.p("From each sample's answers, n are drawn without replacement (100 times, seeded) for "
            f"each method, aggregated as in the method ({pair.aggregation}), and kappa is computed "
            "over the samples both decided. Interval: 2.5–97.5 percentiles over the draws.")
        d.table(["model", "votes", "mean kappa", "95% interval", "samples"], rows)
        name = "vote_count.png" if len(pairs) == 1 else f"vote_count_{slug(a)}_{slug(b)}.png"
        path = ctx.plots.vote_count_curve(ctx.out / name, curves)
        d.fig(path, ctx.caption(f"Cohen's kappa between {a} and {b} vs number of votes (band: "
                                "2.5–97.5 percentiles over 100 seeded draws of the votes)", used))
