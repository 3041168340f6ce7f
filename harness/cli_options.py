"""Click options shared by several commands (run, taxonomy, data validate, activations capture).

Each decorator adds its options and hands the command one ready value, so every command spells
and checks them the same way:

- :func:`verbose_option`: ``-v/--verbose``; the engines' logs are hidden without it
  (:mod:`harness.console`). Applied while the command line is parsed, before any engine exists.
- :func:`label_option`: ``--label eval|deploy`` for inputs without labels (.txt, Inspect logs;
  ``--text-label`` is a hidden alias kept for old scripts) and ``--label-field NAME`` (Inspect
  logs: the label from sample metadata); the command gets ``label`` and ``label_field`` (None when
  not given), to hand to :func:`read_samples`.
- :func:`limit_options`: ``--limit N`` (stratified, :mod:`harness.subset`) or ``--first N``
  (file order); the command gets ``subset``, a function from the loaded samples to the chosen ones.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import click

from . import console
from .sample import LABELS, Sample

F = Callable[..., Any]


def _set_verbosity(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    root = ctx.find_root()
    if value:
        root.meta["evalaware.verbose"] = True
    console.configure(bool(root.meta.get("evalaware.verbose")))


def verbose_option(f: F) -> F:
    return click.option("-v", "--verbose", is_flag=True, is_eager=True, expose_value=False,
                        callback=_set_verbosity,
                        help="Show the engines' own logs (vLLM, transformers) and warnings.")(f)


def label_option(f: F) -> F:
    @click.option("--label", type=click.Choice(LABELS), default=None,
                  help="Label of every sample of an input without labels (.txt, Inspect logs); default "
                       "eval; with --label-field, the label of samples without the field. A file with "
                       "its own labels refuses it.")
    @click.option("--text-label", type=click.Choice(LABELS), default=None, hidden=True)
    @click.option("--label-field", default=None, metavar="NAME",
                  help="Inspect logs: take each sample's label (eval/deploy, or a boolean, true = eval) "
                       "from this sample-metadata field.")
    @functools.wraps(f)
    def wrapper(*args: Any, label: str | None, text_label: str | None, **kwargs: Any) -> Any:
        if label and text_label and label != text_label:
            raise click.UsageError("--label and --text-label (its old name) disagree")
        return f(*args, label=label or text_label, **kwargs)
    return wrapper


def read_samples(path: str, label: str | None, label_field: str | None) -> list[Sample]:
    """A dataset's samples; its notes (e.g. samples an unfinished Inspect log lacks) go to stderr."""
    from .datasets import read_dataset

    got = read_dataset(path, label=label, label_field=label_field)
    for note in got.notes:
        click.echo(f"note: {note}", err=True)
    return got.samples


def limit_options(f: F) -> F:
    @click.option("--limit", type=click.IntRange(min=1), default=None, metavar="N",
                  help="Run N samples chosen deterministically: labels balanced, categories "
                       "spread, the same N samples on every re-run and for every method and "
                       "model (a smaller N's samples are among a larger N's).")
    @click.option("--first", type=click.IntRange(min=1), default=None, metavar="N",
                  help="Run the first N samples in file order instead.")
    @functools.wraps(f)
    def wrapper(*args: Any, limit: int | None, first: int | None, **kwargs: Any) -> Any:
        from .subset import select

        if limit is not None and first is not None:
            raise click.UsageError("give --limit (stratified) or --first (file order), not both")

        def subset(samples: Sequence[Sample]) -> list[Sample]:
            return select(samples, limit=limit, first=first)
        return f(*args, subset=subset, **kwargs)
    return wrapper
