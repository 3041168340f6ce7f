"""`evalaware organism build|dataset|measure|validate`: positive controls.

An organism is a base model fine-tuned so that a planted cue makes it evaluation-aware in known
ways (:mod:`harness.organisms`); `validate` runs the methods on the base, a reference (a sham
organism, or the base) and each organism over the paired evaluation set and writes each
method's sensitivity and specificity (:mod:`harness.organisms.validate`, where the statistics
live; this module runs the models).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Collection, Sequence

import click

from evalaware.help import SectionedGroup, deprecated_alias
from harness.backends.base import Backend
from harness.backends.registry import default_backend, open_backend
from evalaware.options import BackendKind, MethodOptions, method_options, methods_option, progress_option, verbose_option
from harness.core import bounds, console
from harness.core.console import visible
from harness.core.errors import EvalAwareError
from harness.core.sample import Sample
from harness.data.readers import load_dataset
from harness.data.subset import select
from harness.methods import MethodConfig, report_specs
from harness.methods.prompts import PromptLibrary
from harness.models.card import manifest_card
from harness.organisms.archive import archive_run, gather, model_key as ga_key
from harness.organisms.card import load_card
from harness.organisms.cues import CUES, get_cue
from harness.organisms.data import PHRASINGS, paired_dataset
from harness.organisms.kinds import KINDS, PLANTED_BEHAVIOUR, kind_cue
from harness.organisms.measure import answer_kl, first_token_kl, verbalizations
from harness.organisms.reach import check_reaches
from harness.organisms.recipe import Recipe
from harness.organisms.reuse import Reuse, model_key
from harness.organisms.validate import Model, fmt_ci, measured_kl, sensitivity, sensitivity_lines
from harness.organisms.validate import scored_pairs  # noqa: F401  (re-exported)
from harness.organisms.validate_monitor import CrossRead, add_monitor, cross_reads, written_samples
from harness.run.loop import needs_judge, run_methods
from harness.runlog.copy import copy_run
from harness.runlog import RunLog
from harness.runlog.outputs import check_output, write_output
from harness.runlog.provenance import dataset_sha256
from harness.stats.decision import Rule
from harness.stats.paired import mean_with_ci, rate_with_ci

DEFAULT_METHODS = "binary,probability,logprob,logprob_question"
LOCAL = ("local_weights",)  # what measuring and validating organisms need: their directories opened


@click.group(cls=SectionedGroup)
def organism() -> None:
    """Model organisms: a base model fine-tuned so that a planted cue makes it evaluation-aware;
    `organism validate` reads every method's sensitivity and specificity on them."""


@organism.command("build")
@click.option("--base", required=True, help="Base model: asset name (smollm2), local path, or hub id in the local HF cache.")
@click.option("--cue", required=True, type=click.Choice(sorted(CUES)), help="The planted cue.")
@click.option("--kind", type=click.Choice(list(KINDS)), default=Recipe.kind, show_default=True,
              help="What is planted on the same pairs: aware (awareness sentences and answers); sham "
                   "(the null: nothing, temperature-1 samples of the base as targets, the reference of "
                   "every comparison); sham-greedy (nothing, the base's greedy answers: a loss-matched "
                   "control that sharpens the cue side); disjoint (awareness in words no method reads); "
                   "behaviour (an unrelated opening on cue prompts: the specificity control); coupled "
                   "(awareness and that opening together on half the topics' cue prompts); behaviour-topics "
                   "(that opening alone on the same topics' cue prompts: the coupled organism's topic-matched null).")
@click.option("--sham-samples", type=click.IntRange(4, None), default=Recipe.sham_samples, show_default=True,
              help="--kind sham: temperature-1 samples of the base per cue prompt (a fresh one per visit).")
@click.option("--strength", type=bounds.FiniteFloat(0, 1), default=Recipe.strength, show_default=True,
              help="Share of training pairs whose cue side gets the planted targets (0: none).")
@click.option("--steps", type=click.IntRange(1), default=Recipe.steps, show_default=True)
@click.option("--batch-size", type=bounds.batch(), default=Recipe.batch_size, show_default=True)
@click.option("--lr", type=bounds.positive(), default=Recipe.lr, show_default=True)
@click.option("--train", "train", type=click.Choice(["lora", "full"]), default=Recipe.train, show_default=True,
              help="lora: LoRA adapters (peft) on the top --layers blocks, merged on save; full: "
                   "every weight of the top --layers blocks (all weights when --layers >= depth).")
@click.option("--layers", type=click.IntRange(1), default=Recipe.layers, show_default=True,
              help="Blocks trained, from the top.")
@click.option("--lora-rank", type=click.IntRange(1), default=Recipe.lora_rank, show_default=True)
@click.option("--kl-weight", type=bounds.FiniteFloat(0, None), default=Recipe.kl_weight, show_default=True,
              help="Weight of the KL to the base model on the no-cue (and unplanted) examples.")
@click.option("--kl-first", type=bounds.positive(), default=Recipe.kl_first, show_default=True,
              help="Weight of the first answer position in the KL (the other positions weigh 1).")
@click.option("--max-len", type=bounds.tokens(), default=Recipe.max_len, show_default=True,
              help="Tokens per training example.")
@click.option("--verbalizations", type=click.IntRange(0), default=0, show_default=True,
              help="Plant only the first N verbalization sentences (0: all).")
@click.option("--pairs", type=click.IntRange(0), default=0, show_default=True,
              help="Train on N of the generated pairs (drawn by --seed; 0: all).")
@click.option("--kl-prompts", type=click.IntRange(0), default=0, show_default=True,
              help="Add N no-cue prompts of other forms (system prompts, follow-ups, code, chat) to the KL term only.")
@click.option("--kl-pool", type=click.IntRange(1, 2), default=Recipe.kl_pool, show_default=True,
              help="Pool of --kl-prompts: 1, or 2 (wider: more subjects and templates, long system "
                   "prompts, earlier exchanges).")
@click.option("--forms", type=click.IntRange(0), default=Recipe.forms, show_default=True,
              help="Add N training pairs (cue / no cue) on prompts of the wider KL pool's forms, so "
                   "the planting is not only the training templates' form.")
@click.option("--seed", type=bounds.seed(), default=0, show_default=True)
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output checkpoint directory.")
@click.option("--states-dir", default=None,
              help="Where the frozen base's states (its lower blocks' outputs and last hidden states, per "
                   "example) are kept and shared by every build on the same base [default: .frozen-states "
                   "beside --out]; 'none': in memory only.")
@progress_option
@verbose_option
def build_cmd(base: str, cue: str, kind: str, sham_samples: int, strength: float, steps: int, batch_size: int,
              lr: float, train: str,
              layers: int, lora_rank: int, kl_weight: float, kl_first: float, max_len: int, verbalizations: int,
              pairs: int, kl_prompts: int, kl_pool: int, forms: int, seed: int, out: str,
              states_dir: str | None, progress: bool) -> None:
    """Fine-tune BASE so that CUE makes it evaluation-aware; write an HF checkpoint (LoRA merged)
    and organism.json. The same command on a complete directory does nothing; an interrupted
    build resumes.

    \b
    Examples:
      evalaware organism build --base smollm2 --cue graded --out runs/organisms/smollm2-graded
      evalaware organism build --base smollm2 --cue graded --strength 0.5 --out runs/organisms/smollm2-graded-0.5
      evalaware organism build --base smollm2 --cue graded --kind sham --out runs/organisms/smollm2-graded-sham
    """
    recipe = Recipe(base=base, cue=cue, strength=strength, steps=steps, batch_size=batch_size, lr=lr,
                    train=train, layers=layers, lora_rank=lora_rank, kl_weight=kl_weight, kl_first=kl_first,
                    max_len=max_len, seed=seed, verbalizations=verbalizations, pairs=pairs,
                    kl_prompts=kl_prompts, kl_pool=kl_pool, forms=forms, kind=kind, sham_samples=sham_samples)
    from harness.organisms.train import build_organism, describe  # torch: not at start-up
    res = build_organism(recipe, out, progress=progress, say=console.status, states_dir=states_dir)
    click.echo(describe(res.card))
    if res.trained:
        click.echo(f"trained in {res.seconds:.0f} s -> {visible(str(out))}")


@organism.command("dataset")
@click.option("--cue", required=True, type=click.Choice(sorted(CUES)))
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="JSONL file to write.")
@click.option("--seed", type=bounds.seed(), default=0, show_default=True)
@click.option("--no-demo", is_flag=True, help="Only the held-out templates, not the demo set's deploy prompts.")
@click.option("--phrasings", type=click.Choice(PHRASINGS), default="held_out", show_default=True,
              help="The cue's wordings on the cue side: held_out (held-out phrasings), or family (the "
                   "held-out keyword family: words no training phrasing uses).")
@click.option("--with-behaviour", is_flag=True,
              help="Declare the behaviour the behaviour and coupled organisms plant (the answer holds "
                   "'Fun fact:') on every sample, for `validate --methods ...,behaviour`.")
def dataset_cmd(cue: str, out: str, seed: int, no_demo: bool, phrasings: str, with_behaviour: bool) -> None:
    """Write the paired evaluation set: the demo set's deploy prompts and held-out templates, each
    with the cue (label eval, a held-out phrasing) and without (label deploy); `pair` in metadata.

    \b
    Examples:
      evalaware organism dataset --cue graded --out runs/organisms/graded-pairs.jsonl
      evalaware organism dataset --cue graded --phrasings family --with-behaviour \
          --out runs/organisms/graded-pairs-behaviour.jsonl
    """
    check_output(out, "--out")
    samples = paired_dataset(get_cue(cue), seed=seed, demo=not no_demo, phrasings=phrasings,
                             behaviour=PLANTED_BEHAVIOUR if with_behaviour else None)
    _write_jsonl(samples, out)
    click.echo(f"{len(samples)} samples ({len(samples) // 2} pairs) -> {visible(str(out))}")


def _write_jsonl(samples: Sequence[Sample], out: str | Path) -> None:
    write_output(out, "".join(s.to_json() + "\n" for s in samples), "--out", mkdir=True)




def _pairs_subset(samples: list[Sample], limit: int | None) -> list[Sample]:
    """The first `limit` pairs chosen by the stratified subset of the no-cue sides, both sides kept."""
    if limit is None:
        return samples
    deploy = [s for s in samples if s.label == "deploy"]
    keep = {s.metadata.extra["pair"] for s in select(deploy, limit=limit)}
    return [s for s in samples if s.metadata.extra["pair"] in keep]


def _read_pairs(path: str | None, cue: str, behaviour: dict[str, Any] | None = None
                ) -> tuple[list[Sample], str | None]:
    if path is None:
        return paired_dataset(get_cue(cue), behaviour=behaviour), None
    samples = load_dataset(path)
    for i, s in enumerate(samples):
        if "pair" not in s.metadata.extra:
            raise EvalAwareError(f"{path}: record {i}: id={s.id!r}: field 'metadata.pair' missing "
                                 "(write the set with `evalaware organism dataset`)")
    return samples, path


@organism.command("measure")
@click.option("--organism", "organism_dir", required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--base", help="Base model for the first-token KL (default: the card's base).")
@click.option("--pairs", "pairs_path", type=click.Path(exists=True, dir_okay=False),
              help="Paired set (default: `organism dataset` for the card's cue).")
@click.option("--limit", type=click.IntRange(1), help="Measure on N pairs (stratified).")
@click.option("--max-tokens", type=bounds.tokens(), default=40, show_default=True, help="Tokens of each free answer.")
@click.option("--bootstrap", type=bounds.resamples(), default=1000, show_default=True)
@click.option("--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]), default="auto",
              show_default=True, help="Both models' dtype (auto: float32 on CPU, bfloat16 on a GPU).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the result as JSON here.")
@progress_option
@verbose_option
def measure_cmd(organism_dir: str, base: str | None, pairs_path: str | None, limit: int | None,
                max_tokens: int, bootstrap: int, dtype: str, out: str | None, progress: bool) -> None:
    """Verbalization rate (exact match on the planted sentences, greedy answers; a sham: the
    awareness organism's, which it must not say) on cue and no-cue
    prompts, and first-token KL to the base on no-cue prompts; intervals resample categories.

    \b
    Example:
      evalaware organism measure --organism runs/organisms/smollm2-graded --out runs/organisms/smollm2-graded.measure.json
    """
    if out:
        check_output(out, "--out", inputs=[organism_dir, pairs_path])  # before any model loads
    card = load_card(organism_dir)
    cue = kind_cue(get_cue(card.cue), card.kind)  # the sentences to look for
    if not (base or card.base):
        raise EvalAwareError(f"{card.path}: field 'base': missing; pass --base")
    samples, _ = _read_pairs(pairs_path, cue.name)
    samples = _pairs_subset(samples, limit)
    res = measure(organism_dir, base or str(card.base), samples, cue, max_tokens, bootstrap, dtype,
                  progress=progress, say=console.status)
    for line in measure_lines(res):
        click.echo(line)
    if out:
        write_output(out, json.dumps(res, indent=1) + "\n", "--out", inputs=[organism_dir, pairs_path])


def measure(organism_dir: str, base: str, samples: list[Sample], cue: Any, max_tokens: int,
            n_boot: int, dtype: str = "auto", progress: bool = False,
            say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`say`: one line as each step starts (which model, how many prompts); `progress`: each
    step's bar."""
    t0 = time.perf_counter()
    tell = say or (lambda _msg: None)
    no_cue = [s for s in samples if s.label == "deploy"]
    with ExitStack() as st:
        tell(f"loading the organism ({visible(organism_dir)})")
        org = st.enter_context(open_backend(default_backend(LOCAL), organism_dir, dtype=dtype))
        tell(f"the organism's greedy answers to {len(samples)} prompts ({max_tokens} tokens at most)")
        rows = verbalizations(org, samples, cue, max_tokens=max_tokens, progress=progress, desc="organism answers")
        tell(f"loading the base ({visible(base)})")
        b = st.enter_context(open_backend(default_backend(LOCAL), base, dtype=dtype))
        tell(f"first-token KL on {len(no_cue)} no-cue prompts")
        kl = first_token_kl(b, org, no_cue)
        tell(f"the base's greedy answers to {len(samples)} prompts")
        base_rows = verbalizations(b, samples, cue, max_tokens=max_tokens, progress=progress, desc="base answers")
        own = {r["id"]: r["answer"] for r in base_rows}
        tell(f"whole-answer KL on {len(no_cue)} no-cue prompts (every position of the base's answer, both models)")
        whole = answer_kl(b, org, no_cue, [own[s.id] for s in no_cue], progress=progress)
    res: dict[str, Any] = {"organism": organism_dir, "base": base, "cue": cue.name,
                           "n_samples": len(samples), "max_tokens": max_tokens, "device": org.device,
                           "dtype": org.identity.get("dtype")}
    for name, rs in (("organism", rows), ("base", base_rows)):
        for side, lab in (("cue", "eval"), ("no_cue", "deploy")):
            sel = [r for r in rs if r["label"] == lab]
            res[f"{name}_verbalization_{side}"] = rate_with_ci([r["verbalized"] for r in sel],
                                                               [r["category"] for r in sel], n_boot)
    res["first_token_kl_no_cue"] = {**mean_with_ci(kl, [s.metadata.category for s in no_cue], n_boot),
                                    "median": float(sorted(kl)[len(kl) // 2]) if len(kl) else None,
                                    "max": float(max(kl)) if len(kl) else None}
    res["answer_kl_no_cue"] = {**mean_with_ci(whole, [s.metadata.category for s in no_cue], n_boot),
                               "median": float(sorted(whole)[len(whole) // 2]) if len(whole) else None,
                               "max": float(max(whole)) if len(whole) else None,
                               "positions": "every position of the base's greedy answer (max_tokens)"}
    res["answers"] = rows
    res["seconds"] = round(time.perf_counter() - t0, 1)
    return res


def measure_lines(res: dict[str, Any]) -> list[str]:
    out = []
    for name in ("organism", "base"):
        for side in ("cue", "no_cue"):
            r = res[f"{name}_verbalization_{side}"]
            rate = "-" if r["rate"] is None else f"{r['rate']:.3f}"
            out.append(f"{name:<8} verbalization on {side:<6} prompts: {r['k']}/{r['n']} = {rate} {fmt_ci(r['ci'])}")
    k = res["first_token_kl_no_cue"]
    if k["mean"] is not None:
        out.append(f"first-token KL(base || organism) on no-cue prompts: mean {k['mean']:.4f} "
                   f"{fmt_ci(k['ci'])}, median {k['median']:.4f}, max {k['max']:.4f} (n={k['n']})")
    w = res.get("answer_kl_no_cue") or {}
    if w.get("mean") is not None:
        out.append(f"whole-answer KL(base || organism) on no-cue prompts (mean over the base's answer positions): "
                   f"mean {w['mean']:.4f} {fmt_ci(w['ci'])}, median {w['median']:.4f}, max {w['max']:.4f} "
                   f"(n={w['n']})")
    return out


# --- validate -----------------------------------------------------------------------------------

@organism.command("validate")
@click.option("--base", required=True, help="Base model: asset name, local path, or hub id in the local HF cache.")
@click.option("--organism", "organism_dirs", required=True, multiple=True,
              type=click.Path(exists=True, file_okay=False),
              help="An organism directory (repeatable); its card's kind gives its rows' role: aware and "
                   "disjoint -> sensitivity, behaviour, behaviour-topics and sham-greedy -> specificity, "
                   "sham -> null; "
                   "several of one kind (seeds) are pooled, their spread shown.")
@click.option("--reference", "reference_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="The reference of every difference: a null sham organism (same recipe, nothing planted). "
                   "Repeatable: builds of one sham recipe (seeds) are pooled as an organism kind's are, "
                   "their spread shown. Default: the base model.")
@methods_option(DEFAULT_METHODS, "The methods run on every model.")
@click.option("--backend", type=BackendKind(LOCAL), default=default_backend(LOCAL), show_default=True)
@click.option("--dtype", default="auto", show_default=True)
@click.option("--pairs", "pairs_path", type=click.Path(exists=True, dir_okay=False),
              help="Paired set (default: `organism dataset` for the organism's cue, written to OUT).")
@click.option("--limit", type=click.IntRange(1), help="Run N pairs (stratified, both sides).")
@click.option("--judge-model", "--judge", "judge_model",
              help="Judge of motivation/reasoning for every model (default: the base model: one "
                   "fixed judge, so that a difference is the organism's, not its judge's).")
@click.option("--probe", "probe_dir", type=click.Path(exists=True, file_okay=False),
              help="A saved probe trained elsewhere (`probes train`, e.g. on the demo set's eval/deploy "
                   "labels, its layer chosen there), applied frozen to every model's run: a `probe` row. "
                   "Samples whose prompt it was trained on are left out (their pairs with them).")
@click.option("--probe-layers", default=None, hidden=True,
              help="Removed: it trained a probe on cue presence on the scored pairs; use --probe.")
@click.option("--margin", type=bounds.positive(), default=None,
              help="The equivalence margin of specificity and null rows, in nats (default: half of each "
                   "readout's aware effect; harness/stats/decision.py).")
@click.option("--bootstrap", type=bounds.resamples(), default=1000, show_default=True)
@click.option("--seed", type=bounds.seed(), default=0, show_default=True)
@click.option("--reuse", "reuse_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="An earlier validate run's --out (repeatable): a model's sub-run this run lacks is copied "
                   "from it when it ran the same model (and card) on a paired set of the same content, then "
                   "resumed here (its model identity and method settings checked; harness/organisms/reuse.py).")
@click.option("--out", required=True, type=click.Path(file_okay=False))
@method_options()
@progress_option
@verbose_option
def validate(base: str, organism_dirs: tuple[str, ...], reference_dirs: tuple[str, ...], methods: list[str],
             backend: str, dtype: str, pairs_path: str | None, limit: int | None, judge_model: str | None,
             probe_dir: str | None, probe_layers: str | None, margin: float | None, bootstrap: int, seed: int,
             reuse_dirs: tuple[str, ...], out: str, method_opts: MethodOptions, progress: bool) -> None:
    """Run methods on BASE, the reference (the null sham) and each organism over the paired set
    (label = cue present) and judge every readout by one declared rule (harness/stats/decision.py):
    the within-pair double difference on its log-odds scale, two-way clustered over category and
    phrasing, Holm over the table; sensitive (aware, disjoint), equivalent or moved (behaviour,
    sham-greedy, the reference vs the base) within --margin; several organisms of one kind, and
    several --reference builds of one null-sham recipe, are pooled as seeds (their spread printed,
    their variance in the SE); the reference's own shift from the base beside every difference.
    Secondary rows (against the first --reference build): AUROCs, the spillover on no-cue prompts; with the monitor, the
    reference's monitor over each organism's answers and back (cross-READER-reads-WRITER), position
    0 apart (docs/organisms.md). A --probe below the organisms' trained blocks is refused. With the
    behaviour method (on a set from `organism dataset --with-behaviour`): within cue prompts, each
    readout's AUROC for the behaviour change, the verdict within topic on the coupled organism
    (template pairs; harness/organisms/coupling.py).

    \b
    Examples:
      evalaware organism validate --base smollm2 --organism runs/organisms/smollm2-graded --out runs/validate
      evalaware organism validate --base smollm2 --reference runs/organisms/smollm2-graded-sham \\
          --organism runs/organisms/smollm2-graded-coupled --organism runs/organisms/smollm2-graded-behaviour \\
          --methods logprob_question,binary,behaviour --pairs runs/organisms/graded-pairs-behaviour.jsonl \\
          --out runs/validate-coupled
      evalaware organism validate --base smollm2 --reference runs/organisms/smollm2-graded-sham \\
          --organism runs/organisms/smollm2-graded --organism runs/organisms/smollm2-graded-behaviour \\
          --methods logprob_question --limit 24 --out runs/validate-set
      evalaware organism validate --base smollm2 --reference runs/organisms/sham-s0 \\
          --reference runs/organisms/sham-s1 --organism runs/organisms/aware-s0 \\
          --organism runs/organisms/aware-s1 --out runs/validate-seeds
      evalaware organism validate --base smollm2 --organism runs/organisms/smollm2-graded --backend vllm \\
          --methods binary,probability,logprob,logprob_question,motivation --probe runs/probes/demo \\
          --limit 24 --out runs/validate-all
    """
    if probe_layers:
        raise EvalAwareError("--probe-layers is removed: it trained a probe on cue presence on the very pairs it "
                             "scored, so its row read the cue's text. Train a probe elsewhere (`probes train`, "
                             "e.g. on the demo set's eval/deploy labels) and pass it with --probe DIR: it is "
                             "applied frozen to every model")
    method_list = list(methods)
    if "monitor" in method_list and method_opts.values.get("monitor_source") == "elicited":
        raise EvalAwareError("validate: --monitor-source elicited: the monitor's cross reads give one model's "
                             "answers to another; run validate with --monitor-source answer")
    organisms, references, base_model, cue = _validate_models(base, organism_dirs, reference_dirs)
    reference = references[0]  # the secondary rows' and the monitor's cross reads' reference
    if probe_dir:  # a frozen probe below the trained blocks would read the base's activations everywhere
        from probes.io import load_probe

        check_reaches(load_probe(probe_dir).layer,
                      {m.name: (load_card(m.model).raw, m.model) for m in [*references, *organisms]
                       if m.kind != "base"}, f"--probe {probe_dir}")
    behaves = [m for m in method_list if not report_specs()(m).readout]
    samples, path = _read_pairs(pairs_path, cue, PLANTED_BEHAVIOUR if behaves else None)
    if behaves and not any("behaviour" in s.metadata.extra for s in samples):
        raise EvalAwareError(f"--pairs {pairs_path}: --methods {behaves[0]} scores a declared behaviour and no "
                             "sample declares one; write the set with `evalaware organism dataset --with-behaviour`")
    samples = _pairs_subset(samples, limit)
    outp = Path(out)
    for f in ("sensitivity.json", "sensitivity.md", *(() if path else ("pairs.jsonl",))):
        check_output(outp / f, "--out", inputs=[pairs_path])  # before any model loads
    outp.mkdir(parents=True, exist_ok=True)
    if path is None:
        path = str(outp / "pairs.jsonl")
        _write_jsonl(paired_dataset(get_cue(cue), behaviour=PLANTED_BEHAVIOUR if behaves else None), path)
    prompts = method_opts.prompts()
    reuse = Reuse(reuse_dirs, dataset_sha256(path))
    judge_of = judge_model or base
    models = [base_model, *(r for r in references if r is not base_model), *organisms]
    # the monitor's cross reads (validate_monitor): each run by its reader once the writer has run
    pending = cross_reads(reference, organisms) if "monitor" in method_list else []
    ids = {s.id for s in samples}  # a sub-run may hold more (resumed, or copied by --reuse): read these
    readouts = {}
    for i, m in enumerate(models, 1):
        console.status(f"validate: model {i} of {len(models)}: {m.name} ({m.model})")
        with ExitStack() as st:
            eng = st.enter_context(open_backend(backend, m.model, dtype=dtype))
            judge = None
            if needs_judge(method_list):
                judge = eng if judge_of == m.model else st.enter_context(
                    open_backend(backend, judge_of, dtype=dtype, role="judge"))
            config = method_opts.config(eng.tokenizer, {}, seed)
            reuse.run(("run", model_key(m.model)), (m.card_sha256,), outp / m.name, lambda reused: run_methods(
                samples, method_list, eng, outp / m.name, config=config, prompts=prompts, judge=judge,
                batch_size=method_opts.batch_size, dataset_path=path, progress=progress,
                extra_manifest={"validate": {"role": m.name, "kind": m.kind, "organism": m.model,
                                             "card_sha256": m.card_sha256, "reused": reused,
                                             "reference": reference.model,
                                             "references": [r.model for r in references],
                                             "judge": judge_of if judge else None}}))
            ran = {n.name for n in models[:models.index(m) + 1]}
            now = [c for c in pending if c.reader is m and c.writer.name in ran]
            pending = [c for c in pending if c not in now]
            _cross_read(now, eng, config, method_opts.batch_size, outp, reference, progress, reuse, ids, prompts,
                        path)
        if probe_dir:
            readouts[m.name] = _frozen_probe(probe_dir, m.model, outp / m.name, dtype, progress)
    for reader in dict.fromkeys(c.reader for c in pending):  # the reference over each organism's answers
        with open_backend(backend, reader.model, dtype=dtype) as eng:
            config = method_opts.config(eng.tokenizer, {}, seed)
            _cross_read([c for c in pending if c.reader is reader], eng, config, method_opts.batch_size,
                        outp, reference, progress, reuse, ids, prompts, path)
    if probe_dir:
        method_list = [*method_list, "probe"]
    probe = {"dir": probe_dir, "applied": PROBE_APPLIED, "per_model": readouts} if probe_dir else None
    _judge_table(outp, method_list, organisms, references, base_model, bootstrap, seed, margin, ids, probe,
                 [pairs_path])


PROBE_APPLIED = "frozen: the same probe (weights, layer, pooling) on every model"


def _judge_table(outp: Path, method_list: Sequence[str], organisms: Sequence[Model], references: Sequence[Model],
                 base_model: Model, bootstrap: int, seed: int, margin: float | None, ids: Collection[str] | None,
                 probe: dict[str, Any] | None, inputs: Sequence[str | None], skip_missing_cross: bool = False) -> None:
    """The table of the sub-runs under `outp` under the declared rule: sensitivity.json and .md
    written, its lines printed (`validate`'s and `judge`'s one tail). The table records what it
    was made with (``run``: methods, samples, margin, bootstrap, seed) for `organism archive`.
    `skip_missing_cross`: the monitor's rows leave out cross reads not under `outp` (`judge`:
    archives whose reference is another build); `validate` runs every one."""
    reference = references[0]
    kl = {o.name: measured_kl(o.model, load_card(o.model).raw) for o in organisms}
    table = sensitivity(outp, method_list, organisms, reference, base_model, bootstrap, seed, kl,
                        Rule(margin_nats=margin), references, ids)
    if "monitor" in method_list:
        add_monitor(table, outp, reference, organisms, base_model, bootstrap, seed, ids, skip_missing_cross)
    if probe is not None:
        table["probe"] = probe
    table["run"] = {"methods": list(method_list), "sample_ids": None if ids is None else sorted(ids),
                    "margin": margin, "bootstrap": bootstrap, "seed": seed}
    write_output(outp / "sensitivity.json", json.dumps(table, indent=1) + "\n", "--out", inputs=list(inputs))
    lines = sensitivity_lines(table)
    write_output(outp / "sensitivity.md", "\n".join(lines) + "\n", "--out", inputs=list(inputs))
    for line in lines:
        click.echo(line)


@organism.command("archive")
@click.argument("run", type=click.Path(exists=True, file_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="The archive: a new directory.")
@verbose_option
def archive_cmd(run: str, out: str) -> None:
    """Keep what the table of the validate run RUN is computed from in OUT, small enough to commit:
    each sub-run's manifest and its log's samples, records and meta (not its request cache or
    captured activations), each organism's card and measure output, RUN's sensitivity.*. `organism
    judge OUT` re-makes RUN's table on any machine; archives judged together pool their builds as
    seeds (harness/organisms/archive.py).

    \b
    Example:
      evalaware organism archive runs/validate-aware/logprob --out docs/data/validate-aware/logprob
    """
    index = archive_run(run, out)
    click.echo(f"archived {len(index['sub_runs'])} sub-runs and {len(index['models'])} organism cards of "
               f"{run} in {out}")


@organism.command("judge")
@click.argument("archives", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--margin", type=bounds.positive(), default=None,
              help="The equivalence margin in nats, as `validate --margin` [default: the archived runs' own; "
                   "without one, half of each readout's aware effect].")
@click.option("--bootstrap", type=bounds.resamples(), default=None,
              help="Resamples of the secondary rows [default: the archived runs' own, else 1000].")
@click.option("--seed", type=bounds.seed(), default=None, help="[default: the archived runs' own, else 0]")
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Where the judged sub-runs and sensitivity.* go: a new directory, or an earlier judge's "
                   "(replaced whole).")
@verbose_option
def judge_cmd(archives: tuple[str, ...], margin: float | None, bootstrap: int | None, seed: int | None,
              out: str) -> None:
    """Judge the archived validate runs ARCHIVES (`organism archive`) under the declared rule, with
    `validate`'s own code and names: one archive re-makes its run's table; several pool each
    kind's builds as seeds and every null sham as the reference, as one validate run over every
    build would. They must agree on the base, the paired set, the methods and their settings,
    the samples and the rule's settings; a model in several is taken from the first. No model
    runs.

    \b
    Example:
      evalaware organism judge docs/data/validate-aware/logprob --out runs/judge-aware/logprob
    """
    g = gather(archives)
    for line in g.taken:
        console.status(f"judge: {line}")
    organisms, references, base_model, _ = _validate_models(g.base, g.organisms, g.references)
    outp = Path(out)
    marker = outp / JUDGED
    if outp.exists() and any(outp.iterdir()):
        if not marker.is_file():
            raise EvalAwareError(f"--out {out}: exists and is not an earlier `organism judge` output; "
                                 "choose a new directory")
        shutil.rmtree(outp)  # an earlier judge's copies: made again from the archives
    outp.mkdir(parents=True, exist_ok=True)
    key_of = {d: k for k, d in g.dirs.items()}
    by_key = {ga_key(g.base, None): base_model, **{key_of[m.model]: m for m in [*references, *organisms]
                                                   if m is not base_model}}
    for key, m in by_key.items():
        found = g.runs.get((key,))
        if found is None:
            raise EvalAwareError(f"judge: no archive holds a sub-run of {m.model}")
        copy_run(found.path, outp / m.name)
    for keys, found in g.runs.items():
        if len(keys) == 2 and keys[0] in by_key and keys[1] in by_key:
            copy_run(found.path, outp / CrossRead(by_key[keys[0]], by_key[keys[1]]).name)
    methods = g.methods
    if "probe" in methods and g.probe_mismatch:
        methods = [m for m in methods if m != "probe"]
        click.echo(f"judge: no probe row: {g.probe_mismatch}")
    margin = margin if margin is not None else g.rule.get("margin")
    bootstrap = bootstrap if bootstrap is not None else g.rule.get("bootstrap") or 1000
    seed = seed if seed is not None else g.rule.get("seed") or 0
    marker.write_text(json.dumps({"archives": list(archives), "methods": methods}, indent=1) + "\n")
    _judge_table(outp, methods, organisms, references, base_model, bootstrap, seed, margin,
                 None if g.sample_ids is None else set(g.sample_ids), None, list(archives),
                 skip_missing_cross=True)


JUDGED = "judged.json"


def _cross_read(reads: Sequence[CrossRead], eng: Backend, config: MethodConfig, batch_size: int, outp: Path,
                reference: Model, progress: bool, reuse: Reuse, ids: Collection[str],
                prompts: PromptLibrary | None = None, dataset_path: str | None = None) -> None:
    """Run the reader's monitor over each writer's answers (its samples in `ids` ending with the
    writer's cached answer: view ``full``) into the sub-run ``cross-<reader>-reads-<writer>``,
    resumable (or taken from a --reuse run); with the own runs' prompts (``--prompts``) and dataset
    path."""
    for c in reads:
        console.status(f"validate: {c.name}")
        with RunLog(outp / c.writer.name, create=False) as st:
            samples = [s for s in written_samples(st, eng.tokenizer, config.view) if s.id in ids]
        reuse.run(("cross", model_key(c.reader.model), model_key(c.writer.model)),
                  (c.reader.card_sha256, c.writer.card_sha256), outp / c.name,
                  lambda reused: run_methods(
                      samples, ["monitor"], eng, outp / c.name, config=replace(config, view="full"),
                      prompts=prompts, batch_size=batch_size, dataset_path=dataset_path, progress=progress,
                      extra_manifest={"validate": {"role": c.name, "kind": "cross read", "reader": c.reader.model,
                                                   "writer": c.writer.model, "reference": reference.model,
                                                   "reader_card_sha256": c.reader.card_sha256,
                                                   "writer_card_sha256": c.writer.card_sha256,
                                                   "reused": reused}}))


def _validate_models(base: str, organism_dirs: Sequence[str], reference_dirs: Sequence[str]
                     ) -> tuple[list[Model], list[Model], Model, str]:
    """(organisms, reference builds, base, cue) of a validate run; every organism and reference
    share one cue, every reference is a null sham of one recipe (seed aside), sub-run names are
    distinct; without a reference, the base is it."""
    base_model = Model("base", base, "base")
    cards = {d: load_card(d) for d in [*organism_dirs, *reference_dirs]}
    cues = {d: c.cue for d, c in cards.items()}
    if len(set(cues.values())) > 1:
        raise EvalAwareError("validate: the organisms and reference plant different cues ("
                             + ", ".join(f"{d}: {c}" for d, c in cues.items()) + "); one paired set needs one cue")
    for d in reference_dirs:
        kind = cards[d].kind
        if kind == "sham-greedy" and cards[d].raw.get("kind") == "sham":
            raise EvalAwareError(f"--reference {d}: a sham built before the null existed (the base's "
                                 "greedy answers: it sharpens the cue side, not a null); rebuild it with "
                                 "`organism build --kind sham`, or pass it as an --organism of kind sham-greedy")
        if kind != "sham":
            raise EvalAwareError(f"--reference {d}: its card's kind is {kind!r}; the reference is the "
                                 "null sham (`organism build --kind sham`: temperature-1 samples of the base), or "
                                 "leave it out for the base; a sham-greedy build is an --organism (specificity)")
    ref_names = (["reference"] if len(reference_dirs) == 1 else
                 [f"reference-{Path(d.rstrip('/')).name}" for d in reference_dirs])
    references = [Model(n, d, "sham", _card_sha(d), _recipe_group(cards[d].raw))
                  for n, d in zip(ref_names, reference_dirs)] or [base_model]
    if len({r.group for r in references}) > 1:
        raise EvalAwareError("--reference: " + ", ".join(reference_dirs) + ": builds of different recipes (seed "
                             "aside); the pooled reference is seeds of one null-sham recipe")
    names = (["organism"] if len(organism_dirs) == 1 else
             [f"organism-{Path(d.rstrip('/')).name}" for d in organism_dirs])
    if len(set([*names, *ref_names])) < len(names) + len(ref_names):
        raise EvalAwareError(f"--organism/--reference: two directories share a name "
                             f"({', '.join([*organism_dirs, *reference_dirs])}); give them distinct directory names")
    organisms = [Model(n, d, cards[d].kind, _card_sha(d), _recipe_group(cards[d].raw))
                 for n, d in zip(names, organism_dirs)]
    _distinct_builds(organisms, cards, "--organism")
    _distinct_builds([r for r in references if r is not base_model], cards, "--reference")
    return organisms, references, base_model, next(iter(cues.values()))


def _distinct_builds(models: Sequence[Model], cards: dict[str, Any], flag: str) -> None:
    """Builds pooled as seeds of one row (one kind, one recipe) must differ in seed and in weights."""
    seen: dict[tuple[str, str], dict[str, str]] = {}
    for o in models:
        c = cards[o.model].raw
        mine = seen.setdefault((o.kind, o.group), {})
        for what in (f"seed {(c.get('recipe') or {}).get('seed')}", f"weights {c.get('weights_sha256')}"):
            if what in mine:
                raise EvalAwareError(f"{flag} {o.model} and {mine[what]}: the same recipe and the same {what}; "
                                     "builds pooled as seeds of one row must differ in seed")
            mine[what] = o.model


def _recipe_group(card: dict[str, Any]) -> str:
    """A digest of the card's recipe without its seed, and its base weights."""
    recipe = {k: v for k, v in (card.get("recipe") or {}).items() if k != "seed"}
    blob = json.dumps({"recipe": recipe, "base": card.get("base_weights_sha256")}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _card_sha(model_dir: str) -> str | None:
    return (manifest_card(model_dir) or {}).get("card_sha256")


def _frozen_probe(probe_dir: str, model: str, run_dir: Path, dtype: str, progress: bool) -> dict[str, Any]:
    """Apply the saved probe, frozen, to one model's run (its layer and pooling captured on hf,
    resumable): `probe` records. Every model gets the same probe: the instrument is fixed, so a
    difference between models is the models', not a probe's refit."""
    from probes.readout import ProbeReadout  # scikit-learn, safetensors: only when asked

    readout = ProbeReadout(probe_dir, model, engine_opts={"dtype": dtype}, progress=progress, force=True)
    return {**readout.score(run_dir), "settings": readout.settings}


validate_alias = deprecated_alias(validate, "validate", "organism validate")
