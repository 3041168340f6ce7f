"""The dataset's surface audit next to the methods (`evalaware data audit`)."""

from __future__ import annotations

from harness.stats.metrics import MIN_AUROC_PER_CLASS
from harness.reporting.context import ReportContext
from harness.reporting.doc import ci, label_mass_cell, lit, rules_note


def audit_section(ctx: ReportContext) -> None:
    """The dataset's surface audit and each method's AUROC minus the best surface predictor's,
    so a method is read against what surface cues alone give."""
    d = ctx.doc
    d.h(2, "Surface baselines (data audit)")
    d.p("What surface features alone reach on the run's samples and view, without any model: "
        "grouped-CV AUROC (by category) of case-sensitive char n-gram TF-IDF, word TF-IDF, "
        "length, first-character case and answer-format cues, with intervals over categories "
        "(`evalaware data audit`; see `harness/data/audit.py`). `method − best surface` "
        "is the method's AUROC minus the best surface predictor's, both on the samples the method "
        "scored (`n`: its gated subset), with a paired interval: every category left out (or "
        "resample drawn) weighs the method and every predictor alike and picks the best predictor "
        "again, so choosing the best of several predictors is inside the interval. Near or below "
        "0, the method shows nothing beyond what the prompt's surface gives away. Each table's "
        "interval rules are named under it.")
    shown: set[int] = set()
    rows, auroc_rules, diff_rules = [], [], []
    for r in ctx.runs:
        res = ctx.audit(r)
        if id(res) not in shown:
            shown.add(id(res))
            if isinstance(res, str):
                d.p(f"{lit(r.label)}: audit not run: {lit(res)}")
                continue
            d.p(f"{lit(r.label)}: {lit(res.lines()[0])}.")
            d.table(["predictor", "AUROC [95% CI]", "eval with cue", "deploy with cue",
                     f">= {res.threshold:.2f}", "what"], res.table_rows())
            d.p(rules_note("Interval rules", [x.ci_method for x in res.rows]))
            for w in res.warnings:
                d.p(f"**Warning:** {lit(w)}.")
            for n in res.notes:
                d.p(f"Note: {lit(n)}.")
        best = None if isinstance(res, str) else res.best()
        if best is None:
            continue
        human = dict(ctx.human_row(r))
        for m, s in [(m, ctx.summ[(m, r.label)]) for m in ctx.present(r)] + list(human.items()):
            v = ctx.versus(m, r)
            auroc_rules.append(s.get("auroc_ci_method"))
            if v is None or v["diff"] is None:  # gated, or no surface AUROC on these samples
                rows.append([r.label, m, ci(s["auroc"], s["auroc_ci"]), "–", "–", "–", "–",
                             label_mass_cell(s.get("label_mass"))])
                continue
            diff = f"{v['diff']:+.3f}" + (f" [{v['diff_ci'][0]:+.2f}, {v['diff_ci'][1]:+.2f}]"
                                          if v["diff_ci"] else "")
            diff_rules.append(v.get("diff_ci_method"))
            rows.append([r.label, m, ci(s["auroc"], s["auroc_ci"]), v["n"], v["best"],
                         f"{v['best_auroc']:.3f}", diff, label_mass_cell(s.get("label_mass"))])
    if rows:
        d.table(["model", "method", "AUROC [95% CI]", "n", "best surface predictor (same samples)",
                 "its AUROC", "method − best surface [95% CI]", "label mass"], rows)
        d.p(rules_note("AUROC interval rules", auroc_rules) + " " +
            rules_note("Rules of the difference's intervals", diff_rules))
        d.p(f"`–`: no AUROC (fewer than {MIN_AUROC_PER_CLASS} scored samples per class), or no "
            "surface predictor with one on those samples, so no difference. `label mass`: for "
            "label-probability scores, the options' share of the probability at the label "
            "position (median [10th–90th percentile]) and the votes withheld.")
