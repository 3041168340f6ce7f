"""What every report section reads: the runs, each method's summary, the interval settings,
the methods' report specs, and the document being written."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.stats import metrics as M
from harness.stats import summaries as S
from harness.stats.metrics import Y
from harness.stats.paired import auroc_minus_best
from harness.reporting.doc import Doc, ci, code, label_mass_cell, lit
from harness.reporting.runs import RunData, human_name, human_records, method_specs
from harness.methods.report_spec import ReportSpec

MIN_AUROC_PER_CLASS = M.MIN_AUROC_PER_CLASS  # coverage-gated families (logprob)


class ReportContext:
    def __init__(self, runs: list[RunData], out: Path, n_boot: int = 1000, seed: int = 0,
                 ci_by: str | None = None, base_rate: float = 0.01) -> None:
        self.runs, self.out, self.n_boot, self.seed = runs, out, n_boot, seed
        self.ci_by, self.base_rate = ci_by, base_rate  # ci_by None: category when there are any
        self.doc = Doc()
        self.specs = method_specs()
        self.methods = self.specs.order({m for r in runs for m in r.records})
        self.summ = {(m, r.label): self.summary(r.records[m]) for r in runs for m in r.records}
        self.human = {r.label: human_records(r.records) for r in runs}
        self._audits: dict[tuple[Any, ...], Any] = {}
        self._versus: dict[tuple[str, str], dict[str, Any] | None] = {}
        self._links: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}

    def linkage(self, r: RunData) -> dict[str, dict[str, dict[str, Any]]]:
        """{behaviour method: {readout: {stratum: link}}} of the run, computed once (empty without
        behaviour records that hold an outcome, e.g. `--methods all` on a set that declares no
        behaviour; :func:`harness.stats.linkage.readout_linkage`: Holm across the readouts)."""
        from harness.stats.linkage import has_outcome, readout_linkage

        if r.label not in self._links:
            self._links[r.label] = {b: readout_linkage({m: r.records[m] for m in self.present(r)}, brs, self.n_boot,
                                                       self.seed, self.ci_by)
                                    for b, brs in r.behaviours.items() if has_outcome(brs)}
        return self._links[r.label]

    def audit(self, r: RunData) -> Any:
        """The surface audit of the run's samples and view (`harness.data.audit.audit`: an
        AuditResult, or why it could not run as a string); computed once per sample set and view."""
        from harness.core.errors import EvalAwareError
        from harness.data.audit import audit  # scikit-learn (~1.4 s): kept out of the CLI's start-up

        view = r.config().get("view", "first_turn")
        key = (tuple(s.id for s in r.samples), view)
        if key not in self._audits:
            try:
                self._audits[key] = audit(r.samples, view=view, n_boot=self.n_boot, seed=self.seed)
            except EvalAwareError as e:
                self._audits[key] = str(e)
        return self._audits[key]

    def best_surface(self, r: RunData) -> Any:
        """The best surface predictor of the run's samples (the audit's ``best()``: name, AUROC,
        interval and its rule), or None where there is no audit or no valid predictor."""
        res = self.audit(r)
        return None if isinstance(res, str) else res.best()

    def versus(self, method: str, r: RunData) -> dict[str, Any] | None:
        """The method's (or the run's human row's) AUROC minus the best surface predictor's on
        the samples it scored (:func:`versus_surface`); None where
        there is no audit, no valid surface predictor, or no AUROC."""
        key = (method, r.label)
        if key not in self._versus:
            res = self.audit(r)
            human = dict(self.human_row(r))
            s = human[method] if method in human else self.summ[key]
            recs = self.human[r.label] if method in human else r.records[method]
            ok = not isinstance(res, str) and res.best() is not None and s["auroc"] is not None
            self._versus[key] = versus_surface(recs, res, self.n_boot, self.seed, self.ci_by) if ok else None
        return self._versus[key]

    @property
    def plots(self) -> Any:
        from harness.reporting import plots  # matplotlib: imported only when a report is drawn

        return plots

    def spec(self, method: str) -> ReportSpec:
        return self.specs(method)

    def summary(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """:func:`harness.stats.summaries.method_summary` with the report's interval settings."""
        return S.method_summary(records, n_boot=self.n_boot, seed=self.seed, ci_by=self.ci_by)

    def present(self, r: RunData) -> list[str]:
        """The run's methods in report order."""
        return [m for m in self.methods if m in r.records]

    def caption(self, what: str, runs: Sequence[RunData]) -> str:
        return f"{what}. Source: " + "; ".join(r.source() for r in runs) + "."

    def label_mass_note(self, pairs: Sequence[tuple[str, RunData]]) -> str:
        """For a figure drawn from label probabilities: the label-mass distribution of each
        (method, run) that has one, as a clause for the caption ("" when none has)."""
        parts = [f"{code(m)} on {lit(r.label)}: {lit(label_mass_cell(lm))}" for m, r in pairs
                 for lm in [self.summ[(m, r.label)].get("label_mass")] if lm]
        return ("; label mass (the options' share of the probability at the label position, median "
                "[10th–90th percentile]) " + "; ".join(parts)) if parts else ""

    def human_row(self, r: RunData) -> list[tuple[str, dict[str, Any]]]:
        """[(name, summary)] of the run's human annotations, or []."""
        h = self.human[r.label]
        return [(human_name(h), self.summary(h))] if h else []

    def auroc_cell(self, method: str, records: Sequence[dict[str, Any]], s: dict[str, Any]) -> str:
        """The AUROC cell, or why there is none (:func:`harness.stats.summaries.auroc_gate`)."""
        return gated_auroc(records, s)


def gated_auroc(records: Sequence[dict[str, Any]], s: dict[str, Any]) -> str:
    """The AUROC cell of summary `s`, or why there is none: fewer than MIN_AUROC_PER_CLASS scored
    per class (the summary's gate; `records` are those it summarises)."""
    gate = s.get("auroc_gate") or S.auroc_gate(S.scored(records)[0])
    return f"– ({gate})" if gate else ci(s["auroc"], s["auroc_ci"])


def versus_surface(records: Sequence[dict[str, Any]], res: Any, n_boot: int, seed: int,
                   ci_by: str | None) -> dict[str, Any] | None:
    """The method's AUROC minus the best surface predictor's on the samples the method scored
    (its gated subset), with a paired interval of the difference over categories (the best
    predictor re-chosen under every weighting: `harness.stats.paired.auroc_minus_best`, its rule
    in ``diff_ci_method``); None where the
    method's AUROC is gated (fewer than MIN_AUROC_PER_CLASS scored per class)."""
    pos = {sid: i for i, sid in enumerate(res.sample_ids)}
    rs = [r for r in records if r.get("score") is not None and r["label"] in Y and r["sample_id"] in pos]
    y = [Y[r["label"]] for r in rs]
    if S.auroc_gate(np.asarray(y, dtype=int)) is not None:
        return None
    idx = [pos[r["sample_id"]] for r in rs]
    base = {k: np.asarray(v)[idx] for k, v in res.oof.items()}
    return auroc_minus_best(y, S.ranked(rs)[1], base,
                            S.groups_for(rs, S.resolve_ci_by(rs, ci_by)), n_boot, seed)
