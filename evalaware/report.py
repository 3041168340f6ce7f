"""`evalaware report RUN_DIR [RUN_DIR ...] --out DIR` (:func:`harness.reporting.report.write_report`)."""

from __future__ import annotations

from pathlib import Path

import click

from evalaware.help import SectionedCommand
from harness.core import bounds
from harness.core.console import visible
from harness.reporting.report import write_report
from harness.stats import summaries as S


@click.command("report", cls=SectionedCommand)
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out", type=click.Path(file_okay=False),
              help="Output directory [default: RUN_DIR/report for one run; required for several].")
@click.option("--bootstrap", type=bounds.resamples(), default=1000, show_default=True,
              help="Resamples of the percentile bootstrap, the interval rule from 50 resampling units on "
                   "(with fewer: the cluster-jackknife t; on a bound: exact Clopper-Pearson); the report "
                   "names each table's rules. 0: no intervals.")
@click.option("--seed", type=bounds.seed(), default=0, show_default=True)
@click.option("--ci-by", type=click.Choice(S.CI_BY), default=None,
              help="Resampling unit of every interval: whole categories or single samples "
                   "[default: category when the dataset has categories, else sample].")
@click.option("--base-rate", type=bounds.FiniteFloat(0, 1, min_open=True, max_open=True), default=0.01,
              show_default=True, help="Share of evaluations in the traffic for the precision column "
                                      "of the low base-rate view.")
def report(run_dirs: tuple[str, ...], out: str | None, bootstrap: int, seed: int, ci_by: str | None,
           base_rate: float) -> None:
    """Write report.md and report.html (with PNG figures) for one or more run directories.

    \b
    Examples:
      evalaware report runs/demo                    # runs/demo/report/report.html
      evalaware report runs/qwen3 runs/gpt-oss --out reports/compare
    """
    if out is None and len(run_dirs) > 1:
        raise click.UsageError("--out is required with several run directories")
    out = out or str(Path(run_dirs[0]) / "report")
    md, page = write_report(run_dirs, out, n_boot=bootstrap, seed=seed, ci_by=ci_by, base_rate=base_rate)
    click.echo(f"wrote {visible(str(md.resolve()))}, {visible(str(page.resolve()))} and "
               f"{visible(str((md.parent / 'summary.json').resolve()))}")
