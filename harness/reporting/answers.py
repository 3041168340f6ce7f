"""Answers that could not be used (per kind) and the judges' verdicts and evidence."""

from __future__ import annotations

from collections import Counter
from typing import Any

from harness.core.details import NO_SIGNAL, votes_of
from harness.stats.tally import tally
from harness.reporting.context import ReportContext
from harness.reporting.runs import is_judged, method_label

ERROR_KINDS = ("unparseable", "out_of_range", "judge_failed", "unverified", "no_text", NO_SIGNAL)


def errors_section(ctx: ReportContext) -> None:
    d = ctx.doc
    d.h(2, "Excluded answers")
    d.p("Answers that could not be used are never counted as either class: `unparseable` (no "
        "strict answer found), `out_of_range` (a probability outside [0, 1]), `judge_failed` "
        "(the judge's verdict was not valid JSON with a true/false `aware`), `unverified` (the "
        "verdict quotes evidence, none of which occurs in the judged text, or copies a quote of the "
        "judge prompt itself), `no_text` (nothing "
        "to judge, e.g. no reasoning), `no_signal` (a logprob sample whose target words carry "
        "less probability than the run's `--min-coverage`). Undecided = samples without a valid "
        "majority (no valid vote, or a tie).")
    rows = []
    for r in ctx.runs:
        for m in ctx.present(r):
            s = ctx.summ[(m, r.label)]
            nv = sum(len(votes_of(x)) for x in r.records[m])
            if not nv and not s["undecided"]:
                continue  # scored methods without votes (logprob, probes)
            rows.append([r.label, m, nv] + [s["errors"].get(k, 0) for k in ERROR_KINDS] + [s["undecided"]])
    d.table(["model", "method", "votes", *ERROR_KINDS, "undecided samples"], rows)


def judge_section(ctx: ReportContext) -> None:
    """Per judged method (its class says ``needs_judge``): verdicts, quotes, verified quotes,
    the reasoning source, and the most cited prompt features."""
    judged = [(r, m) for r in ctx.runs for m in ctx.present(r) if is_judged(m)]
    if not judged:
        return
    d = ctx.doc
    d.h(2, "Judge verdicts and evidence")
    d.p("Quotes are verified when they occur verbatim (up to whitespace) in the judged text. "
        "A verdict that quotes evidence none of which is verified, or that copies a quote of the "
        "judge prompt's own example, casts no vote (`unverified`, counted apart from unusable "
        "`unjudged` verdicts).")
    rows, feats = [], []
    for r, m in judged:
        c, fc = _judge_counts(r.records[m])
        sources = ", ".join(f"{k[7:]}: {v}" for k, v in sorted(c.items()) if k.startswith("source_"))
        t = tally(r.records[m])
        rows.append([r.label, method_label(m, r.manifest), c["votes"], c["verdicts"], t["unjudged"],
                     c["aware"], c["quotes"], c["verified"], t["unverified"], c["aware_unsupported"],
                     sources or "–"])
        feats += [[r.label, m, f, n] for f, n in fc.most_common(10)]
    d.table(["model", "method", "votes", "valid verdicts", "unjudged", "aware", "quotes",
             "verified quotes", "verdicts with no verified quote", "aware without verified quote",
             "reasoning source"], rows)
    if feats:
        d.h(3, "Most cited prompt features (aware verdicts)")
        d.table(["model", "method", "feature", "count"], feats)


def _judge_counts(records: list[dict[str, Any]]) -> tuple[Counter[str], Counter[str]]:
    """(counts of votes, verdicts, aware verdicts, quotes, verified quotes, aware verdicts
    without a verified quote, reasoning sources; cited features of aware verdicts)."""
    c: Counter[str] = Counter()
    fc: Counter[str] = Counter()
    for rec in records:
        src = (rec.get("details") or {}).get("reasoning_source")
        if src:
            c[f"source_{src}"] += 1
        for v in (rec.get("details") or {}).get("votes") or []:
            j = v.get("judge") or {}
            c["votes"] += 1
            if j.get("aware") is None:
                continue
            c["verdicts"] += 1
            if j["aware"]:
                c["aware"] += 1
                ev = j.get("evidence") or []
                c["quotes"] += len(ev)
                c["verified"] += sum(1 for e in ev if e.get("verified"))
                if not any(e.get("verified") for e in ev):
                    c["aware_unsupported"] += 1
                for e in ev:
                    if e.get("feature"):
                        fc[e["feature"].strip().lower()] += 1
    return c, fc


