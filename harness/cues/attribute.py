"""`evalaware cues` without the command line: build the counterfactuals, score originals and
variants with :func:`harness.run.loop.run_methods` (one run directory: every call cached, a
re-run resumes and makes no repeated call), estimate the effects, write the report."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from harness.backends.base import Backend
from harness.core.errors import EvalAwareError
from harness.core.sample import Sample
from harness.cues.effects import factorial_effects, scores_by_id, single_effects
from harness.cues.factors import Factor
from harness.cues.report import examples, write_report
from harness.cues.variants import Plan, build_plan
from harness.methods import MethodConfig
from harness.methods.prompts import PromptLibrary
from harness.run.loop import run_methods
from harness.runlog import RunLog
from harness.runlog.lock import writes_run_dir
from harness.runlog.provenance import base_manifest
from harness.stats.paired import mean_with_ci


def settings(plan: Plan, methods: Sequence[str], n_boot: int, seed: int, model: str,
             dataset: str) -> dict[str, Any]:
    return {"design": plan.design, "turns": plan.turns, "factors": [f.name for f in plan.factors],
            "methods": list(methods), "bootstrap": n_boot, "seed": seed, "model": model,
            "dataset": dataset}


def analyze(plan: Plan, run_dir: str | Path, methods: Sequence[str], n_boot: int = 1000,
            seed: int = 0) -> dict[str, Any]:
    """Effects per method from the records in `run_dir` (no model needed)."""
    store = RunLog(run_dir, create=False)
    try:
        recs = {m: store.result_dicts(m) for m in methods}
    finally:
        store.close()
    res: dict[str, Any] = {"n_samples": len(plan.originals), "n_variants": len(plan.variants),
                           "factors": plan.counts(), "effects": {}, "baseline": {}}
    if plan.design == "factorial":
        res["interactions"] = {}
    for m in methods:
        sc = scores_by_id(recs[m])
        base = [sc.get(s.id) for s in plan.originals]
        ok = [(v, s.metadata.category) for v, s in zip(base, plan.originals) if v is not None]
        res["baseline"][m] = mean_with_ci([v for v, _ in ok], [c for _, c in ok], n_boot, seed)
        if plan.design == "factorial":
            res["effects"][m], res["interactions"][m] = factorial_effects(plan, sc, n_boot, seed)
        else:
            res["effects"][m] = single_effects(plan, sc, n_boot, seed)
    res["examples"] = examples(plan)
    res["refused"] = plan.refused
    return res


@writes_run_dir("out")
def run_cues(samples: Sequence[Sample], factors: Sequence[Factor], methods: Sequence[str],
             backend: Backend, out: str | Path, *, design: str = "single", turns: str = "first",
             config: MethodConfig | None = None, prompts: PromptLibrary | None = None,
             template_kwargs: dict[str, Any] | None = None, judge: Backend | None = None,
             batch_size: int = 16, n_boot: int = 1000, seed: int = 0,
             dataset_path: str | None = None, model_name: str | None = None,
             progress: bool = True) -> dict[str, Any]:
    """Score originals and variants into `out` and write the report there; the result dict
    (what cues.json holds)."""
    plan = build_plan(samples, factors, design, turns)
    if not plan.variants:
        raise EvalAwareError("no factor applies to any sample (every variant was refused); see "
                             "--factors and --turns")
    st = settings(plan, methods, n_boot, seed, model_name or str(backend.identity.get("backend")),
                  dataset_path or "(samples)")
    t0, c0 = time.perf_counter(), time.process_time()
    summary = run_methods(plan.samples, methods, backend, out, config=config, prompts=prompts,
                          template_kwargs=template_kwargs, judge=judge, batch_size=batch_size,
                          dataset_path=dataset_path, progress=progress,
                          extra_manifest={"cues": {k: v for k, v in st.items() if k != "bootstrap"}})
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    res = {"settings": st, **analyze(plan, out, methods, n_boot, seed)}
    calls = summary["_calls"]
    n_pairs = len(plan.variants)
    res["cost"] = {"seconds": round(seconds, 2), "n_pairs": n_pairs,
                   "seconds_per_pair": round(seconds / n_pairs, 3), "cpu_seconds": round(cpu, 2),
                   "cpu_seconds_per_pair": round(cpu / n_pairs, 3),
                   "computed": {m: summary[m]["computed"] for m in methods},
                   "model_calls": sum(calls["model_calls"].values()),
                   "cache_hits": sum(calls["cache_hits"].values()), "calls": calls,
                   "note": "wall-clock (and CPU time of this process, all threads) of scoring originals "
                           "and variants in this invocation, all methods, divided by the number of "
                           "variants (sample-factor pairs); model loading not included"}
    res["manifest"] = base_manifest(dataset_path)
    paths = write_report(res, out)
    with RunLog(out, create=False) as store:
        store.add_to_manifest("cues", "report", {"files": sorted(p.name for p in paths.values()),
                                                 "settings": st, "cost": res["cost"]})
    return res
