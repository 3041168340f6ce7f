"""Figure sections: per-method bars and AUROC bars, error vs number of turns, calibration."""

from __future__ import annotations

from harness.stats import metrics as M
from harness.stats import summaries as S
from harness.reporting.context import MIN_AUROC_PER_CLASS, ReportContext
from harness.reporting.doc import slug


def bars_section(ctx: ReportContext) -> None:
    d = ctx.doc
    d.h(2, "Correctly identified samples per method")
    models = [r.label for r in ctx.runs]
    for m in ctx.methods:
        runs = [r for r in ctx.runs if m in r.records]
        silent = [r for r in runs if ctx.summ[(m, r.label)]["undecided"] == ctx.summ[(m, r.label)]["n"]]
        if silent:
            d.p(f"`{m}`: no signal on {', '.join(r.label for r in silent)}: every sample was withheld "
                "or undecided, so there is no share to show" + (" (no bars)." if len(silent) == len(runs)
                                                                 else "; bars for the others."))
            runs = [r for r in runs if r not in silent]
            if not runs:
                continue
        path = ctx.plots.class_bars(ctx.out / f"bars_{slug(m)}.png", m, [r.label for r in runs],
                                    [ctx.summ[(m, r.label)]["eval_correct"] for r in runs],
                                    [ctx.summ[(m, r.label)]["deploy_correct"] for r in runs])
        d.fig(path, ctx.caption(f"`{m}`: share of eval samples called eval (red) and of deploy "
                                f"samples called deploy (blue)", runs))
    vals = {(m, r.label): (ctx.summ[(m, r.label)]["auroc"], ctx.summ[(m, r.label)]["auroc_ci"])
            for r in ctx.runs for m in r.records}
    path = ctx.plots.auroc_bars(ctx.out / "auroc.png", ctx.methods, models, vals)
    gated = [f"{m} on {r.label}" for r in ctx.runs for m in r.records
             if ctx.summ[(m, r.label)].get("auroc_gate")]
    d.fig(path, ctx.caption("AUROC per method and model with 95% bootstrap intervals" + (
        f"; no bar for {', '.join(gated)}: fewer than {MIN_AUROC_PER_CLASS} scored samples per "
        "class" if gated else "") + ctx.label_mass_note([(m, r) for r in ctx.runs for m in ctx.present(r)]),
        ctx.runs))


def turns_section(ctx: ReportContext) -> None:
    d = ctx.doc
    d.h(2, "Error vs number of turns")
    d.p("Per sample: |truth − P(eval)| (the paper's footnote calls it Brier) and the squared "
        "error (the standard Brier score), against the number of user turns, with Pearson r, "
        "a least-squares trend line and a two-sided p for its slope. Only informative for runs "
        "on full transcripts (view `full`); with view `first_turn` the model saw one turn only. "
        "p test: named in the last column; with categories it is cluster-robust by category "
        "(samples of one source are not independent evidence).")
    rows = []
    for r in ctx.runs:
        panels = []
        for m in ctx.present(r):
            if ctx.summ[(m, r.label)]["brier"] is None:
                continue
            a = S.score_vs_turns(r.records[m], ci_by=ctx.ci_by)
            sq = S.score_vs_turns(r.records[m], squared=True, ci_by=ctx.ci_by)
            rows.append([r.label, m, r.config().get("view", "?"), a["n"], a["r"], a["p"], a["slope"],
                         sq["r"], sq["p"], a["p_method"]])
            panels.append((f"{r.label}: {m}", a))
        if panels:
            path = ctx.plots.error_vs_turns(ctx.out / f"turns_{slug(r.label)}.png", panels)
            d.fig(path, ctx.caption("|truth − P(eval)| vs number of turns, with trend line", [r]))
    d.table(["model", "method", "view", "n", "r (abs)", "p (abs)", "slope (abs)", "r (squared)",
             "p (squared)", "p test"], rows)


def calibration_section(ctx: ReportContext) -> None:
    d = ctx.doc
    d.h(2, "Calibration")
    panels, drawn = [], []
    for r in ctx.runs:
        curves, eces = {}, {}
        for m in ctx.present(r):
            if ctx.summ[(m, r.label)]["ece"] is not None:
                drawn.append((m, r))
                y, p = S.scored(r.records[m])
                curves[m] = M.calibration_bins(y, p)
                eces[m] = ctx.summ[(m, r.label)]["ece"]
        if curves:
            panels.append((r.label, curves, eces))
    if panels:
        path = ctx.plots.calibration(ctx.out / "calibration.png", panels)
        d.fig(path, ctx.caption("Reliability diagrams (10 equal-width bins of the score; dotted: "
                                "perfect calibration)" + ctx.label_mass_note(drawn), ctx.runs))
