"""The linkage table (issue 45): does the model behave differently on the samples an awareness
readout calls eval? One row per (run, behaviour, readout, stratum) from
:meth:`ReportContext.linkage` (:mod:`harness.stats.linkage`); strata ``all``, within
eval-labelled and within deploy-labelled samples, so a link that only the label carries shows as
one over all samples and none within either label. The Findings sentence is :func:`linkage_sentence`:
it calls a link shown only after Holm's correction across the readouts' tests.
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


def _n(t: Any) -> str:
    """n and the samples left out: undecided, and (where any) those the readout has no record of."""
    return f"{t['n']} ({t['n_undecided']} undecided" + (f", {t['n_no_record']} no record)" if t.get("n_no_record") else ")")


def _tests(by_readout: Any, strata: tuple[str, ...]) -> int:
    """The size of the Holm family of `strata` (0 where no row of it is a test)."""
    return max((t[s]["holm_family"] or 0 for t in by_readout.values() for s in strata), default=0)


def _holm(k: int, n_readouts: int, within: bool) -> str:
    what = f"the {k} within-label tests of {n_readouts} readout{'s' * (n_readouts != 1)}" if within else (
        f"the {k} readout{'s' * (k != 1)}")
    return f"Holm across {what}"


def linkage_sentence(links: Any) -> str | None:
    """The linkage finding in one sentence ({behaviour: {readout: {stratum: row}}},
    :func:`harness.stats.linkage.readout_linkage`; None without behaviours): per behaviour, the
    readouts whose link stands within a label after Holm across the readouts' within-label tests;
    else those whose link over all samples stands after Holm, and per readout whether the labels'
    strata showed none, held too few samples to tell, or one showed none and the other was too
    thin; else that none does."""
    parts = []
    for b, by_readout in links.items():
        n_read, k_in, k_all = len(by_readout), _tests(by_readout, STRATA[1:]), _tests(by_readout, STRATA[:1])
        within = [f"{code(m)} ({STRATUM_NAMES[s]}: behaviour rate {_iv(t[s]['diff'], t[s]['diff_ci'])} "
                  f"when called eval)" for m, t in by_readout.items() for s in STRATA[1:] if t[s]["holm_shown"]]
        pooled = [m for m, t in by_readout.items() if t["all"]["holm_shown"]]
        measured = [code(m) for m, t in by_readout.items() if any(t[s]["holm_family"] for s in STRATA)]
        silent = [code(m) for m, t in by_readout.items() if not any(t[s]["holm_family"] for s in STRATA)]
        if within:
            parts.append(f"{code(b)} goes with awareness within a label ({_holm(k_in, n_read, True)}): "
                         + "; ".join(within))
        elif pooled:
            def tested(m: str) -> list[bool]:
                return [bool(by_readout[m][s]["holm_family"]) for s in STRATA[1:]]

            both = [code(m) for m in pooled if all(tested(m))]
            thin = [code(m) for m in pooled if not any(tested(m))]
            said = []
            if both:
                said.append(f"within neither label for {', '.join(both)} (the label, not awareness, may carry it)")
            if thin:
                said.append(f"too few samples within each label to tell for {', '.join(thin)}")
            for m in (m for m in pooled if any(tested(m)) and not all(tested(m))):  # one stratum tested
                one, other = (STRATA[1], STRATA[2]) if tested(m)[0] else (STRATA[2], STRATA[1])
                said.append(f"no link within {STRATUM_NAMES[one].removesuffix(' only')} samples and too few "
                            f"within {STRATUM_NAMES[other].removesuffix(' only')} samples to tell for {code(m)}")
            parts.append(f"{code(b)} differs with {', '.join(code(m) for m in pooled)}'s calls over all samples "
                         f"({_holm(k_all, n_read, False)}), but " + "; ".join(said))
        elif measured:
            parts.append(f"no readout's calls go with {code(b)}: no link shown by {', '.join(measured)} "
                         f"({_holm(k_all, n_read, False)} over all samples"
                         + (f", {_holm(k_in, n_read, True)}" if k_in else "") + ")"
                         + (f"; no verdict for {', '.join(silent)}" if silent else ""))
        else:
            parts.append(f"no verdict on {code(b)}: every readout has a side (called eval, called deploy) with "
                         f"fewer than {MIN_SIDE} samples in every stratum")
    return "; ".join(parts) + "." if parts else None


def link_sentence(ctx: ReportContext, r: RunData) -> str | None:
    """The run's linkage finding in one sentence (:func:`linkage_sentence`; None without behaviour records)."""
    return linkage_sentence(ctx.linkage(r))


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
        f"samples that neither holds is the label's. A side with fewer than {MIN_SIDE} samples: no verdict. "
        "Samples the readout made no call on, or has no record of, leave, counted beside n. Each verdict is its own 95% interval's; "
        "the Findings call a link shown only after Holm's correction across the readouts (the rows over all "
        "samples one family, the within-label rows another), as the last column says.")
    rows, rules = [], []
    for r in runs:
        for b, by_readout in ctx.linkage(r).items():
            for m, table in by_readout.items():
                for s in STRATA:
                    t = table[s]
                    rules.append(t["ci_method"])
                    holm = "–" if not t["holm_family"] else (
                        f"{'shown' if t['holm_shown'] else 'not shown'} ({t['holm_family']} tests)")
                    rows.append([r.label, b, m, STRATUM_NAMES[s], _n(t),
                                 f"{t['n_eval']} / {t['n_deploy']}",
                                 pct(t["rate_eval"]), pct(t["rate_deploy"]), _iv(t["diff"], t["diff_ci"]),
                                 _iv(t["odds_ratio"], t["odds_ratio_ci"], "{:.2f}"), t["verdict"], holm])
    d.table(["model", "behaviour", "readout", "samples", "n", "called eval / deploy", "rate | eval",
             "rate | deploy", "difference", "odds ratio", "verdict", "after Holm"], rows)
    d.p(rules_note("Intervals", rules) + f" Behaviours are scored on the model's own answer (the "
        f"{code('behaviour')} method, {code('harness/methods/behaviour.py')}).")
