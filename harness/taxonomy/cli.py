"""`evalaware taxonomy`: run the motivation method on a prompt set (or reuse a run) and build the
taxonomy of the cues the model cites as evidence of a test. Attached by harness/cli.py."""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from .. import errors
from ..cli_options import label_option, limit_options, read_samples, verbose_option
from .cluster import ALGORITHMS, K_RULES, PAPER_K_RANGE
from .extract import SCOPES

METHOD = "motivation"


def _method_config(seed: int, tokens: dict[str, int | None], constrain: bool = False,
                   tokenizer: Any = None, template_kwargs: dict[str, Any] | None = None) -> Any:
    """MethodConfig with the token limits given, the others from the model's kind
    (:mod:`harness.token_limits`)."""
    from ..methods import MethodConfig
    from ..token_limits import default_token_limits

    return MethodConfig(seed=seed, constrain=constrain,
                        **default_token_limits(tokenizer, template_kwargs, **tokens))


def _run_motivation(samples: list[Any], dataset: str, run_dir: Path, engine: Any, judge: Any,
                    prompts: Any, config: Any, batch_size: int,
                    template_kwargs: dict[str, Any], progress: bool) -> dict[str, Any]:
    from ..datasets import resolve_dataset
    from ..runner import run_methods

    return run_methods(samples, [METHOD], engine, run_dir, config=config,
                       prompts=prompts, template_kwargs=template_kwargs, judge=judge,
                       batch_size=batch_size, dataset_path=resolve_dataset(dataset), progress=progress)


@click.command("taxonomy")
@click.option("--dataset", help="Prompt set to analyse (our JSONL, Needham JSON, .txt, or `demo`).")
@click.option("--run", "run_dir", type=click.Path(file_okay=False),
              help="Reuse the motivation answers stored in this run directory (no new answers).")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Output directory (with --dataset the run goes into OUT/run).")
@click.option("--model", help="Model under test (--dataset); with --run only names clusters.")
@click.option("--backend", type=click.Choice(["vllm", "hf", "openai"]), default="vllm", show_default=True)
@click.option("--judge", "judge_model", help="Judge model (default: the model); also names clusters.")
@click.option("--judge-backend", type=click.Choice(["vllm", "hf", "openai"]), help="Default: --backend.")
@click.option("--judge-base-url", help="Judge server URL (openai backend).")
@click.option("--answer-tokens", type=int, help="Max tokens of the model's answer to a sample.")
@click.option("--probe-tokens", type=int, help="Max tokens of the answer to the motivation question.")
@click.option("--judge-tokens", type=int, help="Max tokens of the judge's verdict.")
@click.option("--constrain", is_flag=True,
              help="Hold the judge's verdicts to their JSON schema (engine-enforced), so a small "
                   "judge writes usable verdicts; recorded in the run's settings.")
@click.option("--no-llm-names", is_flag=True, help="Keyword labels instead of asking a model.")
@click.option("--base-url", help="openai: server URL, e.g. http://127.0.0.1:8000/v1")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True)
@click.option("--tokenizer", help="Tokenizer path if different from the model (required for openai).")
@click.option("--dtype", default="auto", show_default=True)
@click.option("--enable-thinking/--disable-thinking", default=None, help="Chat-template switch (Qwen3).")
@click.option("--seed", type=int, default=0, show_default=True, help="Clustering (and sampling) seed.")
@click.option("--k", type=int, help="Number of clusters (default: chosen by --k-rule).")
@click.option("--k-min", type=int, default=PAPER_K_RANGE[0], show_default=True)
@click.option("--k-max", type=int, default=PAPER_K_RANGE[1], show_default=True)
@click.option("--k-step", type=int, default=PAPER_K_RANGE[2], show_default=True)
@click.option("--k-rule", type=click.Choice(K_RULES), default="knee", show_default=True,
              help="knee: farthest below the inertia chord; silhouette: best silhouette.")
@click.option("--categories", "n_categories", type=int, default=15, show_default=True,
              help="Top-level categories (second-level grouping).")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="kmeans", show_default=True,
              help="Sweep algorithm (from one shared k-means++ seeding).")
@click.option("--restarts", type=int, default=5, show_default=True,
              help="Extra k-means++ restarts for the final fit at the chosen k.")
@click.option("--threads", type=int, default=1, show_default=True,
              help="CPU threads for embedding and clustering (1 is fastest on a busy machine).")
@click.option("--artifact-threshold", type=float, default=None,
              help="Centroid similarity flagging method artifacts (default 0.6).")
@click.option("--scope", type=click.Choice(SCOPES), default="majority", show_default=True,
              help="majority: aware votes of samples predicted eval; votes: every aware vote.")
@click.option("--embedder", default=None, help="Embedding asset or sentence-transformers directory.")
@click.option("--prompts", "prompts_dir", type=click.Path(file_okay=False), help="Prompt override directory.")
@click.option("--name-tokens", type=int, default=128, show_default=True, help="Max tokens per name.")
@click.option("--batch-size", type=int, default=16, show_default=True)
@click.option("--no-progress", is_flag=True)
@label_option
@limit_options
@verbose_option
def taxonomy(dataset, run_dir, out, model, backend, judge_model, judge_backend, judge_base_url,
             answer_tokens, probe_tokens, judge_tokens, constrain, no_llm_names, label, label_field, subset, base_url,
             api_key_env,
             tokenizer, dtype, enable_thinking, seed, k, k_min, k_max, k_step, k_rule,
             n_categories, algorithm, restarts, threads, artifact_threshold, scope, embedder,
             prompts_dir, name_tokens, batch_size, no_progress) -> None:
    """Build a taxonomy of the prompt features that make a model think "this is a test".

    \b
    Examples:
      evalaware taxonomy --dataset prompts.txt --model smollm2 --backend hf --out runs/tax
      evalaware taxonomy --run runs/qwen3 --judge /models/Qwen3-32B --out runs/qwen3-tax
      evalaware taxonomy --run runs/qwen3 --no-llm-names --k 120 --out runs/qwen3-tax-k120
    """
    from ..prompts import PromptLibrary
    from ..run_lock import run_dir_lock
    from ..runner import check_backend, open_backend
    from .artifacts import DEFAULT_THRESHOLD
    from .build import TaxonomyConfig
    from .embed import DEFAULT_EMBEDDER

    if bool(dataset) == bool(run_dir):
        raise click.UsageError("give exactly one of --dataset (run the motivation method) or --run "
                               "(reuse a run directory)")
    if dataset and not model:
        raise click.UsageError("--dataset needs --model")
    cfg = TaxonomyConfig(
        k=k, k_min=k_min, k_max=k_max, k_step=k_step, k_rule=k_rule, n_categories=n_categories,
        seed=seed, algorithm=algorithm, restarts=restarts, threads=threads, scope=scope,
        artifact_threshold=DEFAULT_THRESHOLD if artifact_threshold is None else artifact_threshold,
        embedder=embedder or DEFAULT_EMBEDDER)
    prompts = PromptLibrary(prompts_dir)
    api_key = os.environ.get(api_key_env)
    opts = dict(dtype=dtype, tokenizer=tokenizer, base_url=base_url,
                api_key=api_key if backend == "openai" else None)
    judge_opts = dict(base_url=judge_base_url, api_key=api_key, dtype=dtype)
    separate_judge = bool(judge_model) and (judge_model != model or (judge_backend or backend) != backend)
    # Checked before any engine starts: the inputs, and every backend this command will open.
    samples = subset(read_samples(dataset, label, label_field)) if dataset else None
    if dataset or (model and not separate_judge and not no_llm_names):
        check_backend(backend, model, opts)
    if separate_judge:
        check_backend(judge_backend or backend, judge_model, judge_opts,
                      flags={"base_url": "--judge-base-url"})
    template_kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    out_dir = Path(out)
    run_dir = str(out_dir / "run") if dataset else run_dir
    calls: dict[str, Any] = {}
    with run_dir_lock(out_dir, command="evalaware taxonomy"), \
            run_dir_lock(run_dir, command="evalaware taxonomy", create=bool(dataset)), \
            ExitStack() as backends:
        engine = judge = None
        if dataset:
            engine = backends.enter_context(open_backend(backend, model, **opts))
        if separate_judge:
            judge = backends.enter_context(open_backend(judge_backend or backend, judge_model,
                                                        role="judge", **judge_opts))
        judge = judge or engine
        if dataset:
            mcfg = _method_config(seed, {"answer_tokens": answer_tokens, "probe_tokens": probe_tokens,
                                         "judge_tokens": judge_tokens}, constrain,
                                  engine.tokenizer, template_kwargs)
            summary = _run_motivation(samples, dataset, Path(run_dir), engine, judge, prompts, mcfg,
                                      batch_size, template_kwargs, not no_progress)
            calls["motivation"] = summary["_calls"]
        elif model and not judge and not no_llm_names:
            judge = engine = backends.enter_context(open_backend(backend, model, **opts))
        namer = None if no_llm_names else judge
        tax, paths = _build(Path(run_dir), out_dir, cfg, namer, prompts, name_tokens, batch_size,
                            template_kwargs, calls, not no_progress)
    _summary(tax, calls, paths)


def _build(run_dir: Path, out_dir: Path, cfg: Any, namer_backend: Any, prompts: Any,
           name_tokens: int, batch_size: int, template_kwargs: dict[str, Any],
           calls: dict[str, Any], progress: bool) -> tuple[dict[str, Any], dict[str, Path]]:
    """Taxonomy of the run's motivation records, named through the run's call cache; written."""
    from ..cache import CachedBackend
    from ..manifest import base_manifest
    from ..runlog import RunLog
    from .build import build_taxonomy
    from .naming import Namer
    from .render import write_outputs

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
