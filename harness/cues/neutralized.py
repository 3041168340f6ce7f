"""Neutralized AUROC: does a readout tell eval from deploy on the dataset's format-neutralized
twin as well as on the originals? (``evalaware cues --design neutralize``.)

Per readout, on the samples scored on both sides (a sample leaves whole when one side is
unscored; a sample with no removal made is its own twin, with the same score):

- the AUROC on the originals and on the twin with their difference (twin - original), every
  interval from the same resamples of categories (:func:`harness.stats.paired.paired_auroc`);
  a readout whose AUROC falls on the twin was reading the removed format;
- on the changed samples only, the mean change twin - original of the score (ΔP) and of its
  log-odds (:mod:`harness.cues.scale`), by label too (neutralizing should lower P(eval) on eval
  prompts; on deploy prompts it should do little);
- the same AUROCs for the surface predictors of ``data audit`` (out-of-fold, grouped CV by
  category, the same splits on both sides), on the samples every readout scored on both sides
  (the readouts' own rows may hold more: a probe leaves out its training samples): does
  neutralizing remove the surface signal?
- the factors the twins kept (a removal refused), by label: a readout that holds its AUROC
  because eval prompts kept their format is told apart from one that does not read it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.core.errors import EvalAwareError
from harness.core.sample import Sample
from harness.runlog.outputs import write_output
from harness.cues.variants import Plan
from harness.cues.effects import pairs_effect
from harness.stats.paired import paired_auroc

SURFACE = ("char_tfidf", "word_tfidf", "length", "cues_all")  # the audit's rows compared


def twins(plan: Plan) -> list[Sample]:
    """Each original's twin under the original's id (itself where no removal was made)."""
    by = {str(v.metadata.extra["pair"]): v for v in plan.variants}
    return [replace(s, messages=by[s.id].messages) if s.id in by else s for s in plan.originals]


def _effect(rows: Sequence[Mapping[str, Any]], key: str, n_boot: int, seed: int) -> dict[str, Any]:
    return pairs_effect(rows, n_boot, seed, key=key, pair="sample")


def readout(plan: Plan, scores: Mapping[str, float | None], log_odds: Mapping[str, float | None],
            n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """One readout's neutralized AUROC and changes (see the module docstring)."""
    twin_id = {str(v.metadata.extra["pair"]): v.id for v in plan.variants}
    rows, unscored = [], 0
    for s in plan.originals:
        t = twin_id.get(s.id, s.id)
        p0, p1 = scores.get(s.id), scores.get(t)
        if p0 is None or p1 is None:
            unscored += 1
            continue
        l0, l1 = log_odds.get(s.id), log_odds.get(t)
        rows.append({"sample": s.id, "label": s.label, "category": s.metadata.category,
                     "changed": s.id in twin_id, "score": p0, "twin_score": p1,
                     "log_odds": l0, "twin_log_odds": l1, "delta": p1 - p0,
                     "delta_log_odds": None if l0 is None or l1 is None else l1 - l0})
    y = [int(r["label"] == "eval") for r in rows]
    # ranked by the log-odds where every row has both (the same ranks as the scores, but a
    # logprob P(eval) of exactly 1.0 keeps its exact log-odds: no tie), else by the scores
    by_lo = bool(rows) and all(r["log_odds"] is not None and r["twin_log_odds"] is not None for r in rows)
    a, b = ("log_odds", "twin_log_odds") if by_lo else ("score", "twin_score")
    out = {"n_unscored": unscored, "n_changed": sum(r["changed"] for r in rows),
           "auroc": paired_auroc(y, [r[a] for r in rows], [r[b] for r in rows],
                                 [r["category"] for r in rows], n_boot, seed)}
    ch = [r for r in rows if r["changed"]]
    out["change"] = {"delta": _effect(ch, "delta", n_boot, seed),
                     "delta_log_odds": _effect(ch, "delta_log_odds", n_boot, seed),
                     "by_label": {lab: _effect([r for r in ch if r["label"] == lab], "delta_log_odds",
                                               n_boot, seed) for lab in ("eval", "deploy")}}
    out["per_sample"] = rows
    return out


def surface(plan: Plan, ids: set[str] | None = None, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The audit's surface predictors on the originals (those in `ids`, default all) and on their
    twins (out-of-fold scores, the same grouped splits; the view the edits reach: ``full`` when
    every user turn is edited): {predictor: paired_auroc(...)}, or {"error": why}."""
    from harness.data.audit import audit  # scikit-learn: only when this report is made

    keep = [i for i, s in enumerate(plan.originals) if ids is None or s.id in ids]
    all_twins = twins(plan)
    orig, twin = [plan.originals[i] for i in keep], [all_twins[i] for i in keep]
    view = "full" if plan.turns == "all" else "first_turn"
    try:
        a, b = audit(orig, view=view, n_boot=0, seed=seed), audit(twin, view=view, n_boot=0, seed=seed)
    except EvalAwareError as e:
        return {"error": str(e), "n": len(orig)}
    y = [int(s.label == "eval") for s in orig]
    groups = [s.metadata.category for s in orig]
    out: dict[str, Any] = {"cv": a.cv, "valid": a.valid, "n": len(orig), "view": view}
    for name in SURFACE:
        if name in a.oof and name in b.oof:
            out[name] = paired_auroc(y, a.oof[name], b.oof[name], groups, n_boot, seed)
    return out


def kept_by_label(plan: Plan) -> dict[str, dict[str, int]]:
    """Per label, how many samples kept each factor (its removal refused)."""
    label = {s.id: s.label for s in plan.originals}
    out: dict[str, dict[str, int]] = {"eval": {}, "deploy": {}}
    for r in plan.refused:
        d = out.setdefault(label[r["sample"]], {})
        d[r["factor"]] = d.get(r["factor"], 0) + 1
    return out


def write_neutralized(path: str | Path, plan: Plan, result: Mapping[str, Any], run_dir: str | Path,
                      inputs: Sequence[str | Path | None] = ()) -> int:
    """The twin as a dataset (JSONL, the native format, readable by every command): one line per
    original, its neutralized messages, and in ``metadata.neutralized`` the removals made, the
    factors kept with the reasons, and per readout its score on the original and the twin, the
    drop, the drop in log-odds, and what the score is (``scale``: the monitor's is nats). Written
    atomically, never over the run directory's own files or an input
    (:func:`harness.runlog.outputs.check_output`); returns the number of lines."""
    by_pair = {str(v.metadata.extra["pair"]): v for v in plan.variants}
    refused: dict[str, list[dict[str, str]]] = {}
    for r in plan.refused:
        refused.setdefault(r["sample"], []).append({"factor": r["factor"], "reason": r["reason"]})
    measured = {m: {r["sample"]: r for r in res["per_sample"]}
                for m, res in (result.get("neutralized") or {}).items()}
    lines = []
    for s in plan.originals:
        v = by_pair.get(s.id)
        ex = dict(s.metadata.extra)
        ex["neutralized"] = {
            "changes": list(v.metadata.extra["changes"]) if v else [],
            "kept": refused.get(s.id, []),
            "scores": {m: {"original": rows[s.id]["score"], "neutralized": rows[s.id]["twin_score"],
                           "drop": rows[s.id]["score"] - rows[s.id]["twin_score"],
                           "log_odds_drop": None if rows[s.id]["delta_log_odds"] is None
                           else -rows[s.id]["delta_log_odds"],
                           "scale": (result.get("scales") or {}).get(m)}
                       for m, rows in measured.items() if s.id in rows}}
        lines.append(replace(s, messages=v.messages if v else s.messages,
                             metadata=replace(s.metadata, extra=ex)).to_json())
    write_output(path, "".join(line + "\n" for line in lines), "--write-neutralized", mkdir=True,
                 runs=[run_dir], inputs=inputs)
    return len(lines)


def verdict(method: str, res: Mapping[str, Any]) -> str:
    """One line: does the readout's AUROC hold on the twin?"""
    a = res["auroc"]
    if a.get("auroc_a") is None or a.get("auroc_b") is None:
        return f"{method}: no AUROC (one class among the scored samples, or none scored)"
    d, ci = a["diff"], a.get("diff_ci")
    head = f"{method}: AUROC {a['auroc_a']:.3f} on the originals, {a['auroc_b']:.3f} on the twin ({d:+.3f}"
    if not ci:
        return head + "; no interval)"
    tail = f" [{ci[0]:+.3f}, {ci[1]:+.3f}])"
    if ci[1] < 0:
        return head + tail + ": falls when the format is removed (it read format)"
    if ci[0] > 0:
        return head + tail + ": rises when the format is removed"
    return head + tail + ": not distinguishable from no change"
