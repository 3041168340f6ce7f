"""The dataset's surface audit next to the methods (`evalaware data audit`)."""

from __future__ import annotations

from typing import Any

from harness.core.errors import EvalAwareError
from harness.reporting.context import ReportContext
from harness.reporting.doc import ci


def audit_section(ctx: ReportContext) -> None:
    """The dataset's surface audit and each method's AUROC minus the best surface predictor's,
    so a method is read against what surface cues alone give."""
    d = ctx.doc
    d.h(2, "Surface baselines (data audit)")
    d.p("What surface features alone reach on the run's samples and view, without any model: "
        "grouped-CV AUROC (by category) of case-sensitive char n-gram TF-IDF, word TF-IDF, "
        "length, first-character case and answer-format cues, with intervals that resample "
        "categories (`evalaware data audit`; see `harness/data/audit.py`). `method − best surface` "
        "is the method's AUROC minus the best surface predictor's; near or below 0, the "
        "method shows nothing beyond what the prompt's surface gives away.")
    from harness.data.audit import audit  # scikit-learn (~1.4 s): kept out of the CLI's start-up

    done: dict[tuple[Any, ...], Any] = {}
    rows = []
    for r in ctx.runs:
        view = r.config().get("view", "first_turn")
        key = (tuple(s.id for s in r.samples), view)
        if key not in done:
            try:
                done[key] = audit(r.samples, view=view, n_boot=ctx.n_boot, seed=ctx.seed)
            except EvalAwareError as e:
                done[key] = str(e)
            res = done[key]
            if isinstance(res, str):
                d.p(f"{r.label}: audit not run: {res}")
                continue
            d.p(f"{r.label}: " + res.lines()[0] + ".")
            d.table(["predictor", "AUROC [95% CI]", "eval with cue", "deploy with cue",
                     f">= {res.threshold:.2f}", "what"], res.table_rows())
            for w in res.warnings:
                d.p("**Warning:** " + w + ".")
            for n in res.notes:
                d.p("Note: " + n + ".")
        res = done[key]
        best = None if isinstance(res, str) else res.best()
        if best is None:
            continue
        for m, s in [(m, ctx.summ[(m, r.label)]) for m in ctx.present(r)] + ctx.human_row(r):
            diff = None if s["auroc"] is None else s["auroc"] - best.auroc
            rows.append([r.label, m, ci(s["auroc"], s["auroc_ci"]), best.name,
                         ci(best.auroc, None if best.ci_lo is None else (best.ci_lo, best.ci_hi)),
                         "–" if diff is None else f"{diff:+.3f}"])
    if rows:
        d.table(["model", "method", "AUROC [95% CI]", "best surface predictor",
                 "its AUROC [95% CI]", "method − best surface"], rows)
