"""`evalaware intervene`: awareness vs placebo sentences inserted into a run's outputs."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import click

from evalaware.help import SectionedCommand
from harness.backends.recorded import engine_args_for
from harness.backends.registry import default_backend
from evalaware.options import RunOptions, methods_option, progress_option, run_options, verbose_option
from harness.core import bounds
from harness.core.errors import EvalAwareError
from harness.methods.sentences import load_pairs
from harness.intervene.conditions import POINTS, TRACES, intervene, summary_table
from harness.run.loop import needs_judge
from harness.runlog import RunLog
from harness.runlog.lock import run_dir_lock



def _rerun(method: str) -> bool:
    """Whether `intervene` re-runs `method` on each condition (judged methods and the monitor: no)."""
    return not needs_judge([method]) and method != "monitor"


@click.command("intervene", cls=SectionedCommand)
@click.option("--run", "run_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="Run directory whose logged outputs (answers, or elicited reasoning) to intervene in.")
@click.option("--insert", type=click.Choice(["awareness", "placebo", "both"]), default="both",
              show_default=True, help="What to insert (the no-insertion control always runs).")
@click.option("--at", "at", type=click.Choice(list(POINTS)), default="end", show_default=True,
              help="Where: the output's start, the sentence boundary nearest its middle, or its end "
                   "(before </think> in a reasoning trace).")
@click.option("--pair", type=click.IntRange(0), default=0, show_default=True,
              help="Which sentence pair (line of the sentence file, from 0).")
@click.option("--trace", type=click.Choice(list(TRACES)), default="auto", show_default=True,
              help="auto: the reasoning method's elicited trace where the run has one, else the answer.")
@methods_option("auto", "Graded methods re-run on each condition's answer (auto: the run's binary, "
                "probability, logprob_question, logprob; none: only the monitor and the "
                "changed-answer rate; judged methods and the monitor are not re-run).",
                keywords={"auto": None, "none": []}, among=lambda c: _rerun(c.name))
@click.option("--monitor-sentences", type=click.Path(exists=True, dir_okay=False),
              help="Sentence-pair file (default: the built-in monitor pairs).")
@run_options(dataset=None, judge=False, backend_default="the run's (its manifest's model identity)",
             model_help="Default: the run's model.")
@click.option("--batch-size", type=bounds.batch(), default=16, show_default=True)
@click.option("--bootstrap", type=bounds.resamples(), default=1000, show_default=True)
@click.option("--seed", type=bounds.seed(), default=0, show_default=True)
@progress_option
@verbose_option
def intervene_cmd(run_dir, insert, at, pair, trace, methods, monitor_sentences, opts: RunOptions,
                  batch_size, bootstrap, seed, progress) -> None:
    """Insert an awareness sentence or its placebo twin into each output of RUN, let the model
    continue, and compare awareness vs placebo vs no insertion, paired by sample.

    Writes RUN/intervene/<at>_pair<k>/{none,awareness,placebo}/ (ordinary, cached, resumable run
    directories), intervene.json and summary.json there; prints the table.

    \b
    Examples:
      evalaware intervene --run runs/demo --insert both --at end
      evalaware intervene --run runs/demo --at middle --methods logprob_question --backend vllm
    """
    pairs = load_pairs(monitor_sentences)
    if not pair < len(pairs):
        raise EvalAwareError(f"--pair {pair}: the sentence file has pairs 0..{len(pairs) - 1}")
    method_list = methods  # None: auto
    if method_list and not all(map(_rerun, method_list)):
        raise EvalAwareError("--methods: judged methods and the monitor are not re-run here "
                             "(the monitor is read along each continuation anyway)")
    st = RunLog(run_dir, create=False)
    man = st.get_meta("manifest", {}) or {}
    identity = st.get_meta("model_identity")
    st.close()
    opts = replace(opts, backend=opts.backend or (identity or {}).get("backend") or default_backend())
    runs_model = (man.get("model") or {}).get("model") or (man.get("model") or {}).get("path")
    name = opts.model or runs_model
    if not name:
        raise EvalAwareError(f"{run_dir}: the manifest names no model; pass --model")
    if name == runs_model:  # the run's engine arguments (-M), or a refusal of others
        args = engine_args_for(identity, opts.engine.engine_args, opts.backend, str(run_dir))
        opts = replace(opts, engine=replace(opts.engine, engine_args=args or {}))
    opts = replace(opts, model=name)
    opts.check_model()
    with run_dir_lock(run_dir, command="evalaware intervene"), ExitStack() as stack:
        engine = opts.open_model(stack)
        summary = intervene(run_dir, engine, insert=insert, at=at, pair=pair, pairs=pairs,
                            methods=method_list, trace=trace, batch_size=batch_size, n_boot=bootstrap,
                            seed=seed, progress=progress)
    for line in summary_table(summary):
        click.echo(line)
    click.echo(f"\nwritten: {Path(run_dir) / 'intervene' / f'{at}_pair{pair}'}")
