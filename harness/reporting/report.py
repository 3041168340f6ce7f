"""report.md and report.html with PNG figures for run directories (the command: :mod:`evalaware.report`).

One run directory holds one model's results (any methods, including logprob and probe
records written by other tools: every method is treated generically through its records'
prediction and score). Several runs are shown side by side. Every figure's caption names the
runs it was made from (model, weights hash prefix, git revision of the harness).

Sections: runs; summary per method (the paper's two shares, AUROC, Brier, |.|-Brier, ECE, each
with a 95% interval over whole categories by default, `--ci-by`, its rule named under the table:
`harness.stats.metrics.interval_weighted`); per-method bars (paper Figs 7, 9, 10) and AUROC bars; Cohen's kappa (Table 1
and all pairs); excluded answers; the vote-count experiment (runs with >= 25 votes per sample
for binary and probability); error vs number of turns; calibration; judge evidence; slices
(chat vs agentic, capability vs alignment, category, Inspect task); logprob and probe sections when
present; the low base-rate view (TPR at 1%/5% FPR, precision at `--base-rate`).

The sections live in :mod:`harness.reporting`; which methods get which rows, tables and order
is declared by the methods themselves (:mod:`harness.methods.report_spec`), so this module names no
method.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from harness.core.errors import EvalAwareError
from harness.reporting.agreement import MIN_VOTES_EXPERIMENT, kappa_section, vote_count_section
from harness.reporting.answers import errors_section, judge_section
from harness.reporting.audit_section import audit_section
from harness.reporting.context import MIN_AUROC_PER_CLASS, ReportContext
from harness.reporting.doc import Doc, ci
from harness.reporting.families import family_sections
from harness.reporting.figures import bars_section, calibration_section, curves_section, turns_section
from harness.reporting.findings import findings_section
from harness.reporting.linkage import linkage_section
from harness.reporting.overview import definitions_section, intro, runs_section, summary_section
from harness.reporting.runs import RunData, label_runs, load_run, method_label, method_specs
from harness.reporting.slices import base_rate_section, slices_section
from harness.runlog.outputs import check_output, write_output
from harness.reporting.summary import dumps, summary

#: The report's sections, in order.
SECTIONS: tuple[Callable[[ReportContext], None], ...] = (
    intro, findings_section, summary_section, linkage_section, audit_section, runs_section, bars_section,
    kappa_section, errors_section, vote_count_section, turns_section, calibration_section,
    curves_section, base_rate_section, judge_section, family_sections, slices_section,
    definitions_section)


def method_order(names: Sequence[str]) -> list[str]:
    """Methods in the order their report specs declare (undeclared ones last), ties by name."""
    return method_specs().order(names)


def build_report(runs: list[RunData], out: Path, n_boot: int = 1000, seed: int = 0,
                 ci_by: str | None = None, base_rate: float = 0.01) -> ReportContext:
    """Every section of the report on `runs` (figures written into `out`); the document is
    the context's `doc`."""
    ctx = ReportContext(runs, out, n_boot=n_boot, seed=seed, ci_by=ci_by, base_rate=base_rate)
    for section in SECTIONS:
        section(ctx)
    return ctx


def write_report(run_dirs: Sequence[str | Path], out: str | Path, n_boot: int = 1000,
                 seed: int = 0, ci_by: str | None = None, base_rate: float = 0.01) -> tuple[Path, Path]:
    """Build the report for `run_dirs` into `out`, with its numbers as `out`/summary.json
    (:mod:`harness.reporting.summary`); returns (report.md, report.html)."""
    run_dirs = distinct_runs(run_dirs)
    out = Path(out)
    md, page = out / "report.md", out / "report.html"
    for f in (md, page, out / "summary.json"):  # before any work; the figures: never through a planted link
        check_output(f, "--out", runs=run_dirs)
    runs = [load_run(d) for d in run_dirs]
    label_runs(runs)
    out.mkdir(parents=True, exist_ok=True)
    ctx = build_report(runs, out, n_boot=n_boot, seed=seed, ci_by=ci_by, base_rate=base_rate)
    write_output(md, ctx.doc.markdown(), "--out", runs=run_dirs)
    write_output(page, ctx.doc.html("Evaluation-awareness report"), "--out", runs=run_dirs)
    write_output(out / "summary.json", dumps(summary(ctx)), "--out", runs=run_dirs)
    return md, page


def distinct_runs(run_dirs: Sequence[str | Path]) -> list[str | Path]:
    """`run_dirs` with none given twice (the same directory under two names counts once); a
    repeat is refused, naming both: a run counted twice doubles its samples in every pooled number."""
    seen: dict[Path, str | Path] = {}
    for d in run_dirs:
        key = Path(d).resolve()
        if key in seen:
            raise EvalAwareError(f"{d}: the run directory {seen[key]} is given twice; give each run once")
        seen[key] = d
    return list(seen.values())


__all__ = ["Doc", "MIN_AUROC_PER_CLASS", "MIN_VOTES_EXPERIMENT", "RunData", "build_report", "ci",
           "load_run", "method_label", "method_order", "write_report"]
