"""The report's first screen: what each run found, in sentences made from the numbers.

Per run, one block: which methods beat the best surface predictor of the prompts (the paired
difference's interval above 0), which sit at chance (the AUROC's interval covers 0.5), which
were withheld and why, and the largest surface cue. Every sentence is built from the same
summaries and paired differences the tables below show (`ReportContext.summ`, `.versus`), so
the words cannot disagree with the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from harness.reporting.context import ReportContext
from harness.reporting.doc import code, lit
from harness.reporting.linkage import link_sentence
from harness.reporting.runs import RunData


@dataclass(frozen=True)
class Verdict:
    """One method's reading on one run. `kind`: beats_surface, below_surface, like_surface
    (the difference's interval covers 0), no_surface (no valid surface predictor), no_auroc
    (gated), withheld (no sample decided)."""

    method: str
    kind: str
    chance: str | None  # above, at, below (the AUROC's interval against 0.5); None without one
    sentence: str


def _iv(ci: Sequence[float] | None, signed: bool = False) -> str:
    if not ci:
        return ""
    f = "{:+.2f}" if signed else "{:.2f}"
    return f" [{f.format(ci[0])}, {f.format(ci[1])}]"


def _chance(s: dict[str, Any]) -> str | None:
    ci = s.get("auroc_ci")
    if s.get("auroc") is None or not ci:
        return None
    return "above" if ci[0] > 0.5 else "below" if ci[1] < 0.5 else "at"


def _calls_eval(records: Sequence[dict[str, Any]]) -> str:
    """How the method's decisions split, e.g. "; of the 96 samples it decided, it called 93%
    eval" ("" when it decided none)."""
    decided = [r for r in records if r.get("prediction") in ("eval", "deploy")]
    if not decided:
        return ""
    share = sum(r["prediction"] == "eval" for r in decided) / len(decided)
    return f"; of the {len(decided)} samples it decided, it called {100 * share:.0f}% eval"


def verdict(ctx: ReportContext, m: str, r: RunData) -> Verdict:
    """The verdict of method `m` on run `r`, from the report's own summaries."""
    s = ctx.summ[(m, r.label)]
    recs = r.records[m]
    if s["n"] and s["undecided"] == s["n"] and s.get("auroc") is None:
        why = ", ".join(f"{k} {v}" for k, v in sorted(s["errors"].items(), key=lambda kv: -kv[1])) \
            or "undecided votes"
        return Verdict(m, "withheld", None, f"{code(m)}: withheld on all {s['n']} samples ({lit(why)}): "
                                           "no signal, so no verdict.")
    if s.get("auroc") is None:
        gate = s.get("auroc_gate") or "one class scored"
        return Verdict(m, "no_auroc", None, f"{code(m)}: no AUROC ({lit(gate)}){_calls_eval(recs)}.")
    chance = _chance(s)
    auroc = f"AUROC {s['auroc']:.3f}{_iv(s.get('auroc_ci'))}"
    where = {"above": "above chance", "at": "at chance (its interval covers 0.5)",
             "below": "below chance (it ranks deploy above eval)", None: "no interval"}[chance]
    v = ctx.versus(m, r)
    if v is None or v.get("diff") is None:
        return Verdict(m, "no_surface", chance, f"{code(m)}: {auroc}, {where}; no valid surface "
                                                f"predictor to compare with{_calls_eval(recs)}.")
    d, dci = v["diff"], v.get("diff_ci")
    kind = ("beats_surface" if dci and dci[0] > 0 else "below_surface" if dci and dci[1] < 0
            else "like_surface")
    vs = {"beats_surface": "beats", "below_surface": "is below",
          "like_surface": "is not distinguishable from"}[kind]
    return Verdict(m, kind, chance,
                   f"{code(m)}: {auroc}, {where}; {vs} the best surface predictor of the same "
                   f"{v['n']} prompts ({lit(v['best'])}, AUROC {v['best_auroc']:.3f}): difference "
                   f"{d:+.3f}{_iv(dci, True)}{_calls_eval(recs)}.")


def largest_cue(res: Any) -> str | None:
    """The single cue whose share differs most between eval and deploy samples, in words (the
    combined row is a model over all cues, not a cue)."""
    from harness.data.audit import CUES_ALL

    rows = [x for x in getattr(res, "rows", []) if x.share_eval is not None and x.share_deploy is not None
            and x.name != CUES_ALL]
    if not rows:
        return None
    top = max(rows, key=lambda x: abs(x.share_eval - x.share_deploy))
    if top.share_eval == top.share_deploy:
        return None
    return (f"the largest surface cue is {lit(top.name)} ({lit(top.description)}): in "
            f"{100 * top.share_eval:.0f}% of eval and {100 * top.share_deploy:.0f}% of deploy samples")


def headline(ctx: ReportContext, r: RunData, verdicts: Sequence[Verdict]) -> str:
    """The run's finding in one sentence, after the run's name in bold."""
    return f"**{lit(r.label)}**: {finding(ctx, r, verdicts)}."


def finding(ctx: ReportContext, r: RunData, verdicts: Sequence[Verdict]) -> str:
    """Who beats the prompts' surface, or that none does; who was withheld; the largest cue."""
    res, best = ctx.audit(r), ctx.best_surface(r)
    beat = [v.method for v in verdicts if v.kind == "beats_surface"]
    compared = [v for v in verdicts if v.kind in ("beats_surface", "below_surface", "like_surface")]
    if beat:
        out = (f"{', '.join(code(m) for m in beat)} {'beats' if len(beat) == 1 else 'beat'} what the "
               f"prompts' surface alone gives (the difference's interval above 0)")
    elif compared:
        out = (f"no method beats what the prompts' surface alone gives (best surface predictor "
               f"{lit(best.name)}: AUROC {best.auroc:.3f}{_iv([best.ci_lo, best.ci_hi] if best.ci_lo is not None else None)})")
    elif best is None:
        out = ("no method can be read against the prompts' surface (" +
               (lit(res) if isinstance(res, str) else "no valid surface predictor") + ")")
    else:
        out = "no method has an AUROC to compare with the prompts' surface"
    withheld = [v.method for v in verdicts if v.kind == "withheld"]
    if withheld:
        out += f"; withheld for no signal: {', '.join(code(m) for m in withheld)}"
    cue = largest_cue(res)
    return out + (f"; {cue}" if cue else "")


def findings_section(ctx: ReportContext) -> None:
    """Findings first: per run, the headline and one sentence per method."""
    d = ctx.doc
    d.h(2, "Findings")
    for r in ctx.runs:
        human = dict(ctx.human_row(r))
        verdicts = [verdict(ctx, m, r) for m in ctx.present(r)]
        d.p(headline(ctx, r, verdicts))
        items = [v.sentence for v in verdicts]
        items += [f"for reference, {lit(name)} (human annotations): AUROC {h['auroc']:.3f}"
                  f"{_iv(h.get('auroc_ci'))} on these samples." for name, h in human.items()
                  if h.get("auroc") is not None]
        if link := link_sentence(ctx, r):
            items.append("awareness and behaviour: " + link)
        d.ul(items)
    d.p("Read each method against the prompts' surface: a method that does not beat the best "
        "surface predictor shows nothing the prompt's wording did not already give away. The "
        "tables below hold every number; definitions and the interval rules are at the end.")
