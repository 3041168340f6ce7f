"""`evalaware cues` without the command line: build the counterfactuals, score originals and
variants with :func:`harness.run.loop.run_methods` (one run directory: every call cached, a
re-run resumes and makes no repeated call), estimate the effects, write the report."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Protocol, Sequence

from harness.backends.base import Backend
from harness.core.errors import EvalAwareError
from harness.core.sample import Sample
from harness.cues import neutralized, scale
from harness.cues.effects import factorial_effects, log_odds_by_id, scores_by_id, single_effects, with_log_odds
from harness.cues.factors import Factor
from harness.cues.report import JSON_NAME, examples, write_report
from harness.cues.variants import Plan, build_plan
from harness.methods import MethodConfig
from harness.methods.prompts import PromptLibrary
from harness.run.loop import run_methods
from harness.runlog import RunLog
from harness.runlog.lock import writes_run_dir
from harness.runlog.provenance import base_manifest
from harness.stats.paired import mean_with_ci


class Readout(Protocol):
    """A readout scored outside the methods (a frozen probe: :mod:`probes.readout`): after the
    methods have scored every original and variant into the run directory, it writes records
    of method `name` there for the same samples."""

    name: str
    settings: dict[str, Any]

    def score(self, run_dir: Path) -> dict[str, Any]:
        """Write the records; what it did (recorded in cues.json)."""
        ...


def settings(plan: Plan, methods: Sequence[str], n_boot: int, seed: int, model: str,
             dataset: str, readouts: Sequence[Readout] = ()) -> dict[str, Any]:
    return {"design": plan.design, "turns": plan.turns, "factors": [f.name for f in plan.factors],
            "methods": list(methods), "bootstrap": n_boot, "seed": seed, "model": model,
            "dataset": dataset, "readouts": {r.name: r.settings for r in readouts}}


def analyze(plan: Plan, run_dir: str | Path, methods: Sequence[str], n_boot: int = 1000,
            seed: int = 0) -> dict[str, Any]:
    """Effects per method from the records in `run_dir` (no model needed)."""
    store = RunLog(run_dir, create=False)
    try:
        recs = {m: store.result_dicts(m) for m in methods}
    finally:
        store.close()
    res: dict[str, Any] = {"n_samples": len(plan.originals), "n_variants": len(plan.variants),
                           "factors": plan.counts(), "effects": {}, "baseline": {}, "scales": {}}
    if plan.design == "factorial":
        res["interactions"] = {}
    if plan.design == "neutralize":
        res["neutralized"] = {}
    sp = scale.specs()
    for m in methods:
        sc = scores_by_id(recs[m])
        lo, clipped = log_odds_by_id(recs[m], sp(m))
        res["scales"][m] = scale.describe(sp(m))
        base = [sc.get(s.id) for s in plan.originals]
        ok = [(v, s.metadata.category) for v, s in zip(base, plan.originals) if v is not None]
        res["baseline"][m] = mean_with_ci([v for v, _ in ok], [c for _, c in ok], n_boot, seed)
        if plan.design == "neutralize":
            res["neutralized"][m] = neutralized.readout(plan, sc, lo, n_boot, seed)
        elif plan.design == "factorial":
            (e, i), (le, li) = factorial_effects(plan, sc, n_boot, seed), factorial_effects(plan, lo, n_boot, seed)
            n_clip = sum(1 for s in plan.originals if s.id in clipped or any(
                v.id in clipped for v in plan.variants if v.metadata.extra["pair"] == s.id))
            res["effects"][m] = with_log_odds(e, le, {r["factor"]: n_clip for r in e})
            res["interactions"][m] = with_log_odds(i, li, {r["factor"]: n_clip for r in i})
        else:
            n_clip: dict[str, int] = {}
            for v in plan.variants:
                if v.id in clipped or v.metadata.extra["pair"] in clipped:
                    f = str(v.metadata.extra["factor"])
                    n_clip[f] = n_clip.get(f, 0) + 1
            res["effects"][m] = with_log_odds(single_effects(plan, sc, n_boot, seed),
                                              single_effects(plan, lo, n_boot, seed), n_clip)
    if plan.design == "neutralize":
        shared = [{r["sample"] for r in n["per_sample"]} for n in res["neutralized"].values()]
        res["surface"] = neutralized.surface(plan, set.intersection(*shared) if shared else None, n_boot, seed)
        res["kept_by_label"] = neutralized.kept_by_label(plan)
    res["examples"] = examples(plan)
    res["refused"] = plan.refused
    return res


def _previous_cost(out: Path, st: dict[str, Any]) -> list[dict[str, Any]]:
    """The invocations a cues.json already in `out` (same settings) recorded."""
    p = out / JSON_NAME
    try:
        old = json.loads(p.read_text())
    except (OSError, ValueError):
        return []
    return list(old.get("cost", {}).get("invocations", [])) if old.get("settings") == st else []


def cost(summary: dict[str, Any], seconds: float, cpu: float, methods: Sequence[str], n_samples: int,
         n_pairs: int, previous: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """What scoring cost, over this and earlier invocations on the same directory: wall-clock and
    CPU seconds (this process, all threads; model loading excluded) of the invocations that scored
    something, samples scored (the most of any method), their rate, and the cost per sample-factor pair of a whole run at that rate
    (per scored sample x samples / variants: every pair needs its variant, the originals are
    shared among the factors)."""
    calls = summary["_calls"]
    inv = list(previous) + [{"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
                             "scored": max((summary[m]["computed"] for m in methods), default=0),
                             "model_calls": sum(calls["model_calls"].values()),
                             "cache_hits": sum(calls["cache_hits"].values())}]
    tot = {k: sum(i[k] for i in inv) for k in ("seconds", "cpu_seconds", "scored", "model_calls", "cache_hits")}
    for k in ("seconds", "cpu_seconds"):  # the rate: invocations that scored something
        tot[k] = sum(i[k] for i in inv if i["scored"])
    per = {k: (tot[k] / tot["scored"] if tot["scored"] else None) for k in ("seconds", "cpu_seconds")}
    scale = n_samples / n_pairs if n_pairs else 0.0
    return {**{k: round(v, 2) for k, v in tot.items()}, "n_pairs": n_pairs, "n_samples": n_samples,
            "seconds_per_scored_sample": None if per["seconds"] is None else round(per["seconds"], 3),
            "cpu_seconds_per_scored_sample": None if per["cpu_seconds"] is None else round(per["cpu_seconds"], 3),
            "seconds_per_pair": None if per["seconds"] is None else round(per["seconds"] * scale, 3),
            "cpu_seconds_per_pair": None if per["cpu_seconds"] is None else round(per["cpu_seconds"] * scale, 3),
            "invocations": inv, "calls": calls,
            "note": "all methods together; per pair = per scored sample x samples / variants"}


@writes_run_dir("out")
def run_cues(samples: Sequence[Sample], factors: Sequence[Factor], methods: Sequence[str],
             backend: Backend, out: str | Path, *, design: str = "single", turns: str = "first",
             config: MethodConfig | None = None, prompts: PromptLibrary | None = None,
             template_kwargs: dict[str, Any] | None = None, judge: Backend | None = None,
             batch_size: int = 16, n_boot: int = 1000, seed: int = 0,
             dataset_path: str | None = None, model_name: str | None = None,
             progress: bool = True, readouts: Sequence[Readout] = (),
             write_neutralized: str | Path | None = None) -> dict[str, Any]:
    """Score originals and variants into `out` with the methods and then the `readouts`, and
    write the report there (and, for the neutralize design, the twin as a dataset to
    `write_neutralized`); the result dict (what cues.json holds)."""
    plan = build_plan(samples, factors, design, turns)
    if not plan.variants:
        raise EvalAwareError("no factor applies to any sample (every variant was refused); see "
                             "--factors and --turns")
    st = settings(plan, methods, n_boot, seed, model_name or str(backend.identity.get("backend")),
                  dataset_path or "(samples)", readouts)
    t0, c0 = time.perf_counter(), time.process_time()
    summary = run_methods(plan.samples, methods, backend, out, config=config, prompts=prompts,
                          template_kwargs=template_kwargs, judge=judge, batch_size=batch_size,
                          dataset_path=dataset_path, progress=progress,
                          extra_manifest={"cues": {k: v for k, v in st.items() if k != "bootstrap"}})
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    done = {r.name: r.score(Path(out)) for r in readouts}
    res = {"settings": st, **analyze(plan, out, [*methods, *(r.name for r in readouts)], n_boot, seed)}
    res["readouts"] = done
    res["cost"] = cost(summary, seconds, cpu, methods, len(plan.samples), len(plan.variants),
                       _previous_cost(Path(out), st))
    res["manifest"] = base_manifest(dataset_path)
    paths = write_report(res, out)
    if write_neutralized is not None and plan.design == "neutralize":
        res["written"] = {"path": str(write_neutralized), "lines": neutralized.write_neutralized(
            write_neutralized, plan, res, out, inputs=[dataset_path])}
    with RunLog(out, create=False) as store:
        store.add_to_manifest("cues", "report", {"files": sorted(p.name for p in paths.values()),
                                                 "settings": st, "cost": res["cost"]})
    return res


def report_only(samples: Sequence[Sample], factors: Sequence[Factor], methods: Sequence[str],
                out: str | Path, *, design: str = "single", turns: str = "first", n_boot: int = 1000,
                seed: int = 0, dataset_path: str | None = None, model_name: str = "",
                readouts: Sequence[Readout] = (), write_neutralized: str | Path | None = None) -> dict[str, Any]:
    """The report from the records already in `out`, without a model and without the writer's
    lock (a run still going or interrupted: a pair whose sides are not both scored yet counts as
    unscored; the run, when it finishes, writes its own report); cost as recorded before."""
    plan = build_plan(samples, factors, design, turns)
    st = settings(plan, methods, n_boot, seed, model_name, dataset_path or "(samples)", readouts)
    res = {"settings": st, **analyze(plan, out, [*methods, *(r.name for r in readouts)], n_boot, seed),
           "partial": True}
    prev = _previous_cost(Path(out), st)
    if prev:
        res["cost"] = json.loads((Path(out) / JSON_NAME).read_text())["cost"]
    res["manifest"] = base_manifest(dataset_path)
    write_report(res, out)
    if write_neutralized is not None and plan.design == "neutralize":
        res["written"] = {"path": str(write_neutralized), "lines": neutralized.write_neutralized(
            write_neutralized, plan, res, out, inputs=[dataset_path])}
    return res
