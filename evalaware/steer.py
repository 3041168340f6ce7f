"""`evalaware steer build|run|report`."""

from __future__ import annotations

import math
from contextlib import ExitStack
from pathlib import Path
from dataclasses import replace

import click

from evalaware.help import SectionedGroup
from evalaware.options import (MethodOptions, RunOptions, method_options, methods_option, progress_option,
                                 run_options, verbose_option)
from harness.core import bounds
from harness.core.console import visible
from harness.core.errors import EvalAwareError
from harness.backends.recorded import check_reopened, engine_args_for
from harness.backends.registry import check_backend, default_backend, open_backend
from harness.run.loop import needs_judge
from harness.runlog import RunLog
from harness.runlog.outputs import check_output

from probes.activations.store import ActivationStore
from harness.organisms.reach import organism_card, reachable
from probes.activations.capture import HIDDEN, parse_layers
from probes.steering.build import build_from_pairs, build_from_run, read_pairs, steerable_layers
from probes.steering.contrasts import contrast_sets
from probes.steering.report import write_steer_report
from probes.steering.run import select_samples, steer_run
from probes.steering.direction import load_vector


def _floats(spec: str, what: str) -> list[float]:
    """Comma-separated finite numbers (nan and inf are refused, as by every float option)."""
    try:
        out = [float(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise EvalAwareError(f"{what} {spec!r}: expected comma-separated numbers") from None
    if not all(math.isfinite(v) for v in out):
        raise EvalAwareError(f"{what} {spec!r}: every value must be a finite number")
    return out


@click.group(cls=SectionedGroup)
def steer() -> None:
    """Steer the model along the eval-minus-deploy direction and measure dose-response."""


@steer.command("build")
@click.option("--run", "run_dir", type=click.Path(exists=True, file_okay=False),
              help="Run with captured activations (`activations capture`).")
@click.option("--pairs", type=click.Path(dir_okay=False),
              help="JSONL of {\"eval\": ..., \"deploy\": ...} prompt pairs, captured on the fly.")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Vector directory.")
@click.option("--pooling", default="last_prompt", show_default=True)
@click.option("--layers", default="all", show_default=True,
              help="all, every:K or a comma list (ids as in `activations capture`).")
@click.option("--capture", "capture_name", default="default", show_default=True)
@click.option("--probe", type=click.Path(exists=True), help="Use a saved probe's weight vector.")
@click.option("--holdout-folds", type=click.IntRange(2, 100), default=2, show_default=True,
              help="Grouped split by category into K folds; the first is held out (not used).")
@click.option("--seed", type=bounds.seed(), default=0, show_default=True)
@click.option("--labels", default="truth", show_default=True)
@click.option("--model", help="--pairs: the model (asset name or path); --run: the model the contrast "
                               "controls are built on [default: the run's].")
@click.option("--control-pairs", "control_pairs", multiple=True, type=click.Path(dir_okay=False),
              help="A further unrelated contrast: JSONL of {\"a\": ..., \"b\": ...} (a string or "
                   "{\"system\", \"user\"}), named by the file's stem; repeatable. Beside the "
                   "shipped ones (probes/steering/contrasts/).")
@click.option("--no-contrast-controls", is_flag=True,
              help="Build no unrelated-contrast controls (no model is loaded for a --run vector then).")
def build_cmd(run_dir, pairs, out, pooling, layers, capture_name, probe, holdout_folds, seed,
              labels, model, control_pairs, no_contrast_controls) -> None:
    """Build a steering vector from a run's activations, a probe, or contrastive pairs, with
    norm-matched control directions from contrasts unrelated to being tested.

    \b
    Examples:
      evalaware steer build --run runs/demo --out vectors/smollm2
      evalaware steer build --run runs/demo --probe probes/smollm2 --out vectors/probe
      evalaware steer build --pairs pairs.jsonl --model smollm2 --out vectors/pairs
      evalaware steer build --run runs/demo --control-pairs shelf2.jsonl --out vectors/more
    """
    if bool(run_dir) == bool(pairs):
        raise EvalAwareError("pass exactly one of --run and --pairs")
    if no_contrast_controls and control_pairs:
        raise EvalAwareError("--control-pairs with --no-contrast-controls: pass one of them")
    for f in ("vector.json", "vector.safetensors"):  # before any work
        check_output(Path(out) / f, "--out", inputs=[pairs, probe, *control_pairs],
                     runs=[run_dir] if run_dir else [])
    sets = None if no_contrast_controls else contrast_sets(control_pairs)  # checked before a model loads
    if pairs:
        if not model:
            raise EvalAwareError("--pairs needs --model")
        read_pairs(pairs)  # bad input fails before the model loads
        backend = open_backend(default_backend(HIDDEN), model, needs=HIDDEN)
        try:
            n = backend.hidden_layout().n_layers
            ids = [l for l in parse_layers(layers, n) if 1 <= l < n]
            ids = reachable(ids, organism_card(model), n, "steer build --model")  # an organism: its own layers
            vec = build_from_pairs(pairs, backend, out, ids, contrasts=sets)
        finally:
            backend.close()
    else:
        with RunLog(run_dir, create=False) as st:
            settings = ActivationStore(st, capture_name).settings or {}
            manifest_model = st.manifest().get("model") or {}
        card = manifest_model.get("organism")  # the run's model, if an organism
        name = model or manifest_model.get("model")
        n = int(settings.get("num_hidden_layers") or 0)
        ids = steerable_layers(settings, parse_layers(layers, n) if n else None)
        if probe:  # the direction lives at the probe's layer (--layers aside): below the trained blocks, the base's
            from probes.io import load_probe

            reachable([load_probe(probe).layer], card, n, f"steer build --probe {probe}")
        else:
            ids = reachable(ids, card, n, f"steer build --run {run_dir}")
        if sets and not name:
            raise EvalAwareError(f"{run_dir}: the run names no model to build the contrast controls on; "
                                 "pass --model (or --no-contrast-controls)")
        if sets:  # a model that cannot be had is refused before anything loads
            check_backend(default_backend(HIDDEN), str(name), {}, needs=HIDDEN)
        with ExitStack() as stack:
            backend = None
            if sets:
                backend = open_backend(default_backend(HIDDEN), name, needs=HIDDEN)
                stack.callback(backend.close)
            vec = build_from_run(run_dir, out, pooling=pooling, layers=ids, capture=capture_name,
                                 probe=probe, holdout_folds=holdout_folds, seed=seed, labels=labels,
                                 contrasts=sets, backend=backend)
    click.echo(f"vector {visible(str(out))}: source {vec.meta['source']}, layers {vec.layers[0]}..{vec.layers[-1]} "
               f"({len(vec.layers)}), sha256 {vec.sha256[:12]}")
    if vec.contrasts:
        click.echo(f"contrast controls ({len(vec.contrasts)}, each scaled as the vector): "
                   + ", ".join(sorted(vec.contrasts)))
    au = vec.meta.get("heldout_auroc") or vec.meta.get("insample_auroc") or {}
    if au:
        kind = "held-out" if "heldout_auroc" in vec.meta else "in-sample"
        best = vec.best_layer()
        click.echo(f"layer {best} chosen by {vec.meta.get('layer_selection') or 'in-sample AUROC'}; "
                   f"{kind} AUROC of its projection {au.get(str(best)) or float('nan'):.3f}; "
                   f"train/held-out: {vec.meta.get('n_train')} / {vec.meta.get('n_heldout')}")


@steer.command("run")
@click.option("--vector", "vector_dir", required=True, type=click.Path(exists=True))
@run_options(needs=("steering",),
             model_help="Default: the vector's model.")
@click.option("--out", required=True, type=click.Path(file_okay=False))
@methods_option("logprob_question", "The methods run under each alpha.")
@click.option("--layers", help="Comma list of layer ids (default: the vector's best held-out layer).")
@click.option("--alphas", default="-0.5,-0.25,-0.1,0,0.1,0.25,0.5", show_default=True,
              help="Multiples of the mean residual norm at each layer.")
@click.option("--positions", type=click.Choice(["all", "generated"]), default="all", show_default=True,
              help="generated: only tokens after the prompt (hf only).")
@click.option("--no-random-control", is_flag=True, help="Skip the random-direction controls.")
@click.option("--no-contrast-controls", is_flag=True,
              help="Skip the unrelated-contrast controls the vector holds (`steer build`).")
@click.option("--n-random", type=click.IntRange(1, 1000), default=20, show_default=True,
              help="Random directions per alpha (norm-matched; direction k drawn with seed + k): "
                   "the control distribution the vector is ranked in.")
@click.option("--seed", type=bounds.seed(), default=0, show_default=True,
              help="Seed of the random control (and of sampling at temperature > 0).")
@click.option("--samples", "which", type=click.Choice(["heldout", "all"]), default=None,
              help="Default: the vector's held-out samples when it records them, else all.")
@click.option("--force", is_flag=True, help="Steer a model with other weights than the vector's.")
@method_options()
@progress_option
@verbose_option
def run_cmd(vector_dir, opts: RunOptions, method_opts: MethodOptions, out, methods, layers, alphas,
            positions, no_random_control, no_contrast_controls, n_random, seed, which, force, progress) -> None:
    """Run METHODS under each alpha (vector and random control) into OUT/<condition>/.

    \b
    Examples:
      evalaware steer run --vector vectors/smollm2 --dataset demo --out runs/steer
      evalaware steer run --vector vectors/smollm2 --layers 10,15 --alphas -0.5,0,0.5 \\
          --backend vllm --dataset demo --samples all --out runs/steer_vllm
    """
    method_list = methods
    vec = load_vector(vector_dir)
    layer_ids = [vec.best_layer()] if not layers else [int(x) for x in layers.split(",") if x.strip()]
    missing = [l for l in layer_ids if l not in vec.directions]
    if missing:
        raise EvalAwareError(f"--layers {missing}: not in the vector (it has {vec.layers[0]}.."
                             f"{vec.layers[-1]})")
    alpha_list = _floats(alphas, "--alphas")
    which = which or ("heldout" if vec.meta.get("heldout_ids") else "all")
    name = opts.model or vec.meta.get("model")
    if not name:
        raise EvalAwareError(f"{vector_dir}: the vector names no model; pass --model")
    recorded = vec.meta.get("model_identity")
    if name == vec.meta.get("model") and not force:  # the vector's engine arguments (-M), or a refusal
        args = engine_args_for(recorded, opts.engine.engine_args, opts.backend, str(vector_dir))
        opts = replace(opts, engine=replace(opts.engine, engine_args=args or {}))
    opts = replace(opts, model=name)
    opts.check_model()
    opts.check_judge(needs_judge(method_list))  # refuse a bad judge before any engine starts
    samples = opts.samples(among=lambda ss: select_samples(ss, vec, which))
    with ExitStack() as backends:
        engine = opts.open_model(backends, enforce_eager=True)  # where taken: hooks need eager
        judge = opts.judge_for(backends, engine, method_list)
        want, got = vec.meta.get("weights_sha256"), engine.identity.get("weights_sha256")
        if want and got and want != got and not force:
            raise EvalAwareError(f"the vector was built on weights {want[:12]}..., {name} has "
                                 f"{got[:12]}...; pass --force to steer it anyway")
        if not force:
            check_reopened(recorded, engine.identity, str(vector_dir))
        template_kwargs = opts.engine.template_kwargs
        plan = steer_run(vec, engine, samples, method_list, out, layer_ids, alpha_list,
                         positions=positions, random_control=not no_random_control, seed=seed,
                         n_random=n_random, reuse_run=vec.meta.get("source_run"), progress=progress,
                         contrast_controls=not no_contrast_controls,
                         dataset_path=opts.dataset_path, judge=judge,
                         config=method_opts.config(engine.tokenizer, template_kwargs, seed),
                         prompts=method_opts.prompts(), template_kwargs=template_kwargs,
                         batch_size=method_opts.batch_size)
    click.echo(f"{len(plan['conditions'])} conditions ({which} samples: {len(samples)}) in {visible(str(out))}; "
               f"`evalaware steer report {out}` for the dose-response")


@steer.command("report")
@click.argument("out", type=click.Path(exists=True, file_okay=False))
@click.option("--report-dir", type=click.Path(file_okay=False), help="Default: OUT/report")
@click.option("--bootstrap", type=bounds.resamples(), default=1000, show_default=True)
@click.option("--seed", type=bounds.seed(), default=0, show_default=True)
def report_cmd(out, report_dir, bootstrap, seed) -> None:
    """Dose-response table and figure per method, vector vs random control, plus sanity.

    \b
    Example:
      evalaware steer report runs/steer
    """
    rd = write_steer_report(out, report_dir, n_boot=bootstrap, seed=seed)
    click.echo((rd / "steering.md").read_text())
    click.echo(f"written: {rd / 'steering.md'}, {rd / 'steering.html'}, figures in {rd}")
