"""Figure sections: per-method bars and AUROC bars, error vs number of turns, calibration, mean
curves along the output (methods declaring a :class:`~harness.methods.report_spec.Curve`)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from harness.stats import metrics as M
from harness.stats import summaries as S
from harness.reporting.context import MIN_AUROC_PER_CLASS, ReportContext
from harness.reporting.doc import code, lit, slug


def bars_section(ctx: ReportContext) -> None:
    d = ctx.doc
    d.h(2, "Correctly identified samples per method")
    models = [r.label for r in ctx.runs]
    for m in ctx.methods:
        runs = [r for r in ctx.runs if m in r.records]
        silent = [r for r in runs if ctx.summ[(m, r.label)]["undecided"] == ctx.summ[(m, r.label)]["n"]]
        if silent:
            d.p(f"{code(m)}: no signal on {lit(', '.join(r.label for r in silent))}: every sample was "
                "withheld or undecided, so there is no share to show" + (" (no bars)." if len(silent) == len(runs)
                                                                 else "; bars for the others."))
            runs = [r for r in runs if r not in silent]
            if not runs:
                continue
        path = ctx.plots.class_bars(ctx.out / f"bars_{slug(m)}.png", m, [r.label for r in runs],
                                    [ctx.summ[(m, r.label)]["eval_correct"] for r in runs],
                                    [ctx.summ[(m, r.label)]["deploy_correct"] for r in runs])
        d.fig(path, ctx.caption(f"{code(m)}: share of eval samples called eval (red) and of deploy "
                                f"samples called deploy (blue)", runs))
    vals = {(m, r.label): (ctx.summ[(m, r.label)]["auroc"], ctx.summ[(m, r.label)]["auroc_ci"])
            for r in ctx.runs for m in r.records}
    path = ctx.plots.auroc_bars(ctx.out / "auroc.png", ctx.methods, models, vals)
    gated = [lit(f"{m} on {r.label}") for r in ctx.runs for m in r.records
             if ctx.summ[(m, r.label)].get("auroc_gate")]
    rules = sorted({ctx.summ[(m, r.label)].get("auroc_ci_method") for r in ctx.runs for m in r.records} - {None})
    d.fig(path, ctx.caption("AUROC per method and model with 95% intervals (" + (
        "; ".join(rules) if rules else "none drawn") + ")" + (
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
    rows: list[list[Any]] = []
    trends: list[dict[str, Any]] = []
    for r in ctx.runs:
        panels = []
        for m in ctx.present(r):
            if ctx.summ[(m, r.label)]["brier"] is None:
                continue
            a = S.score_vs_turns(r.records[m], ci_by=ctx.ci_by)
            sq = S.score_vs_turns(r.records[m], squared=True, ci_by=ctx.ci_by)
            rows.append([r.label, m, r.config().get("view", "?"), a["n"], a["r"], p_cell(a), a["slope"],
                         sq["r"], p_cell(sq), a["p_method"]])
            trends += [a, sq]
            panels.append((f"{r.label}: {m}", {**a, "p_missing": missing_p(a)}))
        if panels:
            path = ctx.plots.error_vs_turns(ctx.out / f"turns_{slug(r.label)}.png", panels)
            d.fig(path, ctx.caption("|truth − P(eval)| vs number of turns, with trend line", [r]))
    d.table(["model", "method", "view", "n", "r (abs)", "p (abs)", "slope (abs)", "r (squared)",
             "p (squared)", "p test"], rows)
    if why := dict.fromkeys(missing_p(x) for x in trends if missing_p(x)):
        d.p("No p: " + "; ".join(f"`{k}`: {P_MISSING[k]}" for k in why) + ".")


#: Why a trend's p is missing (the cell's note) -> the sentence under the table.
P_MISSING = {
    "n < 3": "fewer than 3 scored samples",
    "turns constant": "every sample has the same number of turns (no trend to test)",
    "error constant": "the error is the same on every sample",
    "< 3 categories": "the cluster-robust p needs at least 3 categories (`--ci-by sample` gives "
                      "Pearson's p, counting samples as independent)",
    "undefined": "undefined",
}


def missing_p(a: dict[str, Any]) -> str | None:
    """Why :func:`harness.stats.summaries.score_vs_turns` gave no p (a key of P_MISSING), or None."""
    if a["p"] is not None and a["p"] == a["p"]:
        return None
    if a["n"] < 3:
        return "n < 3"
    if len(set(a["x"])) < 2:
        return "turns constant"
    if len(set(a["y"])) < 2:
        return "error constant"
    return "< 3 categories" if a["ci_by"] == "category" else "undefined"


def p_cell(a: dict[str, Any]) -> float | str:
    """The p of a :func:`harness.stats.summaries.score_vs_turns` result, or "– (why not)"."""
    why = missing_p(a)
    return a["p"] if why is None else f"– ({why})"


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


def binned_curve(records: Sequence[dict[str, Any]], x: str, y: str, n_bins: int = 10
                 ) -> dict[str, list[float]]:
    """Mean, standard error and count of ``details[y]`` in `n_bins` equal-width bins of
    ``details[x]`` (in [0, 1]); each record counts once per bin (its points in the bin averaged)."""
    per_bin: list[list[float]] = [[] for _ in range(n_bins)]
    for r in records:
        d = r.get("details") or {}
        xs, ys = d.get(x) or [], d.get(y) or []
        acc: dict[int, list[float]] = {}
        for a, b in zip(xs, ys):
            if b is not None and np.isfinite(b):
                acc.setdefault(min(int(float(a) * n_bins), n_bins - 1), []).append(float(b))
        for k, v in acc.items():
            per_bin[k].append(float(np.mean(v)))
    out: dict[str, list[float]] = {"x": [], "mean": [], "se": [], "n": []}
    for k, v in enumerate(per_bin):
        if v:
            out["x"].append((k + 0.5) / n_bins)
            out["mean"].append(float(np.mean(v)))
            out["se"].append(float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else 0.0)
            out["n"].append(len(v))
    return out


def curves_section(ctx: ReportContext) -> None:
    """Methods whose report spec declares a curve (the monitor): the mean curve along the output
    for eval and deploy samples, and the means of the signal it stands on, per class."""
    for m in ctx.methods:
        spec = ctx.spec(m).curve
        runs = [r for r in ctx.runs if m in r.records]
        if spec is None or not runs:
            continue
        d = ctx.doc
        d.h(2, spec.title)
        panels, rows = [], []
        for r in runs:
            series = {cls: binned_curve([x for x in r.records[m] if x["label"] == cls], spec.x, spec.y)
                      for cls in ("eval", "deploy")}
            panels.append((r.label, {k: v for k, v in series.items() if v["x"]}))
            for cls in ("eval", "deploy"):
                recs = [x for x in r.records[m] if x["label"] == cls]
                vals = [[(x.get("details") or {}).get(k) for x in recs] for k in spec.signal]
                rows.append([r.label, m, cls, len(recs)] + [
                    float(np.mean([v for v in col if v is not None])) if any(v is not None for v in col)
                    else None for col in vals])
        path = ctx.plots.mean_curves(ctx.out / f"curve_{slug(m)}.png", spec.title, spec.xlabel,
                                     spec.ylabel, panels)
        d.fig(path, ctx.caption(f"{code(m)}: mean over samples of {spec.y} in 10 bins of {spec.x} "
                                f"(band: ± one standard error)", runs))
        if spec.signal:
            d.p("Mean per class of the numbers the score stands on (per sample, then averaged): "
                + ", ".join(f"`{k}`" for k in spec.signal) + ".")
            d.table(["model", "method", "class", "n"] + list(spec.signal), rows)
