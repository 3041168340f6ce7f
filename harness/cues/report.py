"""The cue-attribution report: ``cues.json`` (every number), ``cues.md`` / ``cues.html`` (a ranked
table of factor effects per method, with n pairs and intervals, the splits by direction and
label, the text diff of two example pairs per factor, the refusals) and one forest plot per
method (``forest-<method>.png``)."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any, Sequence

from harness.core.atomic import write_text
from harness.core.sample import Message
from harness.cues.variants import Plan
from harness.reporting.doc import Doc, ci, slug

CONTEXT = 40  # characters of unchanged text shown around each change
JSON_NAME = "cues.json"


def messages_text(messages: Sequence[Message]) -> str:
    return "\n".join(f"[{m.role}] {m.content or ''}" for m in messages)


def inline_diff(a: str, b: str, context: int = CONTEXT) -> str:
    """A word-level diff of `a` -> `b`: removed text as ``[-...-]``, added text as ``{+...+}``,
    unchanged stretches cut to `context` characters on each side (``…``); newlines as ``⏎``."""
    ta, tb = re.split(r"(\s+)", a), re.split(r"(\s+)", b)
    out: list[str] = []
    ops = difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes()
    for i, (op, a0, a1, b0, b1) in enumerate(ops):
        if op == "equal":
            same = "".join(ta[a0:a1])
            first, last = i == 0, i == len(ops) - 1
            if len(same) > 2 * context or (first or last) and len(same) > context:
                head = "" if first else same[:context]
                tail = "" if last else same[-context:]
                same = head + "…" + tail
            out.append(same)
            continue
        if a1 > a0:
            out.append("[-" + "".join(ta[a0:a1]) + "-]")
        if b1 > b0:
            out.append("{+" + "".join(tb[b0:b1]) + "+}")
    return "".join(out).replace("\n", "⏎")


def examples(plan: Plan, per_factor: int = 2) -> dict[str, list[dict[str, str]]]:
    """Per factor, `per_factor` variants (one of each direction where both exist, first by id)
    with the diff of their messages."""
    orig = {s.id: s for s in plan.originals}
    out: dict[str, list[dict[str, str]]] = {}
    by: dict[str, list[Any]] = {}
    for v in sorted(plan.variants, key=lambda v: v.id):
        by.setdefault(str(v.metadata.extra["factor"]), []).append(v)
    for name, vs in by.items():
        dirs: dict[str, list[Any]] = {}
        for v in vs:
            dirs.setdefault(str(v.metadata.extra["direction"]), []).append(v)
        pick = [d[0] for d in dirs.values()][:per_factor]
        pick += [v for v in vs if v not in pick][:per_factor - len(pick)]
        out[name] = [{"sample": v.metadata.extra["pair"], "direction": v.metadata.extra["direction"],
                      "diff": inline_diff(messages_text(orig[v.metadata.extra["pair"]].messages),
                                          messages_text(v.messages))} for v in pick]
    return out


def _ranked_effect(r: dict[str, Any]) -> tuple[float | None, list[float] | None, str]:
    """The effect a row is ranked by: (mean, interval, unit) on the log-odds scale where there is
    one, else on the score."""
    lo = r.get("logit") or {}
    if lo.get("mean") is not None:
        return lo["mean"], lo.get("ci"), " log-odds"
    return r.get("mean"), r.get("ci"), ""


def factor_verdict(method: str, rows: list[dict[str, Any]]) -> str:
    """Which factors move this readout: those whose effect's interval (log-odds, as ranked)
    excludes 0, largest first."""
    eff = [(r, *_ranked_effect(r)) for r in rows]
    moved = [(r, m, c, u) for r, m, c, u in eff if c and (c[0] > 0 or c[1] < 0)]
    if not moved:
        top = next(((r, m, u) for r, m, _, u in eff if m is not None), None)
        return (f"{method}: no factor moves it (none of {len(rows)} factors' intervals excludes 0"
                + (f"; largest effect {top[0]['factor']} {top[1]:+.3f}{top[2]})" if top else ")"))
    return f"{method}: moved by " + ", ".join(
        f"{r['factor']} ({m:+.3f} [{c[0]:+.3f}, {c[1]:+.3f}]{u})" for r, m, c, u in moved) + \
        f" ({len(moved)} of {len(rows)} factors)"


def _fmt(e: dict[str, Any] | None) -> str:
    if not e or e.get("mean") is None:
        return "–"
    return f"{ci(e['mean'], e.get('ci'))} (n={e['n']})"


def _readouts_table(doc: Doc, result: dict[str, Any]) -> None:
    """Every readout's factor effects in one table: a row per factor, per readout its rank within
    that readout and its log-odds effect; rows by the mean rank over the readouts (ranks, not
    sizes, are compared across readouts: a monitor's nats, a probe's decision values and a
    method's logits are different units)."""
    eff = result["effects"]
    if len(eff) < 2:
        return
    ms = list(eff)
    by = {m: {r["factor"]: r for r in rows} for m, rows in eff.items()}
    def rank(m: str, f: str) -> int:
        r = by[m].get(f)
        return r["rank"] if r is not None and _ranked_effect(r)[0] is not None else len(by[m]) + 1

    factors = sorted({f for rows in by.values() for f in rows}, key=lambda f: (sum(rank(m, f) for m in ms), f))

    def cell(r: dict[str, Any] | None) -> str:
        mean, interval, unit = _ranked_effect(r) if r is not None else (None, None, "")
        if r is None or mean is None:
            return "–"
        return f"#{r['rank']}: {ci(mean, interval)}{' (score)' if not unit and mean is not None else ''}"

    doc.h(2, "All readouts side by side")
    doc.p("Per readout, each factor's rank within that readout and its paired log-odds effect "
          "[95% CI] (the monitor's unit is nats of its log-ratio, the probe's its decision value: "
          "sizes are comparable within a column, ranks across columns); rows by the mean rank.")
    doc.table(["factor", *ms], [[f, *[cell(by[m].get(f)) for m in ms]] for f in factors])


def _neutralized_section(doc: Doc, result: dict[str, Any]) -> None:
    """Neutralized AUROC per readout and per surface predictor, and the change on changed samples."""
    from harness.cues.neutralized import verdict

    neu = result.get("neutralized") or {}
    doc.h(2, "Neutralized AUROC: originals vs their format-neutralized twin")
    doc.p("Each sample with every factor it shows removed (its twin; a sample with nothing removed is "
          "its own twin). AUROC on the originals and on the twin over the same scored samples, and "
          "the difference twin − original, each interval over categories by the rule its row names. A "
          "readout whose AUROC falls on the twin was reading the removed format; the surface "
          "predictors (out-of-fold, the same grouped splits) show how much surface signal the "
          "neutralizing removed.")
    doc.ul([verdict(m, n) for m, n in neu.items()])
    rows = []
    for m, n in neu.items():
        a = n["auroc"]
        rows.append([m, a["n"], n["n_changed"], ci(a["auroc_a"], a.get("auroc_a_ci")),
                     ci(a["auroc_b"], a.get("auroc_b_ci")), ci(a["diff"], a.get("diff_ci")),
                     a.get("diff_ci_method") or "–"])
    surf = result.get("surface") or {}
    if "error" in surf:
        doc.p(f"Surface predictors: not computed ({surf['error']}).")
    for name, a in surf.items():
        if isinstance(a, dict) and "auroc_a" in a:
            rows.append([f"surface: {name}", a["n"], "–", ci(a["auroc_a"], a.get("auroc_a_ci")),
                         ci(a["auroc_b"], a.get("auroc_b_ci")), ci(a["diff"], a.get("diff_ci")),
                         a.get("diff_ci_method") or "–"])
    doc.table(["readout", "n", "changed", "AUROC originals", "AUROC twin", "twin − original", "interval"], rows)
    if surf.get("n") is not None and "error" not in surf:
        doc.p(f"Surface predictors: on the {surf['n']} samples every readout scored on both sides, "
              f"view `{surf.get('view')}`, {surf.get('cv')} CV.")
    if surf.get("cv") == "random" or surf.get("valid") is False:
        doc.p("Surface AUROCs: grouped CV was not valid on these samples (see `data audit`).")
    kept = result.get("kept_by_label") or {}
    if any(kept.values()):
        doc.p("Factors the twins kept (removal refused), by label: " + "; ".join(
            f"{lab}: " + (", ".join(f"{f} {n}" for f, n in sorted(d.items())) or "none")
            for lab, d in kept.items()) + ". A readout that holds its AUROC where eval prompts kept "
            "their format may still read it.")
    doc.h(3, "Change on the changed samples (twin − original)")
    doc.table(["readout", "n changed", "Δ log-odds [95% CI]", "Δ score [95% CI]", "Δ log-odds, eval",
               "Δ log-odds, deploy", "unscored"],
              [[m, n["change"]["delta"]["n"], ci(n["change"]["delta_log_odds"]["mean"], n["change"]["delta_log_odds"].get("ci")),
                ci(n["change"]["delta"]["mean"], n["change"]["delta"].get("ci")),
                _fmt(n["change"]["by_label"]["eval"]), _fmt(n["change"]["by_label"]["deploy"]), n["n_unscored"]]
               for m, n in neu.items()])


def write_report(result: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """cues.json, cues.md, cues.html and the forest plots into `out_dir`; their paths."""
    from harness.reporting import plots  # matplotlib: ~0.7 s, only when writing the report

    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    doc = Doc()
    st = result["settings"]
    doc.h(1, "Causal cue attribution")
    doc.p(f"Model `{st['model']}`, dataset `{st['dataset']}` ({result['n_samples']} samples, "
          f"{result['n_variants']} variants), design `{st['design']}`, edits on the `{st['turns']}` user "
          f"turn(s). " + ("Each sample is compared with its format-neutralized twin (every factor it "
          f"shows removed); " if st["design"] == "neutralize" else "An effect is the mean paired change "
          f"of the method's score (P(eval)) when the factor is present minus when it is absent; ") +
          f"95% intervals over categories (fewer than 50: the "
          f"cluster jackknife deleting whole categories; from 50 on the two-stage bootstrap of categories, "
          f"then pairs within them, {st['bootstrap']} resamples; each figure names its rule). An interval that "
          f"covers 0 does not tell the change from none; fewer than 5 pairs get no interval.")
    if result.get("partial"):
        doc.p("**Report only** (`--report-only`): from the records in this directory when it was written; "
              "pairs not scored yet count as unscored.")
    c = result.get("cost") or {}
    if c.get("seconds_per_pair") is not None:
        doc.p(f"Cost: {c['scored']} samples scored in {c['seconds']:.1f} s wall-clock, {c['cpu_seconds']:.1f} s CPU "
              f"({len(c['invocations'])} invocation(s), model loading excluded): "
              f"{c['seconds_per_pair']:.2f} s wall-clock, {c['cpu_seconds_per_pair']:.2f} s CPU per sample-factor "
              f"pair, all methods; {c['model_calls']} model calls, {c['cache_hits']} cache hits.")
    if st["design"] == "neutralize":
        _neutralized_section(doc, result)
    else:
        doc.h(2, "Verdicts")
        doc.ul([factor_verdict(m, rows) for m, rows in result["effects"].items()])
        _readouts_table(doc, result)
    for m, rows in result["effects"].items():
        doc.h(2, f"{m}: ranked factor effects")
        base = result["baseline"].get(m) or {}
        if base.get("mean") is not None:
            doc.p(f"Mean score of the originals: {base['mean']:.3f} ({base['n']} scored of "
                  f"{result['n_samples']}).")
        factorial = st["design"] == "factorial"
        head = ["rank", "factor", "n pairs", "categories", "Δ log-odds [95% CI]", "Δ score [95% CI]"]
        head += [] if factorial else ["add", "remove"]
        head += ["label eval", "label deploy", "unscored", "clipped"]
        table = []
        for r in rows:
            lo = r.get("logit") or {}
            row = [r["rank"], r["factor"], r["n"], r["n_groups"], ci(lo.get("mean"), lo.get("ci")),
                   ci(r["mean"], r["ci"])]
            if not factorial:
                row += [_fmt(r["by_direction"]["add"]), _fmt(r["by_direction"]["remove"])]
            row += [_fmt(r["by_label"]["eval"]), _fmt(r["by_label"]["deploy"]), r["n_unscored"],
                    r.get("n_clipped", 0)]
            table.append(row)
        doc.p(f"Log-odds: {result.get('scales', {}).get(m, 'logit(P)')}; ranked by the log-odds effect. "
              f"The splits (add / remove, by label) are on the score; `clipped`: pairs with a score of "
              f"exactly 0 or 1, left out of the log-odds effect.")
        doc.table(head, table)
        fig = d / f"forest-{slug(m)}.png"
        plots.forest(fig, f"{m}: effect of each factor on the score (95% CI)", [
            {"label": r["factor"], "mean": r["mean"], "ci": r["ci"], "n": r["n"],
             "parts": {} if factorial else r["by_direction"]} for r in rows],
            "score with the factor − score without (paired)")
        paths[fig.name] = fig
        rules = sorted({r["ci_method"] for r in rows if r.get("ci_method")})
        doc.fig(fig, f"{m}: factor effects (black: all pairs; squares: add / remove variants; 95% "
                     f"intervals: {'; '.join(rules) or 'none'}).")
        inter = result.get("interactions", {}).get(m)
        if inter:
            doc.h(3, f"{m}: interactions")
            doc.table(["term", "n samples", "effect [95% CI]"], [[r["factor"], r["n"], ci(r["mean"], r["ci"])]
                                                                for r in inter])
    doc.h(2, "Factors: where they apply")
    doc.table(["factor", "description", "present", "absent", "add variants", "remove variants", "refused"],
              [[n, f["description"], f["n_present"], f["n_absent"], f["n_add"], f["n_remove"],
                "; ".join(f"{k}: {v}" for k, v in f["refused"].items()) or "–"]
               for n, f in result["factors"].items()])
    doc.h(2, "Example pairs (what was switched)")
    doc.p("Word diffs of the messages ([role] text): `[-removed-]`, `{+added+}`; ⏎ is a line break.")
    doc.table(["factor", "direction", "sample", "diff"],
              [[name, e["direction"], e["sample"], e["diff"]] for name, es in result["examples"].items()
               for e in es])
    paths["cues.md"] = d / "cues.md"
    paths["cues.html"] = d / "cues.html"
    paths[JSON_NAME] = d / JSON_NAME
    write_text(paths["cues.md"], doc.markdown())
    write_text(paths["cues.html"], doc.html("evalaware cues"))
    write_text(paths[JSON_NAME], json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    return paths


def load_summary(path: str | Path, top: int = 3) -> dict[str, Any]:
    """What another report shows of a cues result: where it is and the top factors per method
    (`path`: the cues output directory or its cues.json)."""
    p = Path(path)
    p = p / JSON_NAME if p.is_dir() else p
    res = json.loads(p.read_text())
    return {"json": str(p), "report": str(p.with_name("cues.md")), "design": res["settings"]["design"],
            "top": {m: [{k: r[k] for k in ("rank", "factor", "n", "mean", "ci")} for r in rows[:top]]
                    for m, rows in res["effects"].items()}}
