"""A run's results for a script: the object `run` writes to RUN/summary.json, `report` to
OUT/summary.json (every run it reads) and `show --json` prints. Every number is the one the
report prints (the same :class:`~harness.reporting.context.ReportContext` summaries, paired
differences and verdicts), unrounded.

Schema 1 (a key is always present; its value is null where the report shows "–"):

- ``schema``: 1. A change that removes or renames a key, or changes a value's meaning, raises it.
- ``intervals``: ``level`` (0.95), ``resamples`` (the bootstrap's, used from 50 units on),
  ``seed``, ``ci_by`` (``category``, ``sample``, or null: category where the samples have them).
- ``runs``: one object per run directory (one model each):

  - ``run_dir`` (absolute), ``model``, ``backend``, ``weights_sha256``, ``samples`` (count),
    ``incomplete``: why its numbers are not final ([] when they are).
  - ``finding``: the Findings headline of the report (plain text, without the model's name).
  - ``surface``: the best surface predictor of the run's samples (``data audit``): ``name``,
    ``auroc``, ``ci`` ([lo, hi]), ``ci_method``; null where there is none (``surface_note`` says why).
  - ``methods``: method name -> ``label`` (with its marks: constrained, self-judged), ``n``,
    ``scored`` (samples with a score), ``undecided`` (samples without a decision), ``withheld``
    (excluded answers by kind, e.g. ``no_signal``, ``unparseable``), ``eval_correct``,
    ``deploy_correct`` (shares; null where no sample was decided), ``auroc``, ``auroc_ci``,
    ``auroc_ci_method`` (the interval's rule, :class:`harness.stats.metrics.Interval` ``method``),
    ``auroc_gate`` (why no AUROC), ``ci_by`` and ``n_groups`` (the resampling unit and how many),
    ``vs_surface`` (the AUROC minus the best
    surface predictor's on the samples the method scored: ``n``, ``best``, ``best_auroc``,
    ``diff``, ``diff_ci``, ``diff_ci_method``; null where the report shows "–"), and ``verdict``:
    ``kind`` (beats_surface, below_surface, like_surface, no_surface, no_auroc, withheld),
    ``chance`` (above, at, below, or null) and ``line`` (the report's Findings sentence).
  - ``linkage``: behaviour method -> readout -> stratum (``all``, ``eval_labelled``,
    ``deploy_labelled``) -> ``n``, ``n_eval``/``n_deploy`` (samples the readout called each way),
    ``rate_eval``/``rate_deploy``, ``diff`` and ``diff_ci``, ``odds_ratio`` and ``odds_ratio_ci``,
    ``ci_method``, ``n_groups``, ``verdict`` (:func:`harness.stats.linkage.link`), ``n_undecided``
    (samples with a behaviour outcome the readout made no call on, not in ``n``), ``n_no_record``
    (those it has no record of, not in ``n`` either), ``holm_family``
    (the tests in the row's Holm family, null for a row that is none) and ``holm_shown``
    (:func:`harness.stats.linkage.readout_linkage`); ``{}`` for a run without behaviour records. ``linkage_line``: the Findings sentence about it, or null.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from harness.core.atomic import replace_file
from harness.reporting.context import ReportContext
from harness.reporting.doc import plain
from harness.reporting.findings import Verdict, finding, verdict
from harness.reporting.linkage import link_sentence
from harness.reporting.runs import RunData, label_runs, load_run, method_label

SCHEMA = 1
NAME = "summary.json"
LEVEL = 0.95


def _pair(ci: Sequence[float] | None) -> list[float] | None:
    return None if ci is None else [float(ci[0]), float(ci[1])]


def _method(ctx: ReportContext, r: RunData, m: str, v: Verdict) -> dict[str, Any]:
    s = ctx.summ[(m, r.label)]
    vs = ctx.versus(m, r)
    silent = s["n"] and s["undecided"] == s["n"]  # no sample decided: the report's "– (no signal)"
    return {
        "label": method_label(m, r.manifest), "n": s["n"], "scored": s["n_scored"],
        "undecided": s["undecided"], "withheld": dict(sorted(s["errors"].items())),
        "eval_correct": None if silent else s["eval_correct"],
        "deploy_correct": None if silent else s["deploy_correct"],
        "auroc": s["auroc"], "auroc_ci": _pair(s["auroc_ci"]), "auroc_ci_method": s["auroc_ci_method"],
        "auroc_gate": s["auroc_gate"], "ci_by": s["ci_by"], "n_groups": s["n_groups"],
        "vs_surface": None if vs is None or vs.get("diff") is None else {
            "n": vs["n"], "best": vs["best"], "best_auroc": vs["best_auroc"], "diff": vs["diff"],
            "diff_ci": _pair(vs.get("diff_ci")), "diff_ci_method": vs.get("diff_ci_method")},
        "verdict": {"kind": v.kind, "chance": v.chance, "line": plain(v.sentence)},
    }


def run_summary(ctx: ReportContext, r: RunData) -> dict[str, Any]:
    """One run's entry of ``runs`` (see the module docstring), from the report's own context."""
    res, best = ctx.audit(r), ctx.best_surface(r)
    verdicts = {m: verdict(ctx, m, r) for m in ctx.present(r)}
    model = r.manifest.get("model") or {}
    return {
        "run_dir": str(Path(r.run_dir).resolve()), "model": r.model, "backend": r.backend,
        "weights_sha256": model.get("weights_sha256") or r.identity.get("weights_sha256"),
        "samples": len(r.samples), "incomplete": r.incomplete(),
        "finding": plain(finding(ctx, r, list(verdicts.values()))) + ".",
        "surface": None if best is None else {"name": best.name, "auroc": best.auroc,
                                              "ci": None if best.ci_lo is None else [best.ci_lo, best.ci_hi],
                                              "ci_method": best.ci_method},
        "surface_note": None if best is not None else (res if isinstance(res, str) else
                                                       "no valid surface predictor on these samples"),
        "methods": {m: _method(ctx, r, m, v) for m, v in verdicts.items()},
        "linkage": ctx.linkage(r),
        "linkage_line": None if (line := link_sentence(ctx, r)) is None else plain(line),
    }


def summary(ctx: ReportContext) -> dict[str, Any]:
    """The whole object for the runs of `ctx`."""
    return {"schema": SCHEMA,
            "intervals": {"level": LEVEL, "resamples": ctx.n_boot, "seed": ctx.seed, "ci_by": ctx.ci_by},
            "runs": [run_summary(ctx, r) for r in ctx.runs]}


def summarize(run_dirs: Sequence[str | Path], n_boot: int = 1000, seed: int = 0,
              ci_by: str | None = None) -> dict[str, Any]:
    """The object for `run_dirs` read as the report reads them (with the report's defaults)."""
    runs = [load_run(d) for d in run_dirs]
    label_runs(runs)
    return summary(ReportContext(runs, Path(run_dirs[0]), n_boot=n_boot, seed=seed, ci_by=ci_by))


def dumps(obj: dict[str, Any]) -> str:
    """The file's text (the same bytes from `run`, `report` and `show --json`)."""
    return json.dumps(obj, indent=1, ensure_ascii=False) + "\n"


def write_summary(obj: dict[str, Any], directory: str | Path) -> Path:
    """`obj` as DIRECTORY/summary.json, replaced whole (:func:`harness.core.atomic.replace_file`)."""
    path = Path(directory) / NAME
    with replace_file(path) as f:
        f.write(dumps(obj))
    return path
