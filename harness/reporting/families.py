"""Sections of method families (a :class:`~harness.methods.report_spec.Family` declared by the
methods: logprob scoring, probes): one row per method and score variant, the coverage gate and
target words of coverage-gated families, and how a probe's layer was chosen."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from harness.core.details import LayerSelection, LogOdds, ScoreVariant, SignalGate
from harness.reporting.context import MIN_AUROC_PER_CLASS, ReportContext, gated_auroc
from harness.reporting.doc import ci, pct, rules_note
from harness.methods.report_spec import Family


def family_sections(ctx: ReportContext) -> None:
    """One section per family with methods in the runs, in the families' declared order."""
    fams: dict[Family, list[str]] = {}
    for m in ctx.methods:
        fam = ctx.spec(m).family
        if fam is not None:
            fams.setdefault(fam, []).append(m)
    for fam, members in sorted(fams.items(), key=lambda kv: kv[0].order):
        family_section(ctx, fam, members)


def family_section(ctx: ReportContext, fam: Family, members: Sequence[str]) -> None:
    """Scored methods of one family. Where records carry ``<variant>_p_eval`` /
    ``<variant>_coverage`` details (the logprob methods: naive, top20, aware), each variant
    gets its own row."""
    d = ctx.doc
    d.h(2, fam.title)
    d.p(fam.note)
    gated = fam.coverage_gated
    auroc = (lambda recs, s: gated_auroc(recs, s)) if gated else (lambda recs, s: ci(s["auroc"], s["auroc_ci"]))
    rows, rules = [], []
    for r in ctx.runs:
        for m in [m for m in members if m in r.records]:
            s, recs = ctx.summ[(m, r.label)], r.records[m]
            rules.append(s.get("auroc_ci_method"))
            rows.append([r.label, m, "score", signal_share(recs), s["n_scored"], auroc(recs, s), s["brier"],
                         s["ece"], "–"])
            for var in variants(recs):
                vrecs = gate(recs, var) if gated else \
                    [as_variant(x, var, (ScoreVariant.of(x, var) or ScoreVariant(var)).p_eval) for x in recs]
                vs = ctx.summary(vrecs)
                rules.append(vs.get("auroc_ci_method"))
                cov = [v.coverage for x in recs
                       if (v := ScoreVariant.of(x, var)) is not None and v.coverage is not None]
                rows.append([r.label, m, var, signal_share(vrecs), vs["n_scored"], auroc(vrecs, vs),
                             vs["brier"], vs["ece"],
                             f"{np.mean(cov):.4f} / {np.median(cov):.4f}" if cov else "–"])
    d.table(["model", "method", "variant", "with signal", "scored", "AUROC [95% CI]", "Brier", "ECE",
             "coverage mean / median"], rows)
    d.p(rules_note("AUROC interval rules", rules))
    if gated:
        _word_settings(ctx, members)
        d.p(f"`with signal`: samples whose coverage reaches the run's `--min-coverage` (each "
            f"variant on its own coverage); the figures on a row are computed from those samples "
            f"only. No AUROC is computed from fewer than {MIN_AUROC_PER_CLASS} scored samples per "
            f"class.")
    _layer_selection(ctx, members)


def _word_settings(ctx: ReportContext, members: Sequence[str]) -> None:
    """Which words, gate, boundary rule and answer position each coverage-gated run used."""
    rows = []
    for r in ctx.runs:
        for m in members:
            st = (r.manifest.get("methods") or {}).get(m) or {}
            if m not in r.records or not st:
                continue
            words = st.get("words") or {}
            ev = ", ".join(w for w, lab in words.items() if lab == "eval")
            dp = ", ".join(w for w, lab in words.items() if lab == "deploy")
            boundary = {True: "yes", False: "no"}.get(st.get("aware_boundary"), "–")
            if st.get("aware_bound"):  # served models: the boundary mass is a top-K lower bound
                boundary += f" (aware scores are bounds — {st['aware_bound']})"
            rows.append([r.label, m, f"{st.get('word_list', '?')}: {ev} / {dp}", f"{st.get('min_coverage', '–')}",
                         boundary, st.get("answer_position", "–")])
    if rows:
        ctx.doc.table(["model", "method", "words (eval / deploy)", "min coverage", "word boundary",
                       "answer position"], rows)


def _layer_selection(ctx: ReportContext, members: Sequence[str]) -> None:
    """Records that say how their layer was chosen (``layer_selection`` in details: probes)."""
    sel = [[r.label, m, ls.layer, ls.layer_selection, ls.sweep_best_layer, ls.sweep_selection_p, ls.sweep_null_q95]
           for r in ctx.runs for m in members if m in r.records
           for ls in [LayerSelection.of(r.records[m][0])] if ls is not None]
    if sel:
        ctx.doc.p("How each probe's layer was chosen (the first record's layer; nested out-of-fold records "
                  "each take their fold's). The sweep's best layer, chosen on all the data, is optimistic; "
                  "its p compares it with the best layer under label permutations (95th percentile of that "
                  "null shown): p >= 0.05 means no signal beyond the choice of layer. That p is the sweep's, "
                  "not the records' own.")
        ctx.doc.table(["model", "method", "layer", "selection", "sweep's best layer", "its p", "null 95th pct"],
                      sel)


def variants(records: Sequence[dict[str, Any]]) -> list[str]:
    """Score variants recorded in details as ``<variant>_p_eval`` (e.g. naive, top20, aware)."""
    return sorted({v for r in records for v in ScoreVariant.names(r)})



def gate(records: Sequence[dict[str, Any]], var: str) -> list[dict[str, Any]]:
    """Records scored by variant `var` of a coverage-gated method, withheld below the run's
    min_coverage (recorded per record; 0 for records from before the gate existed)."""
    out = []
    for x in records:
        v = ScoreVariant.of(x, var) or ScoreVariant(var)
        floor = (SignalGate.of(x) or SignalGate()).min_coverage
        ok = v.p_eval is not None and v.coverage is not None and v.coverage >= float(floor or 0.0)
        out.append(as_variant(x, var, v.p_eval if ok else None))
    return out


def as_variant(record: dict[str, Any], var: str, score: float | None) -> dict[str, Any]:
    """`record` scored by variant `var`: `score`, and the variant's own exact log-odds
    (``<var>_log_odds``, None where absent) as the ``log_odds`` a ranking reads
    (:func:`harness.stats.summaries.ranked`), never the method score's."""
    v = ScoreVariant.of(record, var)
    lo = LogOdds(v.log_odds if score is not None and v is not None else None)
    return {**record, "score": score, "details": {**(record.get("details") or {}), **lo.to_dict()}}


def signal_share(records: Sequence[dict[str, Any]]) -> str:
    n = len(records)
    k = sum(1 for r in records if r.get("score") is not None)
    return f"{k}/{n} ({pct(k / n) if n else '–'})"
