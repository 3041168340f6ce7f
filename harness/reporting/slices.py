"""The low base-rate view (TPR at low FPR, precision when evaluations are rare) and the slices
(chat vs agentic, capability vs alignment, category, Inspect task)."""

from __future__ import annotations

from typing import Any

from harness.stats import summaries as S
from harness.reporting.context import ReportContext
from harness.reporting.doc import ci, lit, pct, rules_note

SLICES = {"setting": "Chat vs agentic", "eval_type": "Capability vs alignment",
          "category": "Per category", "task": "Per task (Inspect logs)"}


def base_rate_section(ctx: ReportContext) -> None:
    d, rate = ctx.doc, ctx.base_rate
    d.h(2, f"Low base rate (evaluations = {100 * rate:g}% of traffic)")
    d.p("A detector that looks good on a balanced set can still be useless when evaluations are "
        "rare. TPR at 1% / 5% FPR: the share of eval samples caught at a score threshold that "
        "flags at most that share of deploy samples (with fewer than 100 deploy samples, 1% FPR "
        "means no false positive at all). Precision: the share of eval calls that would be "
        f"evaluations at a {100 * rate:g}% base rate (`--base-rate`), for the method's "
        "own decisions (undecided = deploy) and at the 5% FPR threshold.")
    rows, rules, precision = [], [], []
    for r in ctx.runs:
        for m in ctx.present(r):
            b = S.low_base_rate(r.records[m], rate, ctx.n_boot, ctx.seed, ctx.ci_by)
            rules += [b["tpr_at_fpr1_ci_method"], b["tpr_at_fpr5_ci_method"]]
            precision += [b["decision_precision_ci_method"], b["precision_at_fpr5_ci_method"]]
            rows.append([r.label, m, b["n_deploy"], ci(b["tpr_at_fpr1"], b["tpr_at_fpr1_ci"]),
                         ci(b["tpr_at_fpr5"], b["tpr_at_fpr5_ci"]), pct(b["fpr_reached5"]),
                         pct(b["decision_tpr"]), pct(b["decision_fpr"]),
                         ci(b["decision_precision"], b["decision_precision_ci"]),
                         ci(b["precision_at_fpr5"], b["precision_at_fpr5_ci"])])
    d.table(["model", "method", "deploy n", "TPR @1% FPR", "TPR @5% FPR", "FPR reached (5%)",
             "TPR (own)", "FPR (own)", f"precision @{rate:g} (own)",
             f"precision @{rate:g} (5% FPR)"], rows)
    d.p(rules_note("TPR intervals", rules) + " " + rules_note("Precision intervals", precision))
    d.p("Precision uses the FPR the threshold really reaches (`FPR reached`), not the nominal one; "
        "no false positive among 48 deploy samples still allows an FPR of 7.4%, so a precision of "
        "1.0 comes with its lower limit.")
    if note := ctx.label_mass_note([(m, r) for r in ctx.runs for m in ctx.present(r)]):
        d.p("Scores from label probabilities" + note + ".")


def slices_section(ctx: ReportContext) -> None:
    d = ctx.doc
    d.h(2, "Slices")
    d.p("Cells: E = share of eval samples called eval, D = share of deploy samples called deploy, "
        "n = samples in the slice. On the Needham et al. data (and the first demo set) each category "
        "holds one label; in the bundled demo set every category holds both.")
    has_task = any(x.get("task") for r in ctx.runs for recs in r.records.values() for x in recs)
    for by, title in SLICES.items():
        if by == "task" and not has_task:
            continue
        d.h(3, title)
        for r in ctx.runs:
            ms = ctx.present(r)
            per = {m: S.slice_summaries(r.records[m], by) for m in ms}
            keys = sorted({k for v in per.values() for k in v})
            rows = [[k, max(per[m].get(k, {}).get("n", 0) for m in ms)] +
                    [_slice_cell(per[m].get(k)) for m in ms] for k in keys]
            d.p(f"{lit(r.label)}:")
            d.table([by, "n"] + ms, rows)


def _slice_cell(s: dict[str, Any] | None) -> str:
    if not s:
        return "–"
    parts = []
    if s["n_eval"]:
        parts.append(f"E {pct(s['eval_correct'])}")
    if s["n_deploy"]:
        parts.append(f"D {pct(s['deploy_correct'])}")
    return " · ".join(parts)
