"""Figure sections: per-method bars and AUROC bars, error vs number of turns, calibration, mean
curves along the output (methods declaring a :class:`~harness.methods.report_spec.Curve`)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from harness.stats import metrics as M
from harness.stats import summaries as S
from harness.reporting.context import MIN_AUROC_PER_CLASS, ReportContext
from harness.reporting.runs import RunData
from harness.reporting.doc import ci, code, lit, slug


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
    surface, same = surface_baselines(ctx)
    path = ctx.plots.auroc_bars(ctx.out / "auroc.png", ctx.methods, models, vals, surface=surface,
                                same_prompts=same)
    gated = [lit(f"{m} on {r.label}") for r in ctx.runs for m in r.records
             if ctx.summ[(m, r.label)].get("auroc_gate")]
    rules = sorted({ctx.summ[(m, r.label)].get("auroc_ci_method") for r in ctx.runs for m in r.records} - {None})
    d.fig(path, ctx.caption("AUROC per method and model with 95% intervals (" + (
        "; ".join(rules) if rules else "none drawn") + ")" + (
        f"; no bar for {', '.join(gated)}: fewer than {MIN_AUROC_PER_CLASS} scored samples per "
        "class" if gated else "") + surface_note(ctx, same) +
        ctx.label_mass_note([(m, r) for r in ctx.runs for m in ctx.present(r)]), ctx.runs))


def surface_baselines(ctx: ReportContext) -> tuple[dict[str, tuple[float, tuple[float, float] | None]],
                                                   dict[tuple[str, str], float]]:
    """What the AUROC figure draws of the prompts' surface: per model, the best surface
    predictor's AUROC and interval on the run's samples (the Findings headline's, summary.json's
    ``surface``); per (method, model), the best predictor's AUROC on the samples the method
    scored (what its Findings sentence compares with, ``vs_surface.best_auroc``)."""
    surface = {r.label: (b.auroc, None if b.ci_lo is None else (b.ci_lo, b.ci_hi))
               for r in ctx.runs for b in [ctx.best_surface(r)] if b is not None}
    same = {(m, r.label): v["best_auroc"] for r in ctx.runs for m in ctx.present(r)
            for v in [ctx.versus(m, r)] if v is not None and v.get("diff") is not None}
    return surface, same


def surface_note(ctx: ReportContext, same: dict[tuple[str, str], float]) -> str:
    """The AUROC caption's clause on the surface baselines it draws (or that none is drawn, and why)."""
    best = [(r, b) for r in ctx.runs for b in [ctx.best_surface(r)] if b is not None]
    if not best:
        return "; no surface baseline drawn (no valid surface predictor)"
    runs = "; ".join(f"{lit(r.label)}: {lit(b.name)} {ci(b.auroc, None if b.ci_lo is None else (b.ci_lo, b.ci_hi))}"
                     + (f" ({b.ci_method})" if b.ci_method else "") for r, b in best)
    return ("; dashed line and band: the best surface predictor of each model's prompts, AUROC "
            f"[95% CI] ({runs})" + ("; black tick: the best surface predictor on the samples the "
                                   "method scored, which its Findings sentence compares with" if same else ""))


def turns_section(ctx: ReportContext) -> None:
    """Error against the number of turns the model saw, for the runs where that varies (view
    `full` and samples of more than one length); the others are named with the reason."""
    d = ctx.doc
    d.h(2, "Error vs number of turns")
    shown = [r for r in ctx.runs if not turns_fixed(r)]
    if left := [f"{lit(r.label)}: {turns_fixed(r)}" for r in ctx.runs if turns_fixed(r)]:
        d.p("No trend fitted for " + "; ".join(left) + " (the number of turns the model saw does "
            "not vary).")
    if not shown:
        return
    d.p("Per sample: |truth − P(eval)| (the paper's footnote calls it Brier) and the squared "
        "error (the standard Brier score), against the number of user turns, with Pearson r, "
        "a least-squares trend line and a two-sided p for its slope. "
        "p test: named in the last column; with categories it is cluster-robust by category "
        "(samples of one source are not independent evidence).")
    rows: list[list[Any]] = []
    trends: list[dict[str, Any]] = []
    for r in shown:
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


def turns_fixed(r: RunData) -> str | None:
    """Why the model saw the same number of turns on every sample of run `r` (view
    `first_turn`, or samples all of one length), or None where it varies."""
    view = r.config().get("view", "first_turn")
    if view != "full":
        return f"view {view}, the model saw the first user turn only"
    turns = {x.get("n_turns") for recs in r.records.values() for x in recs} - {None}
    return None if len(turns) > 1 else f"every sample has {next(iter(turns), '?')} turn(s)"


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
        d.fig(path, ctx.caption("Reliability diagrams (10 equal-width bins of the score, each point "
                                "labelled with its bin's sample count; dotted: perfect calibration)"
                                + ctx.label_mass_note(drawn), ctx.runs))
        d.p("Samples per bin of the score (a point drawn from few samples says little):")
        d.table(["model", "method"] + [f"{k / 10:.1f}–{(k + 1) / 10:.1f}" for k in range(10)],
                [[label, m] + bin_counts(bins) for label, curves, _ in panels for m, bins in curves.items()])


def bin_counts(bins: Sequence[dict[str, Any]], n_bins: int = 10) -> list[int]:
    """The sample count of each of `n_bins` equal-width bins (0 for an empty one) from
    :func:`harness.stats.metrics.calibration_bins`."""
    counts = [0] * n_bins
    for b in bins:
        counts[min(int(round(b["lo"] * n_bins)), n_bins - 1)] = b["n"]
    return counts


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
