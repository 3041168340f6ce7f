"""The linkage table (issue 45): does the model behave differently on the samples an awareness
readout calls eval? One row per (run, behaviour, readout, stratum) from
:meth:`ReportContext.linkage` (:mod:`harness.stats.linkage`); strata ``all``, within
eval-labelled and within deploy-labelled samples, so a link that only the label carries shows as
one over all samples and none within either label. The Findings sentence is :func:`link_sentence`.
"""

from __future__ import annotations

from typing import Any

from harness.reporting.context import ReportContext
from harness.reporting.doc import code, pct, rules_note
from harness.reporting.runs import RunData
from harness.stats.linkage import MIN_SIDE, STRATA

STRATUM_NAMES = {"all": "all samples", "eval_labelled": "eval-labelled only",
                 "deploy_labelled": "deploy-labelled only"}


def _iv(v: float | None, ci: Any, f: str = "{:+.2f}") -> str:
    if v is None:
        return "–"
    return f.format(v) + (f" [{f.format(ci[0])}, {f.format(ci[1])}]" if ci else "")


def link_sentence(ctx: ReportContext, r: RunData) -> str | None:
    """The run's linkage finding in one sentence (None without behaviour records): per behaviour,
    the readouts whose link holds within a label stratum, or that none does."""
    parts = []
    for b, by_readout in ctx.linkage(r).items():
        within = [f"{code(m)} ({STRATUM_NAMES[s]}: behaviour rate {_iv(t[s]['diff'], t[s]['diff_ci'])} "
                  f"when called eval)" for m, t in by_readout.items() for s in STRATA[1:]
                  if t[s]["verdict"].endswith("called eval")]
        pooled = [code(m) for m, t in by_readout.items() if t["all"]["verdict"].endswith("called eval")]
        measured = [code(m) for m, t in by_readout.items() if any(t[s]["verdict"] == "no link shown" for s in STRATA)]
        silent = [code(m) for m, t in by_readout.items() if all(t[s]["verdict"].startswith("no verdict") for s in STRATA)]
        if within:
            parts.append(f"{code(b)} goes with awareness within a label: " + "; ".join(within))
        elif pooled:
            parts.append(f"{code(b)} differs with {', '.join(pooled)}'s calls over all samples, but within "
                         "neither label (the label, not awareness, may carry it)")
        elif measured:
            parts.append(f"no readout's calls go with {code(b)}: no link shown by {', '.join(measured)} (every "
                         "interval covers 0)" + (f"; no verdict for {', '.join(silent)}" if silent else ""))
        else:
            parts.append(f"no verdict on {code(b)}: every readout has a side (called eval, called deploy) with "
                         f"fewer than {MIN_SIDE} samples in every stratum")
    return "; ".join(parts) + "." if parts else None


def linkage_section(ctx: ReportContext) -> None:
    """The table, where some run has behaviour records."""
    runs = [r for r in ctx.runs if r.behaviours]
    if not runs:
        return
    d = ctx.doc
    d.h(2, "Awareness and behaviour")
    d.p("Per awareness readout: the behaviour rate on the samples it calls eval and on those it calls "
        "deploy, their difference (eval - deploy) and odds ratio (0.5 added to each cell), over all "
        "samples and within each label. The within-label rows hold the label fixed: a link over all "
        f"samples that neither holds is the label's. A side with fewer than {MIN_SIDE} samples: no verdict.")
    rows, rules = [], []
    for r in runs:
        for b, by_readout in ctx.linkage(r).items():
            for m, table in by_readout.items():
                for s in STRATA:
                    t = table[s]
                    rules.append(t["ci_method"])
                    rows.append([r.label, b, m, STRATUM_NAMES[s], f"{t['n_eval']} / {t['n_deploy']}",
                                 pct(t["rate_eval"]), pct(t["rate_deploy"]), _iv(t["diff"], t["diff_ci"]),
                                 _iv(t["odds_ratio"], t["odds_ratio_ci"], "{:.2f}"), t["verdict"]])
    d.table(["model", "behaviour", "readout", "samples", "called eval / deploy", "rate | eval",
             "rate | deploy", "difference", "odds ratio", "verdict"], rows)
    d.p(rules_note("Intervals", rules) + f" Behaviours are scored on the model's own answer (the "
        f"{code('behaviour')} method, {code('harness/methods/behaviour.py')}).")
