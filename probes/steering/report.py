"""`evalaware steer report`: dose-response of every method against alpha, vector vs random.

Per method and condition: mean P(eval) (record ``score``) and the share of decided samples
called eval, each with a 95% bootstrap interval that resamples whole categories (samples of one
category are not independent; the cluster bootstrap of :mod:`harness.stats.metrics`), and the
paired change in P(eval) against the unsteered condition on the same samples (with its interval:
the comparison that matters, since between-sample spread dwarfs a steering effect). The sanity
column is the perplexity of a fixed neutral text under the same condition.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.core.errors import EvalAwareError
from harness.stats.metrics import bootstrap_weighted, weighted_mean_rows
from harness.reporting.report import Doc, ci as _ci
from harness.runlog import RunLog

from probes.steering.run import PLAN_FILE


def _mean_ci(values: Sequence[tuple[str, float | None]], groups: dict[str, str], n_boot: int,
             seed: int) -> tuple[float | None, Any]:
    """Mean of the (sample id, value) pairs with a 95% cluster-bootstrap interval (whole
    categories resampled: :func:`harness.stats.metrics.bootstrap_weighted` with `groups`); no interval
    from a single category."""
    pairs = [(sid, float(v)) for sid, v in values if v is not None]
    if not pairs:
        return None, None
    v = np.array([x for _, x in pairs])
    g = [groups.get(sid, sid) for sid, _ in pairs]
    ci = bootstrap_weighted(lambda W: weighted_mean_rows(W, v), len(v), n=n_boot, seed=seed, groups=g) \
        if len(set(g)) > 1 else None
    return float(v.mean()), ci


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
    against alpha 0 are over the `n_common` samples scored in every condition."""
    plan, data = load_conditions(out)
    base = data.get("unsteered_0")
    methods = sorted({m for c in data.values() for m in c["records"]})
    table: dict[str, list[dict[str, Any]]] = {}
    for m in methods:
        base_scores = {r["sample_id"]: r.get("score") for r in (base or {}).get("records", {}).get(m, [])}
        # compare conditions on the same samples: those scored in every condition (a gate that
        # withholds different samples under different alphas would otherwise move the mean)
        scored = [{r["sample_id"] for r in c["records"].get(m, []) if r.get("score") is not None}
                  for c in data.values() if c["records"].get(m)]
        common = set.intersection(*scored) if scored else set()
        rows = []
        for name, c in data.items():
            recs = c["records"].get(m, [])
            if not recs:
                continue
            groups = c["groups"]
            p, p_ci = _mean_ci([(r["sample_id"], r.get("score")) for r in recs
                                if r["sample_id"] in common], groups, n_boot, seed)
            decided = [(r["sample_id"], float(r["prediction"] == "eval")) for r in recs
                       if r.get("prediction") in ("eval", "deploy")]
            s, s_ci = _mean_ci(decided, groups, n_boot, seed)
            diffs = [(r["sample_id"], r["score"] - base_scores[r["sample_id"]]) for r in recs
                     if r["sample_id"] in common and base_scores.get(r["sample_id"]) is not None]
            dl, dl_ci = _mean_ci(diffs, groups, n_boot, seed) if c["control"] != "none" else (0.0, None)
            rows.append({"condition": name, "control": c["control"], "alpha": c["alpha"],
                         "n": len(recs), "n_scored": sum(r.get("score") is not None for r in recs),
                         "n_common": len(common),
                         "p_eval": p, "p_eval_ci": p_ci, "share_eval": s, "share_eval_ci": s_ci,
                         "delta": dl, "delta_ci": dl_ci,
                         "perplexity": (c["sanity"] or {}).get("perplexity")})
        rows.sort(key=lambda r: (r["alpha"], r["control"]))
        table[m] = rows
    return {"plan": plan, "methods": table}


def _series(rows: Sequence[dict[str, Any]], key: str) -> dict[str, list[dict[str, Any]]]:
    """Vector and random curves; the unsteered point (alpha 0) belongs to both."""
    out: dict[str, list[dict[str, Any]]] = {"vector": [], "random": []}
    for r in rows:
        for ctl in ([r["control"]] if r["control"] != "none" else ["vector", "random"]):
            if ctl in out:
                out[ctl].append({"alpha": r["alpha"], "value": r[key], "ci": r.get(key + "_ci")})
    return {k: v for k, v in out.items() if len(v) > 1}


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
          f"{plan['positions']}; random control: Gaussian direction per layer, seed "
          f"{plan['random_seed']}, same norm. {len(plan['samples'])} samples. Intervals: 95% "
          f"bootstrap over categories (clusters; {n_boot} resamples). P(eval) and delta (the paired "
          f"change in P(eval) against alpha = 0) are over the samples scored in every condition "
          f"(`common`), so a gate that withholds other samples under other alphas moves neither.")
    for m, rows in res["methods"].items():
        doc.h(2, m)
        doc.table(["alpha", "control", "n (scored, common)", "P(eval) [95% CI]", "share called eval",
                   "delta P(eval) vs alpha 0", "neutral perplexity"],
                  [[f"{r['alpha']:+g}", r["control"], f"{r['n']} ({r['n_scored']}, {r['n_common']})",
                    _ci(r["p_eval"], r["p_eval_ci"]), _ci(r["share_eval"], r["share_eval_ci"]),
                    _ci(r["delta"], r["delta_ci"]),
                    "–" if r["perplexity"] is None else f"{r['perplexity']:.2f}"] for r in rows])
        sanity = {k: [{"alpha": p["alpha"], "value": p["value"]} for p in v]
                  for k, v in _series(rows, "perplexity").items()}
        fig = plot(rd / f"dose_response_{m}.png",
                   [(f"{m}: mean P(eval)", "P(eval)", _series(rows, "p_eval")),
                    (f"{m}: share called eval", "share", _series(rows, "share_eval"))], sanity)
        doc.fig(fig, f"{m}: P(eval) and share called eval against alpha, steering vector vs "
                     f"random direction of the same norm (95% category-bootstrap CIs); right: perplexity "
                     f"of a fixed neutral text.")
    (rd / "steering.md").write_text(doc.markdown())
    (rd / "steering.html").write_text(doc.html("Steering dose-response"))
    (rd / "steering.json").write_text(json.dumps(res, indent=1, sort_keys=True, default=float))
    return rd
