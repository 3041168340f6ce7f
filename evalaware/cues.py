"""`evalaware cues`: switch prompt factors on and off and measure how each moves the methods'
P(eval) (causal cue attribution; harness/cues). Attached by evalaware/main.py."""

from __future__ import annotations

from contextlib import ExitStack

import click

from evalaware.help import SectionedCommand
from evalaware.options import (MethodOptions, RunOptions, method_options, methods_option, progress_option,
                                 run_options, verbose_option)
from harness.backends.registry import default_backend
from harness.core import bounds
from harness.core.console import visible
from harness.core.errors import EvalAwareError
from harness.cues import attribute
from harness.cues.attribute import run_cues
from harness.cues.neutralized import verdict as neutral_verdict
from harness.cues.factors import FACTORS, TURNS, FactorFileError, resolve_factors
from harness.cues.variants import DESIGNS, MAX_FACTORIAL, build_plan
from harness.run.loop import needs_judge
from harness.runlog.lock import run_dir_lock
from harness.runlog.outputs import check_output


@click.command("cues", cls=SectionedCommand)
@run_options(model_required=True)
@methods_option("logprob_question", "The methods whose score (P(eval)) is compared.")
@click.option("--factors", "factors", default="all", show_default=True,
              help=f"all, or comma-separated factors ({', '.join(FACTORS)}), and/or FILE.py files "
                   f"defining FACTORS (user factors). Each FILE.py is imported, i.e. run as Python "
                   f"code with your rights, when the command starts (never for --help): use only "
                   f"files you trust.")
@click.option("--design", type=click.Choice(DESIGNS), default="single", show_default=True,
              help=f"single: one factor switched per variant; factorial: every on/off cell of "
                   f"<= {MAX_FACTORIAL} factors (interactions); neutralize: every sample with all "
                   f"its factors removed (its format-neutralized twin), and each readout's AUROC "
                   f"on the originals vs the twin.")
@click.option("--probe", "probe_dir", type=click.Path(exists=True, file_okay=False),
              help="A saved probe (`probes train`) as one more readout, frozen: its layer is "
                   "captured for every original and variant and its P(eval) compared like a "
                   "method's (samples it was trained on are left out).")
@click.option("--write-neutralized", "write_neutralized", type=click.Path(dir_okay=False),
              help="With --design neutralize: write the twin as a dataset (JSONL): the neutralized "
                   "prompts, what was removed or kept and why, and each readout's P(eval) before "
                   "and after, per sample.")
@click.option("--turns", type=click.Choice(TURNS), default="first", show_default=True,
              help="Which user turn(s) the factors read and edit.")
@click.option("--bootstrap", type=bounds.resamples(), default=1000, show_default=True,
              help="Resamples of each interval (categories, then pairs within them).")
@click.option("--seed", type=bounds.seed(), default=0, show_default=True)
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Run directory: originals and variants, cues.json, cues.md/.html, forest plots.")
@click.option("--report-only", is_flag=True,
              help="Write the report from the records already in OUT; no model is opened (pairs not "
                   "yet scored count as unscored).")
@method_options()
@progress_option
@verbose_option
def cues(opts: RunOptions, method_opts: MethodOptions, methods: list[str], factors: str, design: str,
         probe_dir: str | None, write_neutralized: str | None, turns: str, bootstrap: int, seed: int,
         out: str, report_only: bool, progress: bool) -> None:
    """Which prompt features make the model say "test": switch each factor on (where absent) or
    off (where present), score original and variant, and estimate each factor's paired effect on
    P(eval) with intervals (resumable; every variant is a sample of the run directory).

    \b
    Examples:
      evalaware cues --model smollm2 --backend hf --dataset demo --methods logprob_question --out runs/cues
      evalaware cues --model smollm2 --backend hf --dataset demo --factors grading,lettered_options \\
          --design factorial --out runs/cues-fact
      evalaware cues --model smollm2 --dataset logs/ --factors all,my_factors.py --out runs/cues-inspect
      evalaware cues --model smollm2 --backend hf --dataset demo --methods logprob_question,monitor \
          --probe probes/smollm2 --design neutralize --write-neutralized demo-neutral.jsonl --out runs/neutral
    """
    method_list = methods
    try:  # here, after parsing: a factor file runs only when the command does
        factor_list = resolve_factors(factors)
    except FactorFileError:
        raise  # the file's own failure: one line naming it
    except EvalAwareError as e:
        raise click.BadParameter(str(e), param_hint="--factors") from None
    if write_neutralized and design != "neutralize":
        raise click.UsageError("--write-neutralized needs --design neutralize")
    if write_neutralized:  # before any work: never over the run's files or an input
        check_output(write_neutralized, "--write-neutralized", runs=[out], inputs=[
            opts.dataset_path, *([p for p in factors.split(",") if p.strip().endswith(".py")]),
            probe_dir])
    def readouts(engine=None) -> list:  # type: ignore[no-untyped-def]
        if not probe_dir:
            return []
        from harness.organisms.reach import check_reaches, organism_card
        from probes.io import load_probe
        from probes.readout import ProbeReadout  # scikit-learn, safetensors: only when asked

        card = organism_card(opts.model)
        if card is not None:  # a frozen probe below the organism's trained blocks reads the base's activations
            check_reaches(load_probe(probe_dir).layer, {str(opts.model): (card, str(opts.model))},
                          f"--probe {probe_dir}")
        # the probe captures on the hidden-states default unless the engine itself has them: its settings
        capture_on = opts.engine.backend_opts(default_backend(("hidden_states",)))
        return [ProbeReadout(probe_dir, opts.model, engine, capture_on, progress=progress)]

    if report_only:
        res = attribute.report_only(opts.samples(), factor_list, method_list, out, design=design, turns=turns,
                                    n_boot=bootstrap, seed=seed, dataset_path=opts.dataset_path or opts.dataset,
                                    model_name=opts.model or "", readouts=readouts(),
                                    write_neutralized=write_neutralized)
        for line in summary_lines(res):
            click.echo(line)
        return
    opts.check_model()
    opts.check_judge(needs_judge(method_list))  # refuse a bad judge before any engine starts
    samples = opts.samples()
    build_plan(samples, factor_list, design, turns)  # a factor whose code fails: before the model loads
    readouts()  # a bad probe file: before the model loads
    prompts = method_opts.prompts()
    template_kwargs = opts.engine.template_kwargs
    with run_dir_lock(out, command="evalaware cues"), ExitStack() as backends:
        engine = opts.open_model(backends)
        judge = opts.judge_for(backends, engine, method_list)
        config = method_opts.config(engine.tokenizer, template_kwargs, seed)
        res = run_cues(samples, factor_list, method_list, engine, out, design=design, turns=turns,
                       config=config, prompts=prompts, template_kwargs=template_kwargs, judge=judge,
                       batch_size=method_opts.batch_size, n_boot=bootstrap, seed=seed,
                       dataset_path=opts.dataset_path or opts.dataset, model_name=opts.model,
                       progress=progress, readouts=readouts(engine), write_neutralized=write_neutralized)
    for line in summary_lines(res):
        click.echo(line)
    click.echo(visible(f"report: {out}/cues.md, {out}/cues.html, {out}/cues.json"))


def summary_lines(res: dict) -> list[str]:
    c = res.get("cost") or {}
    out = [f"{res['n_samples']} samples, {res['n_variants']} variants" + (" (report only)" if res.get("partial") else "")]
    if c.get("invocations"):
        last = c["invocations"][-1]
        per = "-" if c["seconds_per_pair"] is None else f"{c['seconds_per_pair']:.2f} s ({c['cpu_seconds_per_pair']:.2f} s CPU)"
        out[0] += (f"; {'last scoring' if res.get('partial') else 'this'} invocation: {last['model_calls']} model calls, {last['cache_hits']} cache hits, "
                   f"{last['seconds']:.1f} s; per sample-factor pair: {per}")
    for m, r in (res.get("readouts") or {}).items():
        out.append(f"{m}: {r['scored']} samples scored ({r['excluded_train_overlap']} left out: the probe "
                   f"was trained on their originals)")
    for m, n in (res.get("neutralized") or {}).items():
        out.append(neutral_verdict(m, n))
    if res.get("written"):
        out.append(f"wrote {res['written']['lines']} neutralized samples to {res['written']['path']}")
    for m, rows in res["effects"].items():
        out.append(f"{m}:")
        for r in rows:
            lo = r.get("logit") or {}
            out.append(f"  {r['rank']:>2}. {r['factor']:<24} log-odds {_eff(lo.get('mean'), lo.get('ci'))}"
                       f"  score {_eff(r['mean'], r['ci'])}  n={r['n']}")
    return out


def _eff(mean: float | None, ci: list[float] | None) -> str:
    iv = f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "[-]"
    return ("-" if mean is None else f"{mean:+.3f}") + " " + iv
