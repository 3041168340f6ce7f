"""`evalaware steer report`: dose-response of every method against alpha, vector vs random.

Per method and condition: mean P(eval) (record ``score``) and the share of decided samples
called eval, each with a 95% bootstrap interval that resamples whole categories (samples of one
category are not independent; the cluster bootstrap of :mod:`harness.stats.metrics`), and the
paired change in P(eval) against the unsteered condition on the same samples (with its interval:
the comparison that matters, since between-sample spread dwarfs a steering effect). The sanity
column is the perplexity of a fixed neutral text under the same condition.

Control distribution: per alpha, the vector's delta is ranked among the deltas of the N random
directions (norm-matched; rank 1 = the largest |delta|; the rank p = rank / (N + 1) is the share of
the N + 1 directions at least as extreme), and the paired vector − random difference (per sample:
vector delta minus the mean delta of the random directions) gets an interval at a Bonferroni level
over the alphas tested (0.05 / number of alphas), so many alphas at once do not make one look
significant by chance; each row says so. Intervals from fewer than
:data:`harness.stats.metrics.SMALL_SAMPLE_UNITS` categories are cluster-jackknife t intervals
(`harness.stats.metrics.interval_method`), which the report names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.core.errors import EvalAwareError
from harness.methods import report_specs
from harness.stats.metrics import SMALL_SAMPLE_UNITS, interval_weighted, weighted_mean_rows
from harness.reporting.report import Doc, ci as _ci
from harness.runlog import RunLog
from harness.runlog.outputs import write_output

from probes.steering.run import PLAN_FILE
from probes.steering.verdicts import RULE, family_level, steer_verdict, tally


def _mean_ci(values: Sequence[tuple[str, float | None]], groups: dict[str, str], n_boot: int,
             seed: int, alpha: float = 0.05,
             bounds: tuple[float, float] | None = None) -> tuple[float | None, Any, str | None]:
    """Mean of the (sample id, value) pairs with a (1 - alpha) interval over whole categories
    (:func:`harness.stats.metrics.bootstrap_weighted` with `groups`: percentile cluster bootstrap,
    or the cluster-jackknife t interval below SMALL_SAMPLE_UNITS categories; `bounds` (0, 1) for a
    probability or a rate, so its interval stays inside them); no interval from a single category.
    The third value names the interval's rule."""
    pairs = [(sid, float(v)) for sid, v in values if v is not None]
    if not pairs:
        return None, None, None
    v = np.array([x for _, x in pairs])
    g = [groups.get(sid, sid) for sid, _ in pairs]
    ci = interval_weighted(lambda W: weighted_mean_rows(W, v), len(v), n=n_boot, seed=seed, groups=g,
                           alpha=alpha, bounds=bounds) if len(set(g)) > 1 else None
    return float(v.mean()), None if ci is None else ci.pair(), None if ci is None else ci.method


def _rank(vector_delta: float, deltas: Sequence[float]) -> int:
    """1 + the directions at least as extreme (by |delta|) as the vector: ties count against it."""
    return 1 + sum(abs(d) >= abs(vector_delta) for d in deltas)


def random_control(rows: Sequence[dict[str, Any]], scores: dict[str, dict[str, float]],
                   common: set[str] | dict[float, set[str]], groups: dict[str, str], n_alphas: int,
                   n_boot: int, seed: int) -> list[dict[str, Any]]:
    """Per alpha with a vector and controls: the random directions' deltas, the vector's rank
    among them (by |delta|, 1 = most extreme, ties counted against the vector) and its rank p
    (rank / (N + 1)), and the paired vector − random difference on the common samples (vector
    score minus the mean score of the random directions, per sample) with an interval at the
    Bonferroni level 0.05 / `n_alphas`. With unrelated-contrast rows (control ``contrast``) the
    same against them (``contrast_*``, ``vector_minus_contrast``: minus the contrasts' mean), the
    strongest contrast, and the rank among every control (``rank_all`` of N + M + 1)."""
    out = []
    level = family_level(n_alphas)
    for a in sorted({r["alpha"] for r in rows if r["control"] == "vector"}):
        vec = next(r for r in rows if r["control"] == "vector" and r["alpha"] == a)
        fam = {ctl: [r for r in rows if r["control"] == ctl and r["alpha"] == a and r["delta"] is not None]
               for ctl in ("random", "contrast")}
        if not (fam["random"] or fam["contrast"]) or vec["delta"] is None:
            continue
        ids = sorted(common[a] if isinstance(common, dict) else common)
        entry: dict[str, Any] = {"alpha": a, "vector_delta": vec["delta"], "ci_level": 1 - level,
                                 "n_common": len(ids)}
        for ctl, key in (("random", "random"), ("contrast", "contrast")):
            rs = fam[ctl]
            if not rs:
                continue
            rd = [r["delta"] for r in rs]
            diffs = [(sid, scores[vec["condition"]][sid] - float(np.mean([scores[r["condition"]][sid] for r in rs])))
                     for sid in ids]
            d, d_ci, d_rule = _mean_ci(diffs, groups, n_boot, seed, alpha=level)
            rank = _rank(vec["delta"], rd)
            entry.update({f"n_{key}": len(rs), f"{key}_deltas": rd, f"{key}_mean": float(np.mean(rd)),
                          f"{key}_range": [float(min(rd)), float(max(rd))],
                          f"{'rank' if key == 'random' else 'contrast_rank'}": rank,
                          f"{'rank_p' if key == 'random' else 'contrast_rank_p'}": rank / (len(rs) + 1),
                          f"vector_minus_{key}": d, f"vector_minus_{key}_ci": d_ci,
                          **({"ci_method": d_rule} if key == "random" or "ci_method" not in entry else {})})
        if fam["contrast"]:
            top = max(fam["contrast"], key=lambda r: abs(r["delta"]))
            entry["contrast_names"] = [r["contrast"] for r in fam["contrast"]]
            entry["strongest_contrast"] = {"name": top["contrast"], "delta": top["delta"]}
            every = [r["delta"] for rs in fam.values() for r in rs]
            entry["rank_all"], entry["n_all"] = _rank(vec["delta"], every), len(every)
            entry["rank_all_p"] = entry["rank_all"] / (len(every) + 1)
        out.append(entry)
    return out


def load_conditions(out: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The plan and, per condition, {records by method, sanity} read through the store."""
    d = Path(out)
    plan_file = d / PLAN_FILE
    if not plan_file.exists():
        raise EvalAwareError(f"{d}: no {PLAN_FILE}; is this a `steer run` output directory?")
    plan = json.loads(plan_file.read_text())
    data = {}
    for c in plan["conditions"]:
        run = d / c["name"]
        if not (run / "store.sqlite").exists():
            continue
        st = RunLog(run, create=False)
        try:
            data[c["name"]] = {**c, "records": {m: st.result_dicts(m) for m in st.methods()},
                               "groups": {x.id: x.metadata.category for x in st.samples()},
                               "sanity": (st.get_meta("steering") or {}).get("sanity")}
        finally:
            st.close()
    return plan, data


def dose_response(out: str | Path, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """{method: [{condition, control, alpha, n, n_scored, n_common, p_eval, p_eval_ci, share_eval,
    share_eval_ci, delta, delta_ci, perplexity}]} plus the plan. P(eval) and its paired delta
    against alpha 0 are over the `n_common` samples scored in every condition of the row's alpha
    (the vector and each random direction) and at alpha 0: what is compared is on the same
    samples, and an alpha at which a control withholds every score compares nothing (its
    n_common is 0) without emptying the other alphas' rows."""
    plan, data = load_conditions(out)
    base = data.get("unsteered_0")
    methods = sorted({m for c in data.values() for m in c["records"]})
    table: dict[str, list[dict[str, Any]]] = {}
    controls: dict[str, list[dict[str, Any]]] = {}
    pending: list[Any] = []
    for m in methods:
        base_scores = {r["sample_id"]: r.get("score") for r in (base or {}).get("records", {}).get(m, [])}
        # compare conditions on the same samples: those scored in every condition (a gate that
        # withholds different samples under different alphas would otherwise move the mean)
        scored = {name: {r["sample_id"] for r in c["records"].get(m, []) if r.get("score") is not None}
                  for name, c in data.items() if c["records"].get(m)}
        common: dict[float, set[str]] = {}
        for a in {c["alpha"] for name, c in data.items() if name in scored}:
            sets = [scored[name] for name, c in data.items() if name in scored and c["alpha"] == a]
            if a != 0 and "unsteered_0" in scored:
                sets.append(scored["unsteered_0"])
            common[a] = set.intersection(*sets)
        rows = []
        for name, c in data.items():
            recs = c["records"].get(m, [])
            if not recs:
                continue
            groups = c["groups"]
            here = common[c["alpha"]]
            p, p_ci, p_rule = _mean_ci([(r["sample_id"], r.get("score")) for r in recs
                                       if r["sample_id"] in here], groups, n_boot, seed, bounds=(0.0, 1.0))
            decided = [(r["sample_id"], float(r["prediction"] == "eval")) for r in recs
                       if r.get("prediction") in ("eval", "deploy")]
            s, s_ci, s_rule = _mean_ci(decided, groups, n_boot, seed, bounds=(0.0, 1.0))
            diffs = [(r["sample_id"], r["score"] - base_scores[r["sample_id"]]) for r in recs
                     if r["sample_id"] in here and base_scores.get(r["sample_id"]) is not None]
            dl, dl_ci, _ = _mean_ci(diffs, groups, n_boot, seed) if c["control"] != "none" else (0.0, None, None)
            rows.append({"condition": name, "control": c["control"], "alpha": c["alpha"],
                         "contrast": c.get("contrast"),
                         "n": len(recs), "n_scored": sum(r.get("score") is not None for r in recs),
                         "n_common": len(here),
                         "p_eval": p, "p_eval_ci": p_ci, "share_eval": s, "share_eval_ci": s_ci,
                         "ci_rules": sorted({x for x in (p_rule, s_rule) if x}),
                         "delta": dl, "delta_ci": dl_ci,
                         "perplexity": (c["sanity"] or {}).get("perplexity")})
        rows.sort(key=lambda r: (r["alpha"], r["control"], r["condition"]))
        table[m] = rows
        scores = {name: {r["sample_id"]: float(r["score"]) for r in c["records"].get(m, [])
                         if r["sample_id"] in common.get(c["alpha"], set())}
                  for name, c in data.items()}
        groups = next(iter(data.values()))["groups"] if data else {}
        n_alphas = len({r["alpha"] for r in rows if r["control"] == "vector"})
        controls[m] = random_control(rows, scores, common, groups, n_alphas, n_boot, seed)
        pending.append((m, rows, scores, {k: v for k, v in base_scores.items() if v is not None}, common, groups))
    return {"plan": plan, "methods": table, "controls": controls,
            "verdicts": _verdicts(pending, plan, n_boot, seed), "rule": RULE}


def _verdicts(pending: Sequence[tuple[str, list[dict[str, Any]], dict[str, dict[str, float]], dict[str, float],
                                      dict[float, set[str]], dict[str, str]]],
              plan: dict[str, Any], n_boot: int, seed: int) -> list[dict[str, Any]]:
    """Every (method, alpha != 0) row with a vector, judged under :mod:`probes.steering.verdicts`'s
    rule at the Bonferroni level over all of them, against the controls the plan holds."""
    planned: dict[float, int] = {}
    for c in plan.get("conditions", []):
        if c["control"] in ("random", "contrast"):
            planned[c["alpha"]] = planned.get(c["alpha"], 0) + 1
    todo = [(m, a, rows, scores, base, common, groups) for m, rows, scores, base, common, groups in pending
            for a in sorted({r["alpha"] for r in rows if r["control"] == "vector" and r["alpha"] != 0})]
    level = family_level(len(todo))
    out = []
    for m, a, rows, scores, base, common, groups in todo:
        vec = next(r for r in rows if r["control"] == "vector" and r["alpha"] == a)
        ctl = [r for r in rows if r["control"] in ("random", "contrast") and r["alpha"] == a and r["delta"] is not None]
        out.append(steer_verdict(m, a, vec, ctl, scores, base, sorted(common.get(a, set())), groups, level,
                                 lambda v, lv, g=groups: _mean_ci(v, g, n_boot, seed, alpha=lv),
                                 planned=planned.get(a, 0)))
    return out


def _shown(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows a table and a figure show: unsteered and vector rows as they are, the random
    directions of one alpha as one row (mean over directions; no interval: their spread is the
    control distribution, in the control table)."""
    out = [r for r in rows if r["control"] not in ("random", "contrast")]
    for ctl, a in sorted({(r["control"], r["alpha"]) for r in rows if r["control"] in ("random", "contrast")}):
        rs = [r for r in rows if r["control"] == ctl and r["alpha"] == a]

        def mean(k: str) -> float | None:
            v = [r[k] for r in rs if r[k] is not None]
            return float(np.mean(v)) if v else None

        out.append({"condition": f"{ctl}_{a:+g}", "control": ctl, "alpha": a,
                    "n_directions": len(rs), "n": rs[0]["n"], "n_scored": min(r["n_scored"] for r in rs),
                    "n_common": rs[0]["n_common"], "p_eval": mean("p_eval"), "p_eval_ci": None,
                    "share_eval": mean("share_eval"), "share_eval_ci": None, "delta": mean("delta"),
                    "delta_ci": None, "perplexity": mean("perplexity")})
    return sorted(out, key=lambda r: (r["alpha"], r["control"]))


def _series(rows: Sequence[dict[str, Any]], key: str) -> dict[str, list[dict[str, Any]]]:
    """Vector, random and contrast curves (a control: the mean over its directions); the
    unsteered point (alpha 0) belongs to each."""
    out: dict[str, list[dict[str, Any]]] = {"vector": [], "random": [], "contrast": []}
    for r in _shown(rows):
        for ctl in ([r["control"]] if r["control"] != "none" else list(out)):
            if ctl in out:
                out[ctl].append({"alpha": r["alpha"], "value": r[key], "ci": r.get(key + "_ci")})
    return {k: v for k, v in out.items() if len(v) > 1}


def _n_random(plan: dict[str, Any]) -> int:
    """Random directions per alpha in the plan (the largest count over alphas)."""
    per: dict[float, int] = {}
    for c in plan["conditions"]:
        if c["control"] == "random":
            per[c["alpha"]] = per.get(c["alpha"], 0) + 1
    return max(per.values(), default=0)


def _contrasts_text(plan: dict[str, Any]) -> str:
    names = sorted({c["contrast"] for c in plan["conditions"] if c.get("contrast")})
    if not names:
        return "no unrelated-contrast controls (a vector built before them, or `--no-contrast-controls`)"
    return (f"unrelated-contrast controls: {len(names)} directions from pairs unrelated to being tested "
            f"({', '.join(names)}), each scaled as the vector is")


def write_steer_report(out: str | Path, report_dir: str | Path | None = None, n_boot: int = 1000,
                       seed: int = 0) -> Path:
    """steering.md + steering.json + one dose-response figure per method in `report_dir`."""
    from harness.reporting.plots import dose_response as plot  # matplotlib (~0.7 s): only when plotting

    res = dose_response(out, n_boot, seed)
    rd = Path(report_dir or Path(out) / "report")
    rd.mkdir(parents=True, exist_ok=True)
    plan = res["plan"]
    doc = Doc()
    doc.h(1, "Steering dose-response")
    doc.p(f"Vector `{plan.get('vector')}` (sha256 {plan['vector_sha256'][:12]}, source "
          f"{plan.get('vector_source')}, pooling {plan.get('pooling')}); layers {plan['layers']}; "
          f"added: alpha x unit direction x mean residual norm at each layer "
          f"({', '.join(f'{l}: {float(v):.1f}' for l, v in plan['norms'].items())}); positions "
          f"{plan['positions']}; random controls: {_n_random(plan)} Gaussian directions per layer "
          f"and alpha (seeds {plan['random_seed']}, {plan['random_seed']} + 1, ...), each of the "
          f"vector's norm; {_contrasts_text(plan)}. {len(plan['samples'])} samples. Intervals: 95% over categories "
          f"(clusters): percentile bootstrap ({n_boot} resamples), or, from fewer than "
          f"{SMALL_SAMPLE_UNITS} categories, the cluster-jackknife t interval (named below). P(eval) and delta (the "
          f"paired change in P(eval) against alpha = 0) are over the samples scored in every "
          f"condition of the row's alpha (the vector and every random direction) and at alpha 0 "
          f"(`common`), so the vector and its controls are compared on the same samples and a gate "
          f"that withholds other samples moves nothing; where a condition of an alpha withholds "
          f"every score, that alpha compares nothing (`–`). `random` rows: the mean over the "
          f"random directions.")
    if res["verdicts"]:
        doc.h(2, "Verdicts")
        doc.p(RULE)
        doc.ul([v["sentence"] for v in res["verdicts"]])
        doc.p("Tally: " + ", ".join(f"{k}: {n}" for k, n in tally(res["verdicts"]).items()) + ".")
    specs = report_specs()
    for m, rows in res["methods"].items():
        doc.h(2, m)
        if not specs(m).readout:
            doc.p(f"Not an awareness readout: its score is {specs(m).score}, so `P(eval)` below reads as "
                  "the behaviour rate and delta as its change; the controls rank the vector on the behaviour.")
        doc.table(["alpha", "control", "n (scored, common)", "P(eval) [95% CI]", "share called eval",
                   "delta P(eval) vs alpha 0", "neutral perplexity"],
                  [[f"{r['alpha']:+g}", r["control"] + (f" (mean of {r['n_directions']})" if "n_directions" in r else ""),
                    f"{r['n']} ({r['n_scored']}, {r['n_common']})",
                    _ci(r["p_eval"], r["p_eval_ci"]), _ci(r["share_eval"], r["share_eval_ci"]),
                    _ci(r["delta"], r["delta_ci"]),
                    "–" if r["perplexity"] is None else f"{r['perplexity']:.2f}"] for r in _shown(rows)])
        ctl = res["controls"].get(m) or []
        with_random = [c for c in ctl if "n_random" in c]
        if with_random:
            doc.p("The vector against its control distribution: its delta ranked among the random "
                  "directions' (rank 1 of N + 1 = more extreme than every random direction; rank p = "
                  "rank / (N + 1), the smallest possible being 1 / (N + 1)), and the paired "
                  "vector − random difference (per sample, minus the random directions' mean) with an "
                  f"interval at the Bonferroni level for the {len(with_random)} alphas tested "
                  f"({100 * with_random[0]['ci_level']:.1f}%; {with_random[0]['ci_method']}).")
            doc.table(["alpha", "vector delta", "random deltas: mean [min, max]", "rank (of N + 1)",
                       "rank p", f"vector − random [{100 * with_random[0]['ci_level']:.1f}% CI]", "n common"],
                      [[f"{c['alpha']:+g}", f"{c['vector_delta']:+.3f}",
                        f"{c['random_mean']:+.3f} [{c['random_range'][0]:+.3f}, {c['random_range'][1]:+.3f}]",
                        f"{c['rank']} of {c['n_random'] + 1}", f"{c['rank_p']:.3f}",
                        _ci(c["vector_minus_random"], c["vector_minus_random_ci"]), c["n_common"]]
                       for c in with_random])
        with_contrasts = [c for c in ctl if "n_contrast" in c]
        if with_contrasts:
            doc.p("The vector against unrelated contrasts (directions from pairs that have nothing to do "
                  "with being tested, each scaled as the vector is): its rank among them by |delta| "
                  "(rank 1 = it moves this more than every contrast), the strongest contrast, its rank "
                  "among every control (random directions and contrasts), and the paired vector − "
                  f"contrasts' mean difference at the same Bonferroni level. With {with_contrasts[0]['n_contrast']} "
                  f"contrasts a rank of 1 alone has rank p 1/{with_contrasts[0]['n_contrast'] + 1}: read it with "
                  "the interval, not as a test.")
            doc.table(["alpha", "vector delta", "contrast deltas: mean [min, max]", "strongest contrast",
                       "rank among contrasts", "rank among all controls", "rank p (all)",
                       f"vector − contrasts [{100 * with_contrasts[0]['ci_level']:.1f}% CI]"],
                      [[f"{c['alpha']:+g}", f"{c['vector_delta']:+.3f}",
                        f"{c['contrast_mean']:+.3f} [{c['contrast_range'][0]:+.3f}, {c['contrast_range'][1]:+.3f}]",
                        f"{c['strongest_contrast']['name']} ({c['strongest_contrast']['delta']:+.3f})",
                        f"{c['contrast_rank']} of {c['n_contrast'] + 1}", f"{c['rank_all']} of {c['n_all'] + 1}",
                        f"{c['rank_all_p']:.3f}", _ci(c["vector_minus_contrast"], c["vector_minus_contrast_ci"])]
                       for c in with_contrasts])
        sanity = {k: [{"alpha": p["alpha"], "value": p["value"]} for p in v]
                  for k, v in _series(rows, "perplexity").items()}
        fig = plot(rd / f"dose_response_{m}.png",
                   [(f"{m}: mean P(eval)", "P(eval)", _series(rows, "p_eval")),
                    (f"{m}: share called eval", "share", _series(rows, "share_eval"))], sanity)
        rules = sorted({x for r in rows for x in r.get("ci_rules", [])})
        doc.fig(fig, f"{m}: P(eval) and share called eval against alpha, steering vector vs "
                     f"random direction of the same norm (95% intervals over categories: "
                     f"{'; '.join(rules) or 'none'}); right: perplexity of a fixed neutral text.")
    for name, text in (("steering.md", doc.markdown()), ("steering.html", doc.html("Steering dose-response")),
                       ("steering.json", json.dumps(res, indent=1, sort_keys=True, default=float))):
        write_output(rd / name, text, "--report-dir")
    return rd
