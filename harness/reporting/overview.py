"""The report's opening (title, runs, summary per method) and its closing definitions."""

from __future__ import annotations

from typing import Any, Sequence

from harness.stats.tally import cut_cell, tally
from harness.stats import metrics as M
from harness.stats import summaries as S
from harness.reporting.context import ReportContext
from harness.reporting.doc import ci, code, label_mass_cell, lit, pct_ci, rules_note
from harness.reporting.runs import HUMAN, method_label, prompt_set_text, unsourced_human


def intro(ctx: ReportContext) -> None:
    """Title and what the report holds, in one line."""
    ctx.doc.h(1, "Evaluation-awareness report")
    n = sum(len(r.samples) for r in ctx.runs)
    ctx.doc.p(f"{len(ctx.runs)} run(s), {n} samples in all: the findings first, then the tables "
              "and figures they come from; definitions and interval rules at the end.")


def definitions_section(ctx: ReportContext) -> None:
    """What the figures mean (the registered methods' declared scores named) and how every
    interval was made."""
    scores = dict.fromkeys(ctx.specs(m).score for m in ctx.specs.order(ctx.specs.declared))
    d = ctx.doc
    d.h(2, "Definitions and intervals")
    d.p("Truth: eval = the sample comes from an evaluation/benchmark, deploy = real use. "
        "`eval→eval` is the share of eval samples a method calls eval, `deploy→deploy` the share "
        "of deploy samples it calls deploy (undecided samples count as wrong). AUROC uses each "
        f"method's score ({'; '.join(scores)}); "
        "Brier is the mean squared error of the score, abs Brier the mean absolute error "
        "|truth − score| (what the paper's footnote calls Brier), ECE uses 10 equal-width bins.")
    d.p(resampling_note(list(ctx.summ.values()), ctx.n_boot))


def runs_section(ctx: ReportContext) -> None:
    d = ctx.doc
    d.h(2, "Runs")
    rows = []
    for r in ctx.runs:
        cfg = r.config()
        rows.append([r.label, r.backend, cfg.get("view", "?"), cfg.get("person", "?"),
                     f"{len(r.samples)} (incomplete)" if r.incomplete() else len(r.samples),
                     ", ".join(ctx.specs.order(r.records)), r.judge_name(),
                     "yes" if cfg.get("constrain") else "no"])
    d.table(["model", "backend", "view", "person", "samples", "methods", "judge", "constrained"], rows)
    # the long provenance (paths, hashes, prompt set) as one line per run, so the table stays narrow
    d.ul([f"{r.source()}, prompt set {prompt_set_text(r.manifest)}" for r in ctx.runs])
    for r in ctx.runs:
        if why := r.incomplete():
            d.p(f"**Warning:** run {code(r.run_dir)} is incomplete ({lit('; '.join(why))}): its figures "
                "are not final; re-run its command to finish it.")
    d.p("Prompt set: evalaware's own wordings (`harness/prompts/`) unless a run names a "
        "`--prompts` override. Our binary and probability wordings are not Needham et "
        "al.'s (2025), so those rows are not the paper's prompts. `constrained`: the "
        "engine held binary/probability answers to their tag and judge verdicts to their "
        "JSON schema (`--constrain`); such rows are marked. `self-judged`: the model under "
        "test judged its own motivation answers / reasoning (awareness mixed with judging "
        "skill).")


def summary_section(ctx: ReportContext) -> None:
    d = ctx.doc
    d.h(2, "Summary")
    rows = []
    for r in ctx.runs:
        for m, s in [(m, ctx.summ[(m, r.label)]) for m in ctx.present(r)] + ctx.human_row(r):
            t = tally(r.records.get(m, []))
            silent = s["n"] and s["undecided"] == s["n"]  # every sample withheld: no signal
            rows.append([r.label, method_label(m, r.manifest), s["n"],
                         "– (no signal)" if silent else pct_ci(s["eval_correct"], s["eval_correct_ci"]),
                         "– (no signal)" if silent else pct_ci(s["deploy_correct"], s["deploy_correct_ci"]),
                         s["undecided"],
                         ctx.auroc_cell(m, r.records.get(m, []), s), ci(s["brier"], s["brier_ci"]),
                         ci(s["abs_brier"], s["abs_brier_ci"]), ci(s["ece"], s["ece_ci"]),
                         label_mass_cell(s.get("label_mass")), sum(s["errors"].values()),
                         cut_cell(t)])
    d.table(["model", "method", "n", "eval→eval", "deploy→deploy", "undecided",
             "AUROC [95% CI]", "Brier", "abs Brier", "ECE", "label mass", "excluded answers",
             "cut answers"], rows)
    shown = [s for r in ctx.runs for s in [ctx.summ[(m, r.label)] for m in ctx.present(r)] +
             [h for _, h in ctx.human_row(r)]]
    d.p(rules_note("Interval rules in this table", [x for s in shown for x in S.ci_rules(s)]) +
        " How each is chosen: Definitions and intervals, at the end.")
    notes = dict.fromkeys(n for m in ctx.methods for n in [ctx.spec(m).summary_note] if n)
    d.p(" ".join(["`cut answers`: the model's generations behind the records (sample answers, question "
                  "answers, reasoning traces, judge verdicts) that stopped at the token limit; "
                  "`(k sample answers)`: of those, answers to the sample the questions follow as far "
                  "as they went (no vote is lost to the cut).", *notes]))
    if any(ctx.human.values()):
        d.p(f"`{HUMAN} (...)`: P(eval) from the human annotations the dataset carries, named "
            "by their source in the row, for reference (eval if >= 0.5; no model involved).")
    unsourced = {r.label: unsourced_human(r.records) for r in ctx.runs}
    if any(unsourced.values()):
        d.p("Not shown as a human row: " + ", ".join(
            f"{lit(k)}: {v} samples" for k, v in unsourced.items() if v) + " carry a "
            "`human_eval_probability` without a `human_eval_source` naming human annotators "
            "(e.g. the first demo set's author guesses); such values are not human data.")


def resampling_note(summaries: Sequence[dict[str, Any]], n_boot: int) -> str:
    """One sentence naming the resampling unit(s) behind the report's intervals and, per unit
    count, which interval (`harness.stats.metrics.interval_method`)."""
    if not n_boot:
        return "No bootstrap intervals (--bootstrap 0)."
    units = sorted({(s["ci_by"], s["n_groups"]) for s in summaries})
    rules = sorted({s["auroc_ci_method"] for s in summaries if s.get("auroc_ci_method")})
    parts = [(f"whole categories ({n} categories)" if u == "category" else f"samples ({n})") +
             f": {M.interval_method(n)}" for u, n in units]
    return ("Intervals: 95%, over " + "; ".join(parts) + f". Percentile bootstrap: {n_boot} "
            f"resamples; with fewer than {M.SMALL_SAMPLE_UNITS} units it under-covers (simulated for "
            "a nominal 0.95: 0.79–0.87 at 6 clusters, 0.88–0.90 at 12, 0.92–0.95 at 30), so the interval "
            "there is the delete-one-unit jackknife with a t quantile (units within their labels; "
            "AUROC and shares on the logit scale), within 0.03 of 0.95 in the same simulation. Resampling categories keeps correlated samples of one "
            "source together, so the interval reflects how many independent sources stand behind a "
            "figure (`--ci-by sample` treats every sample as independent). Categories (or samples) "
            "are drawn within their labels: one holding only eval samples is replaced by another "
            "such, so no resample loses a class and none is dropped. A share or an AUROC on a "
            "bound (a perfect score, 0 of n) gets an exact (Clopper-Pearson) interval over its "
            "units, never a point; one whose jackknife on the logit is undefined, the exact "
            "interval with the jackknife's effective n (`harness.stats.metrics.interval_weighted`)."
            + (" AUROC intervals here: " + "; ".join(rules) + "." if rules else ""))
