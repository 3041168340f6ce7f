"""`evalaware activations ...` and `evalaware probes ...` (attached by evalaware.main)."""

from __future__ import annotations

import csv
import json
import math
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import click

from evalaware.help import SectionedGroup
from harness.core import bounds
from harness.core.details import LayerSelection
from evalaware.options import RunOptions, limit_options, progress_option, run_options, verbose_option
from harness.core.console import visible
from harness.core.errors import EvalAwareError
from harness.runlog.lock import run_dir_lock
from harness.runlog import RunLog
from harness.runlog.outputs import check_output, output_file, write_output

from probes.activations.store import ActivationStore
from probes.activations.capture import run_capture
from probes.io import load_probe
from probes.plot import auroc_by_layer
from probes.activations.pooling import DEFAULT_POOLINGS, POOLINGS

STORE_DTYPES = ("fp16", "bf16", "fp32")
_RUN = click.option("--run", "run_dir", required=True, type=click.Path(exists=True, file_okay=False),
                    help="Run directory (made by `evalaware run`).")
_NAME = click.option("--name", default="default", show_default=True,
                     help="Capture name (several captures can live in one run).")


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _open(run_dir: str):
    return RunLog(run_dir, create=False)


def _fmt(x: Any) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


# --- activations ----------------------------------------------------------------------------
@click.group(cls=SectionedGroup)
def activations() -> None:
    """Capture residual-stream activations of a run's samples (prompt + answer)."""


@activations.command("capture")
@_RUN
@click.option("--layers", default="all", show_default=True,
              help="all | every:K | comma list (0 = embeddings, -1 = last).")
@click.option("--pooling", default=",".join(DEFAULT_POOLINGS), show_default=True,
              help=f"Comma list of {', '.join(POOLINGS)}.")
@click.option("--store-dtype", type=click.Choice(STORE_DTYPES), default="fp16", show_default=True,
              help="Storage dtype of the shards (--dtype is the model's dtype, as in every command).")
@run_options(dataset=None, judge=False, needs=("hidden_states",), engine_alias=True,
             model_help="Override the run's model (asset name, path or cached hub id).")
@_NAME
@click.option("--batch-size", type=bounds.batch(), default=8, show_default=True, help="Samples per forward pass.")
@click.option("--shard-size", type=click.IntRange(1), default=64, show_default=True, help="Samples per shard.")
@click.option("--method", help="Take the answer settings from this method's (default: reasoning, "
                               "motivation, binary, ... whichever the run has).")
@click.option("--evidence-methods", default="reasoning", show_default=True,
              help="Methods whose judge evidence quotes feed mean_evidence.")
@click.option("--no-answer", is_flag=True, help="Prompt only (no answer tokens).")
@click.option("--sequence", type=click.Choice(["auto", "answer", "reasoning"]), default="auto",
              show_default=True, help="answer: prompt + answer. reasoning: the sequence the "
              "reasoning judge read (elicited traces use their own prompt). auto: reasoning when "
              "the run has reasoning records.")
@click.option("--device", help="hf backend: cpu, cuda, cuda:1 ...")
@limit_options
@progress_option
@verbose_option
def capture_cmd(run_dir, layers, pooling, store_dtype, opts: RunOptions, name, batch_size, shard_size,
                method, evidence_methods, no_answer, sequence, device, progress, subset) -> None:
    """Capture pooled activations for every sample of RUN; resumable (re-run after an interrupt).

    The model's dtype and engine settings are those of `evalaware run` (--dtype, --max-model-len,
    --gpu-memory-utilization, --trust-remote-code); the backend is hf (forward hooks, CPU/GPU) or
    vllm (extract_hidden_states; the last layer id is taken before the final norm).

    \b
    Examples:
      evalaware activations capture --run runs/demo
      evalaware activations capture --run runs/demo --layers every:3 --pooling last_prompt --store-dtype bf16
      evalaware activations capture --run runs/qwen --backend vllm --layers 0,12,24,36
    """
    eng = opts.engine
    if eng.dtype in STORE_DTYPES:
        raise click.UsageError(f"--dtype {eng.dtype}: --dtype is the model's dtype now (as in "
                               f"`evalaware run`); the shards' storage dtype is --store-dtype {eng.dtype}")
    unused = [f for f in eng.given() if f not in ("--gpu-memory-utilization", "--max-model-len")]
    if eng.enable_thinking is not None:
        unused.append("--enable-thinking/--disable-thinking")
    if unused:
        raise click.UsageError(f"activations capture does not take {', '.join(unused)} (the "
                               "sequences and their chat template come from the run)")
    if opts.model:
        opts.check_model()
    s = run_capture(run_dir, layers=layers, poolings=pooling, dtype=store_dtype, model=opts.model,
                    name=name, batch_size=batch_size, shard_size=shard_size, method=method,
                    evidence_methods=_csv(evidence_methods) or [], include_answer=not no_answer,
                    engine=opts.backend, device=device, progress=progress, sequence=sequence,
                    subset=subset, engine_opts=opts.model_opts())
    click.echo(f"captured {s.samples_captured} samples ({s.samples_done_before} already done) in "
               f"{s.seconds:.1f} s: {s.samples_per_s:.2f} samples/s, {s.tokens} tokens, "
               f"{s.shards_written} new shard(s)")
    if s.removed_files:
        click.echo(f"removed leftovers of an interrupted capture: {', '.join(s.removed_files)}")
    if s.repaired_shards:
        click.echo(f"captured again the samples of corrupt shard(s): {', '.join(s.repaired_shards)}")
    absent = {p: n for p, n in s.absent.items() if n}
    if absent:
        click.echo("absent poolings (no such tokens): " +
                   ", ".join(f"{p}: {n} samples" for p, n in absent.items()))
    _print_stats(s.stats)


def _print_stats(st: dict[str, Any]) -> None:
    click.echo(f"store: {st['samples']} samples, {st['shards']} shards, {st['shard_bytes'] / 1e6:.2f} MB; "
               f"{st['bytes_per_sample']:.0f} bytes/sample vs {st['theoretical_bytes_per_sample']:.0f} "
               f"payload (overhead {100 * st['overhead']:.2f}%); index ~{st['index_bytes_approx'] / 1e3:.0f} kB")
    click.echo("vectors per pooling: " + ", ".join(f"{p}={n}" for p, n in
                                                   st["vectors_per_pooling"].items()))


@activations.command("info")
@_RUN
@_NAME
def info_cmd(run_dir, name) -> None:
    """Show a capture's settings and sizes, and check its shards (size, sha256) and index rows;
    a bad one is named and the command exits with 2.

    \b
    Example:
      evalaware activations info --run runs/demo
    """
    acts = ActivationStore(_open(run_dir), name)
    if acts.settings is None:
        raise EvalAwareError(f"{run_dir}: no capture named {name!r}")
    click.echo(json.dumps(acts.settings, indent=1, sort_keys=True))
    _print_stats(acts.stats())
    problem = acts.check()
    if problem is not None:
        raise problem
    click.echo(f"checked: {len(acts.shards())} shard(s) match their recorded size and sha256, "
               f"every index row points at its sample")


# --- probes ---------------------------------------------------------------------------------
@click.group(cls=SectionedGroup)
def probes() -> None:
    """Train, evaluate and apply linear probes on captured activations."""


def _eval_options(f):
    opts = [
        click.option("--labels", "label_source", default="truth", show_default=True,
                     help="truth, or a method whose predictions are the labels (e.g. reasoning: "
                          "the judge's verbalised awareness)."),
        click.option("--cv", "schemes", default="grouped,lofo,random", show_default=True,
                     help="CV schemes: grouped (by category), crossed (category and family held out at once), lofo "
                          "(leave one family out), random (leaky)."),
        click.option("--group-key", default="category", show_default=True),
        click.option("--family-key", default="family", show_default=True,
                     help="Metadata field for leave-one-family-out (falls back to --group-key)."),
        click.option("--n-splits", type=click.IntRange(2, 100), default=5, show_default=True),
        click.option("--C", "C", type=bounds.positive(), default=1.0, show_default=True,
                     help="Inverse L2 strength of the logistic probe."),
        click.option("--n-boot", type=bounds.resamples(), default=1000, show_default=True),
        click.option("--ci-by", type=click.Choice(["category", "sample"]), default="category",
                     show_default=True, help="Resampling unit of the AUROC intervals: whole groups "
                                             "(--group-key) or single samples."),
        click.option("--seed", type=bounds.seed(), default=0, show_default=True),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def eval_config(label_source, schemes, group_key, family_key, n_splits, C, n_boot, ci_by, seed, **extra):
    from probes.train import EvalConfig  # .train, .apply: scikit-learn (~1.4 s), not at CLI start-up

    return EvalConfig(label_source=label_source, schemes=tuple(_csv(schemes) or ()),
                      group_key=group_key, family_key=family_key, n_splits=n_splits, C=C,
                      n_boot=n_boot, ci_by=ci_by, seed=seed, **extra)


@probes.command("eval")
@_RUN
@_NAME
@click.option("--pooling", help="Comma list (default: every pooling in the capture).")
@click.option("--layers", help="Comma list of layer ids (default: every captured layer).")
@click.option("--probes", "probe_kinds", default="logreg,diffmean", show_default=True)
@click.option("--baselines", default="tfidf,tfidf_char,length,shuffled,human", show_default=True)
@click.option("--n-perm", type=bounds.resamples(), default=200, show_default=True,
              help="Permutations of the layer-selection null (best layer under each permutation).")
@_eval_options
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder (default RUN/probes/<name>).")
@click.option("--write-records", is_flag=True,
              help="Write nested out-of-fold logreg scores as `probe` records: categories and families held "
                   "out (crossed CV), each fold's layer chosen among --layers without that fold.")
@click.option("--record-pooling", help="Pooling for --write-records (default: the first).")
@click.option("--method-name", default="probe", show_default=True)
@click.option("--no-progress", is_flag=True)
def eval_cmd(run_dir, name, pooling, layers, probe_kinds, baselines, n_perm, out_dir, write_records,
             record_pooling, method_name, no_progress, **cv) -> None:
    """Per-layer sweep: out-of-fold AUROC with 95% intervals (the cluster-jackknife t under 50
    groups, the percentile bootstrap from 50; each row's rule in eval.json/eval.csv `ci_method`),
    baselines in the same table, an AUROC-by-layer plot.

    \b
    Examples:
      evalaware probes eval --run runs/demo
      evalaware probes eval --run runs/demo --pooling last_prompt --cv grouped,crossed --write-records
      evalaware probes eval --run runs/qwen --labels reasoning
    """
    try:
        layer_ids = [int(x) for x in _csv(layers)] if layers else None
    except ValueError:
        raise EvalAwareError(f"--layers {layers!r}: expected a comma list of integers") from None
    cfg = eval_config(**cv, poolings=_csv(pooling), layers=layer_ids,
                  probes=tuple(_csv(probe_kinds) or ()), baselines=tuple(_csv(baselines) or ()),
                  n_perm=n_perm)
    with holding(run_dir, out_dir is None or write_records):
        eval_sweep(run_dir, name, cfg, out_dir, write_records, record_pooling, method_name, no_progress)


def holding(run_dir: str, writes: bool):
    """Hold RUN for writing when the command writes into it; a reader takes no lock."""
    return run_dir_lock(run_dir, create=False) if writes else nullcontext()


def eval_sweep(run_dir, name, cfg, out_dir, write_records, record_pooling, method_name,
          no_progress) -> None:
    """The sweep of `probes eval`, its files and (with --write-records) its records."""
    from probes.apply import FOLD_SCALES, SELECT_SCHEME, write_oof_records  # scikit-learn (see _config)
    from probes.records import check_method_name, sweep_owner
    from probes.train import evaluate

    out = Path(out_dir or Path(run_dir) / "probes" / name)
    files = {f: out / f for f in ("eval.json", "eval.csv", "auroc_by_layer.png")}
    for f in files.values():  # before the sweep
        check_output(f, "--out", runs=[run_dir])
    store = _open(run_dir)
    if write_records:  # a name another method or probe owns: before the sweep
        check_method_name(store, method_name, sweep_owner(name))
    res = evaluate(store, name, cfg, progress=not no_progress)
    out.mkdir(parents=True, exist_ok=True)
    write_output(files["eval.json"], json.dumps(res.to_dict(), indent=1, sort_keys=True), "--out", runs=[run_dir])
    with output_file(files["eval.csv"], "--out", runs=[run_dir], newline="") as f:
        cols = ["pooling", "layer", "model", "scheme", "leaky", "auroc", "ci_lo", "ci_hi", "ci_method",
                "fold_auroc_mean", "n", "n_eval", "label_source", "p_value", "null_q95", "n_perm"]
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(res.rows)
    png = auroc_by_layer(res.rows, out / "auroc_by_layer.png",
                         title=f"{Path(run_dir).name}: probe AUROC by layer (labels: {cfg.label_source})")
    for line in summary_lines(res):
        click.echo(line)
    for pooling, why in res.skipped.items():
        click.echo(f"skipped {pooling}: {why}")
    click.echo(f"timing: " + ", ".join(f"{k} {v:.1f}s" for k, v in res.timing.items()))
    click.echo(f"wrote {out / 'eval.json'}, {out / 'eval.csv'}, {png}")
    if write_records:
        pool = record_pooling or list(res.samples)[0]
        if "logreg" not in cfg.probes:
            raise EvalAwareError("--write-records needs the logreg probe in the sweep (--probes)")
        got = write_oof_records(store, name, pool, cfg.layers, "logreg", cfg, method_name,
                                selection=selection_null(res, pool, SELECT_SCHEME))
        click.echo(f"wrote {got['written']} out-of-fold `{method_name}` records (pooling {pool}, "
                   f"{got['oof_scheme']} CV, layer per fold {got['layers_chosen']}, their AUROC "
                   f"{_fmt(got['auroc'])}); {FOLD_SCALES}")


def selection_null(res, pooling: str, scheme: str) -> dict[str, Any]:
    """The sweep's best layer (chosen on all the data) and its null under `scheme` (does it beat
    noise?), where the sweep drew one, as ``sweep_*`` details: the sweep's, not the records' own
    p (each record's layer was chosen without its fold)."""
    sel = res.selection_for(pooling, scheme)
    if sel is None:
        return {}
    return _given(LayerSelection(sweep_best_layer=sel["selected_layer"], sweep_selection_p=sel["p_value"],
                                 sweep_null_mean=sel["null_mean"], sweep_null_q95=sel["null_q95"],
                                 sweep_n_perm=sel["n_perm"]))


def _given(d: LayerSelection) -> dict[str, Any]:
    """The detail's fields that are set (the records carry their ``layer`` apart)."""
    return {k: v for k, v in d.to_dict().items() if v is not None}


def summary_lines(res) -> list[str]:
    """Best layer per (pooling, probe, scheme), then the baselines, as a text table."""
    lines = []
    hdr = f"{'pooling':<14} {'model':<16} {'cv':<8} {'layer':>5} {'AUROC':>6} {'95% CI':>13}  note"
    for pooling, n in res.samples.items():
        lines += ["", f"{pooling}: n={n['n']} ({n['n_eval']} eval)", hdr]
        models = list(dict.fromkeys(r["model"] for r in res.rows if r["pooling"] == pooling))
        for model in models:
            for scheme in ("grouped", "lofo", "random", "none"):
                rs = [r for r in res.rows if r["pooling"] == pooling and r["model"] == model
                      and r["scheme"] == scheme]
                if not rs:
                    continue
                if model in ("logreg", "diffmean"):
                    r = res.best(pooling, model, scheme)
                    note = "best layer"
                else:
                    r = rs[0]
                    note = "baseline" + (" (null)" if model.startswith("shuffled") else "")
                sel = res.selection_for(pooling, scheme)
                if model == "logreg" and sel and sel["p_value"] is None:  # --n-perm 0: no null drawn
                    note += "; best-layer null not drawn (--n-perm 0): layer choice untested"
                elif model == "logreg" and sel:
                    note += f"; vs best-layer null p={sel['p_value']:.3f}" + (
                        "" if sel["p_value"] < 0.05 else " (no signal beyond layer choice)")
                elif model.startswith("shuffled") and r.get("null_q95") is not None:
                    note = (f"null: {r['selection']}, {r['n_perm']} perms; "
                            f"95th pct {_fmt(r['null_q95'])}")
                elif r.get("source"):
                    note += f": {r['source']}"
                if scheme == "random":
                    note += "; LEAKY"
                layer = "-" if r["layer"] is None else str(r["layer"])
                ci = f"[{_fmt(r['ci_lo'])},{_fmt(r['ci_hi'])}]"
                lines.append(f"{pooling:<14} {model:<16} {scheme:<8} {layer:>5} "
                             f"{_fmt(r['auroc']):>6} {ci:>13}  {note}")
    from harness.reporting.doc import rules_note  # the one wording of a table's interval rules

    return lines + ["", rules_note("Interval rules", [r.get("ci_method") for r in res.rows])]


@probes.command("train")
@_RUN
@_NAME
@click.option("--pooling", default="last_prompt", show_default=True)
@click.option("--layer", default="best", show_default=True,
              help="Layer id, or `best` (highest AUROC with categories and families held out; its CV "
                   "AUROCs nested: the layer chosen again inside each training fold).")
@click.option("--probe", "probe_kind", type=click.Choice(["logreg", "diffmean"]), default="logreg",
              show_default=True)
@_eval_options
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Probe directory to write (probe.safetensors + probe.json).")
@click.option("--no-progress", is_flag=True)
def train_cmd(run_dir, name, pooling, layer, probe_kind, out_dir, no_progress, **cv) -> None:
    """Fit a probe on all labelled samples of RUN and save it (safetensors + JSON, no pickle).

    \b
    Example:
      evalaware probes train --run runs/demo --pooling last_prompt --layer best --out probes/smollm2
    """
    from probes.apply import train_and_save  # scikit-learn (see _config)

    if layer != "best":
        try:
            layer = int(layer)
        except ValueError:
            raise EvalAwareError(f"--layer {layer!r}: a layer id or `best`") from None
    for f in ("probe.json", "probe.safetensors"):  # before the fit
        check_output(Path(out_dir) / f, "--out", runs=[run_dir])
    path, meta = train_and_save(_open(run_dir), name, pooling, layer, out_dir, probe_kind,
                                eval_config(**cv), progress=not no_progress)
    click.echo(f"saved {meta['kind']} probe (layer {meta['layer']}, {meta['pooling']}, labels "
               f"{meta['label_source']}, n={meta['train']['n']}) to {path}")
    click.echo(f"  layer: {meta['layer_selection']}")
    for scheme, r in meta["cv"].items():
        click.echo(f"  {scheme:<8} AUROC {_fmt(r['auroc'])} [{_fmt(r['ci_lo'])},{_fmt(r['ci_hi'])}]"
                   + ("  LEAKY" if r["leaky"] else "")
                   + (f"  nested; layers chosen per fold: {r['layers_chosen']}" if r.get("nested") else ""))


@probes.command("apply")
@click.option("--probe", "probe_dir", required=True, type=click.Path(exists=True),
              help="Probe directory written by `probes train`.")
@_RUN
@_NAME
@click.option("--write-records", is_flag=True, help="Write `probe` records into RUN's results.")
@click.option("--method-name", default="probe", show_default=True)
@click.option("--out", "out_file", type=click.Path(dir_okay=False), help="Scores as JSONL.")
@click.option("--force", is_flag=True, help="Apply across different model weights / layer conventions.")
@click.option("--allow-train-overlap", is_flag=True,
              help="Write records even for samples the probe was trained on (in-sample scores).")
def apply_cmd(probe_dir, run_dir, name, write_records, method_name, out_file, force,
              allow_train_overlap) -> None:
    """Score RUN's captured activations with a saved probe.

    \b
    Examples:
      evalaware probes apply --probe probes/smollm2 --run runs/new --write-records
      evalaware probes apply --probe probes/smollm2 --run runs/new --out scores.jsonl
    """
    from probes.apply import apply_probe  # scikit-learn (see _config)

    probe = load_probe(probe_dir)
    guard = dict(inputs=[probe_dir], runs=[run_dir])
    if out_file:
        check_output(out_file, "--out", **guard)  # before any work
    with holding(run_dir, write_records):
        res = apply_probe(probe, _open(run_dir), name, write=write_records, method=method_name,
                          force=force, allow_train_overlap=allow_train_overlap)
    click.echo(f"scored {res['n']} samples (layer {probe.layer}, {probe.pooling}); AUROC vs truth "
               f"{_fmt(res['auroc_truth'])}" + (f"; {res['train_overlap']} were training samples"
                                               if res["train_overlap"] else ""))
    if out_file:
        with output_file(out_file, "--out", **guard) as f:
            for sid, d, p in zip(res["ids"], res["decision"], res["proba"]):
                f.write(json.dumps({"sample_id": sid, "decision": float(d), "p_eval": float(p)}) + "\n")
        click.echo(f"wrote {visible(str(out_file))}")
    if write_records:
        click.echo(f"wrote {res['written']} `{method_name}` records into {visible(str(run_dir))}")
