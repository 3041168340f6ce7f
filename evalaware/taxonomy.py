"""`evalaware taxonomy`: run the motivation method on a prompt set (or reuse a run) and build the
taxonomy of the cues the model cites as evidence of a test. Attached by evalaware/main.py."""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from evalaware.help import SectionedCommand
from harness.core import bounds, errors
from harness.cues.report import JSON_NAME, load_summary
from evalaware.options import (MethodOptions, RunOptions, method_options, progress_option, run_options,
                           verbose_option)
from harness.backends.cache import CachedBackend
from harness.runlog.provenance import base_manifest
from harness.runlog.lock import run_dir_lock
from harness.runlog import RunLog
from harness.run.loop import run_methods
from harness.taxonomy.artifacts import DEFAULT_THRESHOLD
from harness.taxonomy.build import TaxonomyConfig, build_taxonomy
from harness.taxonomy.cluster import ALGORITHMS, K_RULES, PAPER_K_RANGE
from harness.taxonomy.embed import DEFAULT_EMBEDDER
from harness.taxonomy.extract import SCOPES
from harness.taxonomy.naming import Namer
from harness.taxonomy.render import write_outputs

METHOD = "motivation"


@click.command("taxonomy", cls=SectionedCommand)
@run_options(dataset="optional", model_help="Model under test (--dataset); with --run only names clusters.")
@click.option("--run", "run_dir", type=click.Path(file_okay=False),
              help="Reuse the motivation answers stored in this run directory (no new answers).")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Output directory (with --dataset the run goes into OUT/run).")
@click.option("--no-llm-names", is_flag=True, help="Keyword labels instead of asking a model.")
@click.option("--seed", type=bounds.seed(), default=0, show_default=True, help="Clustering (and sampling) seed.")
@click.option("--k", type=click.IntRange(2), help="Number of clusters (default: chosen by --k-rule).")
@click.option("--k-min", type=click.IntRange(2), default=PAPER_K_RANGE[0], show_default=True)
@click.option("--k-max", type=click.IntRange(2), default=PAPER_K_RANGE[1], show_default=True)
@click.option("--k-step", type=click.IntRange(1), default=PAPER_K_RANGE[2], show_default=True)
@click.option("--k-rule", type=click.Choice(K_RULES), default="knee", show_default=True,
              help="knee: farthest below the inertia chord; silhouette: best silhouette.")
@click.option("--categories", "n_categories", type=click.IntRange(1), default=15, show_default=True,
              help="Top-level categories (second-level grouping).")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="kmeans", show_default=True,
              help="Sweep algorithm (from one shared k-means++ seeding).")
@click.option("--restarts", type=click.IntRange(0), default=5, show_default=True,
              help="Extra k-means++ restarts for the final fit at the chosen k.")
@click.option("--threads", type=click.IntRange(1), default=1, show_default=True,
              help="CPU threads for embedding and clustering (1 is fastest on a busy machine).")
@click.option("--artifact-threshold", type=bounds.FiniteFloat(-1, 1), default=None,
              help="Centroid similarity flagging method artifacts (default 0.6).")
@click.option("--scope", type=click.Choice(SCOPES), default="majority", show_default=True,
              help="majority: aware votes of samples predicted eval; votes: every aware vote.")
@click.option("--embedder", default=None, help="Embedding asset or sentence-transformers directory.")
@click.option("--name-tokens", type=bounds.tokens(), default=128, show_default=True, help="Max tokens per name.")
@click.option("--cues", "cues_dir", type=click.Path(file_okay=False),
              help="An `evalaware cues` output directory on the same prompts and model: the report "
                   "links to it and lists its top factors (default: OUT/cues when it holds cues.json).")
@method_options(methods=(METHOD,), batch_help="Samples per committed batch (and per naming batch).")
@progress_option
@verbose_option
def taxonomy(opts: RunOptions, method_opts: MethodOptions, run_dir, out, no_llm_names, seed, k,
             k_min, k_max, k_step, k_rule, n_categories, algorithm, restarts, threads,
             artifact_threshold, scope, embedder, name_tokens, cues_dir, progress) -> None:
    """Build a taxonomy of the prompt features that make a model think "this is a test".

    \b
    Examples:
      evalaware taxonomy --dataset prompts.txt --model smollm2 --backend hf --out runs/tax
      evalaware taxonomy --run runs/qwen3 --judge /models/Qwen3-32B --out runs/qwen3-tax
      evalaware taxonomy --run runs/qwen3 --no-llm-names --k 120 --out runs/qwen3-tax-k120
      evalaware taxonomy --run runs/qwen3 --cues runs/qwen3-cues --out runs/qwen3-tax
    """
    dataset = opts.dataset
    if cues_dir and not (Path(cues_dir) / JSON_NAME).is_file():
        raise click.BadParameter(f"{cues_dir}: no {JSON_NAME} (write one with `evalaware cues --out`)",
                                 param_hint="--cues")
    if bool(dataset) == bool(run_dir):
        raise click.UsageError("give exactly one of --dataset (run the motivation method) or --run "
                               "(reuse a run directory)")
    if dataset and not opts.model:
        raise click.UsageError("--dataset needs --model")
    cfg = TaxonomyConfig(
        k=k, k_min=k_min, k_max=k_max, k_step=k_step, k_rule=k_rule, n_categories=n_categories,
        seed=seed, algorithm=algorithm, restarts=restarts, threads=threads, scope=scope,
        artifact_threshold=DEFAULT_THRESHOLD if artifact_threshold is None else artifact_threshold,
        embedder=embedder or DEFAULT_EMBEDDER)
    prompts = method_opts.prompts()
    # Checked before any engine starts: the inputs, and every backend this command will open.
    samples = opts.samples() if dataset else None
    separate_judge = opts.check_judge(True)
    if dataset or (opts.model and not separate_judge and not no_llm_names):
        opts.check_model()
    template_kwargs = opts.engine.template_kwargs
    out_dir = Path(out)
    run_dir = str(out_dir / "run") if dataset else run_dir
    calls: dict[str, Any] = {}
    with run_dir_lock(out_dir, command="evalaware taxonomy"), \
            run_dir_lock(run_dir, command="evalaware taxonomy", create=bool(dataset)), \
            ExitStack() as backends:
        engine = opts.open_model(backends) if dataset else None
        judge = opts.open_judge(backends) if separate_judge else engine
        if dataset:
            mcfg = method_opts.config(engine.tokenizer, template_kwargs, seed)
            summary = run_methods(samples, [METHOD], engine, run_dir, config=mcfg, prompts=prompts,
                                  template_kwargs=template_kwargs, judge=judge,
                                  batch_size=method_opts.batch_size,
                                  dataset_path=opts.dataset_path, progress=progress)
            calls["motivation"] = summary["_calls"]
        elif opts.model and not judge and not no_llm_names:
            judge = engine = opts.open_model(backends)
        namer = None if no_llm_names else judge
        tax, paths = _build(Path(run_dir), out_dir, cfg, namer, prompts, name_tokens,
                            method_opts.batch_size, template_kwargs, calls, progress, cues_dir)
    _summary(tax, calls, paths)


def cues_link(out_dir: Path, cues_dir: str | None) -> dict[str, Any] | None:
    """The cue-attribution result the taxonomy links to: `cues_dir`, else OUT/cues when it
    holds one; its paths relative to OUT (the report's directory)."""
    d = Path(cues_dir) if cues_dir else out_dir / "cues"
    if not (d / JSON_NAME).is_file():
        return None
    link = load_summary(d)
    for k in ("json", "report"):
        link[k] = os.path.relpath(link[k], out_dir)
    return link


def _build(run_dir: Path, out_dir: Path, cfg: Any, namer_backend: Any, prompts: Any,
           name_tokens: int, batch_size: int, template_kwargs: dict[str, Any],
           calls: dict[str, Any], progress: bool, cues_dir: str | None = None
           ) -> tuple[dict[str, Any], dict[str, Path]]:
    """Taxonomy of the run's motivation records, named through the run's call cache; written."""
    store = RunLog(run_dir, create=False)
    try:
        records = store.result_dicts(METHOD)
        if not records:
            raise errors.EvalAwareError(f"{run_dir}: no {METHOD!r} records (run `evalaware run "
                                        f"--methods {METHOD}` or `evalaware taxonomy --dataset`)")
        cached = CachedBackend(namer_backend, store) if namer_backend is not None else None
        namer = Namer(cached, prompts, max_tokens=name_tokens, batch_size=batch_size,
                      template_kwargs=template_kwargs) if cached else None
        tax = build_taxonomy(records, cfg, namer=namer, store=store, samples=store.samples(),
                             prompts=prompts, progress=progress)
        calls["naming"] = {"model_calls": dict(cached.misses) if cached else {},
                           "cache_hits": dict(cached.hits) if cached else {}}
        tax["manifest"].update(base_manifest(), run_dir=str(run_dir), calls=calls,
                               prompts_sha256=prompts.used)
        link = cues_link(out_dir, cues_dir)
        if link:
            tax["cues"] = link
        paths = write_outputs(tax, out_dir)
        store.add_to_manifest("taxonomies", str(Path(out_dir).resolve()), {
            "created": tax["manifest"]["created"], "git_revision": tax["manifest"]["git_revision"],
            "k": tax["k"], "features": tax["stats"]["features"], "calls": calls,
            "files": sorted(p.name for p in paths.values())})
        return tax, paths
    finally:
        store.close()


def _summary(tax: dict[str, Any], calls: dict[str, Any], paths: dict[str, Path]) -> None:
    """What was built (or, too little to cluster, the plain statement), calls made, files."""
    n_new = sum(sum(c.get("model_calls", {}).values()) for c in calls.values())
    st = tax["stats"]
    if not tax.get("clustered", True):
        click.echo(tax["statement"])
    else:
        click.echo(f"{st['features']} features ({st['distinct_features']} distinct) from "
                   f"{st['samples_with_features']} samples; k = {tax['k']} ({tax['k_source']}); "
                   f"{len(tax['headline'])} headline categories, "
                   f"{sum(c['artifact'] for c in tax['categories'])} flagged as method artifacts")
    click.echo(f"model calls made: {n_new}")
    for p in paths.values():
        click.echo(f"  {p}")
