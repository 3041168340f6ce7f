"""Click options shared by several commands (run, taxonomy, data validate, activations capture,
steer run).

Each decorator adds its options and hands the command one ready value, so every command spells
and checks them the same way:

- :func:`run_options`: the model, its backend and engine settings, the judge, the dataset (with
  :func:`label_option` and :func:`limit_options`), declared once for ``run``, ``taxonomy``,
  ``activations capture`` and ``steer run``; the command gets one :class:`RunOptions`, which
  checks the backends without loading them, opens them (:meth:`RunOptions.open_model`,
  :meth:`RunOptions.open_judge`) and loads the samples (:meth:`RunOptions.samples`).
  ``--dtype`` is always the model's dtype (``activations capture`` stores activations in
  ``--store-dtype``). Each backend's own flags come from its class's declared ``options``; a
  command names the capabilities it needs (``needs``), never backends (:class:`BackendKind`, its
  default the registry's ``default_backend(needs)``); the options are filed in help sections
  (:func:`evalaware.help.in_section`); ``-M key=value`` passes engine arguments the backend does not model to its engine.
- :func:`method_options`: the methods' settings, one flag per option declared in
  :mod:`harness.methods.config` (view, person, votes, sampling, token limits, ``--constrain``, the
  logprob methods' words and coverage gate, ...) that the command's methods read, with prompt
  overrides and batch size; the command gets one :class:`MethodOptions`, which builds the
  :class:`~harness.methods.MethodConfig`. Checked as the command line is parsed: a ``--prompts``
  directory's templates and, on a command with ``--methods``, a ``--person`` a method would not apply.
- :func:`methods_option`: ``--methods`` for every command that runs methods (comma-separated
  registered names or ``all``), checked as parsed; the command gets a list.
- :func:`progress_option`: ``--no-progress``; the command gets ``progress``.

- :func:`verbose_option`: ``-v/--verbose``; the engines' logs are hidden without it
  (:mod:`harness.core.console`). Applied while the command line is parsed, before any engine exists.
- :func:`label_option`: ``--label eval|deploy`` for inputs without labels (.txt, Inspect logs;
  ``--text-label`` is a hidden alias kept for old scripts) and ``--label-field NAME`` (Inspect
  logs: the label from sample metadata); the command gets ``label`` and ``label_field`` (None when
  not given), to hand to :func:`read_samples`.
- :func:`limit_options`: ``--limit N`` (stratified, :mod:`harness.data.subset`) or ``--first N``
  (file order); the command gets ``subset``, a function from the loaded samples to the chosen ones.
"""

from __future__ import annotations

import functools
import os
from contextlib import ExitStack
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Sequence

import click

from evalaware.help import in_section
from harness.core import bounds, console
from harness.core.errors import EvalAwareError
from harness.backends.base import Backend
from harness.data.readers import read_dataset, resolve_dataset
from harness.methods import REGISTRY, Method, MethodConfig, ordered_methods, readers
from harness.methods.base import check_person
from harness.methods.config import OPTIONS, MethodOption
from harness.methods.prompts import PromptLibrary
from harness.backends.declare import CAPABILITY_TEXT, BackendOption, architecture_args, parse_engine_args
from harness.backends.registry import (backend_names, backend_options, backend_spec, backends_with, check_backend,
                                       default_backend, open_backend, takes)
from harness.core.sample import LABELS, Sample
from harness.data.subset import select
from harness.methods.token_limits import PLAIN, default_token_limits
from harness.run.loop import check_methods, needs_judge

F = Callable[..., Any]


def _set_offline(_ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:  # read by huggingface_hub and transformers when they are first used
        os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"


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
        if limit is not None and first is not None:
            raise click.UsageError("give --limit (stratified) or --first (file order), not both")

        def subset(samples: Sequence[Sample]) -> list[Sample]:
            n = limit or first
            if n is not None and n > len(samples):
                flag = "--limit" if limit is not None else "--first"
                click.echo(f"note: {flag} {n}: the dataset has {len(samples)} samples; all are used",
                           err=True)
            return select(samples, limit=limit, first=first)
        return f(*args, subset=subset, **kwargs)
    return wrapper


def progress_option(f: F) -> F:
    @click.option("--no-progress", is_flag=True,
                  help="No progress bars; a run of methods logs its progress line (tasks done per method, "
                       "generated tokens/s) at each further 10% of its tasks and at least every 30 s instead.")
    @functools.wraps(f)
    def wrapper(*args: Any, no_progress: bool, **kwargs: Any) -> Any:
        return f(*args, progress=not no_progress, **kwargs)
    return wrapper


def _grouped(options: Sequence[Callable[[F], F]], into: str,
             build: Callable[[dict[str, Any]], Any]) -> Callable[[F], F]:
    """Add `options` to a command and hand it one value, ``build(their values)``, as `into`."""
    def deco(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            own = {k: kwargs.pop(k) for k in list(kwargs) if k in keys}
            return f(*args, **{into: build(own)}, **kwargs)
        keys: set[str] = set()
        for o in reversed(options):
            before = len(getattr(wrapper, "__click_params__", []))
            wrapper = o(wrapper)
            keys.update(p.name for p in wrapper.__click_params__[before:])  # type: ignore[attr-defined]
        return wrapper
    return deco


# --- the model, its engine, the judge, the dataset --------------------------------------------

SHARED_FLAGS = {"dtype": "--dtype", "tokenizer": "--tokenizer", "revision": "--revision",
                "trust_remote_code": "--trust-remote-code", "api_key": "--api-key-env"}
"""The flags of the engine settings every backend may take (named when ``-M`` repeats one)."""


@dataclass(frozen=True)
class EngineOptions:
    """Engine settings of the model under test (and of a separate judge where they apply):
    the shared ones, each backend's own (`specific`, by command-line parameter name:
    :func:`~harness.backends.registry.backend_options`) and the ``-M`` engine arguments
    (`engine_args`, the model under test only); :func:`harness.backends.registry.check_backend`
    refuses one given to a backend that does not take it."""

    dtype: str = "auto"
    tokenizer: str | None = None
    specific: dict[str, Any] = field(default_factory=dict)
    engine_args: dict[str, Any] = field(default_factory=dict)
    api_key_env: str = "OPENAI_API_KEY"
    trust_remote_code: bool = False
    enable_thinking: bool | None = None
    revision: str | None = None

    @property
    def api_key(self) -> str | None:
        """The key in the variable `--api-key-env` names. A variable named on purpose and not set
        is an error: falling back to OPENAI_API_KEY would send another key than the one meant."""
        key = os.environ.get(self.api_key_env)
        if key is None and self.api_key_env != "OPENAI_API_KEY":
            raise EvalAwareError(f"--api-key-env {self.api_key_env}: no such environment variable is set "
                                 f"(no other key is sent in its place)")
        return key

    @property
    def template_kwargs(self) -> dict[str, Any]:
        """Chat-template switches (recorded in the manifest)."""
        return {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}

    def value(self, o: BackendOption) -> Any:
        """A backend's own option as given (None: not given; a repeated flag as a list)."""
        v = self.specific.get(o.param)
        return (list(v) or None) if isinstance(v, (tuple, list)) else v

    def backend_opts(self, backend: str) -> dict[str, Any]:
        """The options :func:`harness.backends.registry.open_backend` takes for the model under test
        (the key is read only for a backend that takes one)."""
        return dict(dtype=self.dtype, tokenizer=self.tokenizer,
                    **{o.name: self.value(o) for o in backend_options()},
                    engine_args=self.engine_args or None,
                    api_key=self.api_key if takes(backend, "api_key") else None,
                    trust_remote_code=self.trust_remote_code or None, revision=self.revision)

    def given(self) -> list[str]:
        """The flags of the backend-specific options given a value."""
        return [o.flag for o in backend_options() if self.value(o) is not None]


@dataclass(frozen=True)
class RunOptions:
    """The model under test, its backend and engine settings, the judge and the dataset."""

    model: str | None
    backend: str
    engine: EngineOptions = field(default_factory=EngineOptions)
    needs: tuple[str, ...] = ()  # the capabilities the command needs of the model's backend
    judge_model: str | None = None
    judge_backend: str | None = None
    judge_base_url: str | None = None
    dataset: str | None = None
    label: str | None = None
    label_field: str | None = None
    subset: Callable[[Sequence[Sample]], list[Sample]] = lambda s: list(s)

    @property
    def dataset_path(self) -> str | None:
        return None if self.dataset is None else str(resolve_dataset(self.dataset))

    def samples(self, among: Callable[[list[Sample]], list[Sample]] | None = None) -> list[Sample]:
        """The dataset's samples that --limit/--first choose (from those `among` keeps)."""
        assert self.dataset is not None
        samples = read_samples(self.dataset, self.label, self.label_field)
        return self.subset(among(samples) if among else samples)

    def model_opts(self) -> dict[str, Any]:
        return self.engine.backend_opts(self.backend)

    def check_model(self) -> None:
        """Refuse, without loading it, a model or engine setting that cannot work."""
        check_backend(self.backend, str(self.model), self.model_opts(), flags=SHARED_FLAGS,
                      needs=self.needs)

    @property
    def separate_judge(self) -> bool:
        """A judge other than the model under test was asked for."""
        return bool(self.judge_model or self.judge_backend or self.judge_base_url) and not (
            (self.judge_model or self.model) == self.model
            and (self.judge_backend or self.backend) == self.backend and not self.judge_base_url)

    def judge_opts(self) -> dict[str, Any]:
        return dict(base_url=self.judge_base_url, api_key=self.engine.api_key, dtype=self.engine.dtype)

    def check_judge(self, needed: bool = True) -> bool:
        """Check a separate judge without loading it; True when one will be opened. With no
        method needing a judge, --judge-* options are noted as unused."""
        if not needed:
            if self.judge_model or self.judge_backend or self.judge_base_url:
                console.status("note: no method of this run needs a judge; the --judge-* options "
                               "are not used")
            return False
        if self.separate_judge:
            check_backend(self.judge_backend or self.backend, str(self.judge_model or self.model),
                          self.judge_opts(), flags={"base_url": "--judge-base-url",
                                                    "top_logprobs": "--top-logprobs"})
        return self.separate_judge

    def open_model(self, stack: ExitStack, **extra: Any) -> Backend:
        """The model under test, closed with `stack`."""
        return stack.enter_context(open_backend(self.backend, str(self.model), needs=self.needs,
                                                **{**self.model_opts(), **extra}))

    def open_judge(self, stack: ExitStack) -> Backend:
        """The separate judge, closed with `stack`."""
        return stack.enter_context(open_backend(self.judge_backend or self.backend,
                                                str(self.judge_model or self.model), role="judge",
                                                **self.judge_opts()))

    def judge_for(self, stack: ExitStack, engine: Backend, methods: Sequence[str]) -> Backend | None:
        """The judge of `methods`: the separate one (opened, closed with `stack`), else the model
        under test when a method needs a judge, else None."""
        if not needs_judge(methods):
            return None
        return self.open_judge(stack) if self.separate_judge else engine


class BackendKind(click.ParamType):
    """The type of ``--backend``: a registered backend's name. One without the capabilities the
    command needs (`needs`) is refused naming the capability (an EvalAwareError: one line, exit 2)."""

    name = "backend"

    def __init__(self, needs: Sequence[str] = ()) -> None:
        self.needs = tuple(needs)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + "|".join(backends_with(*self.needs)) + "]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value not in backend_names():  # read now: a backend registered after import counts
            self.fail(f"{value!r} is not one of {', '.join(map(repr, backend_names()))}", param, ctx)
        backend_spec(value, self.needs)
        return value


def _can(needs: Sequence[str]) -> str:
    """The capabilities `needs` in words ("capture hidden states")."""
    return " and ".join(CAPABILITY_TEXT.get(n, (n,))[0] for n in needs)


def _engine_option(o: BackendOption) -> Callable[[F], F]:
    """The click option of one backend's declared :class:`~harness.backends.declare.BackendOption`."""
    kw = dict(o.click)
    if kw.get("type") == "batch":
        kw["type"] = bounds.batch()
    if "choices" in kw:
        kw["type"] = click.Choice(list(kw.pop("choices")))
    if "min" in kw:
        kw["type"] = click.IntRange(kw.pop("min"))
    if "range" in kw:
        lo, hi = kw.pop("range")
        kw["type"] = bounds.FiniteFloat(lo, hi, min_open=True)
    return click.option(o.flag, o.param, help=o.help, **kw)


def run_options(*, model_required: bool = False, dataset: str | None = "required",
                judge: bool = True, needs: Sequence[str] = (), backend_default: str | None = None,
                model_help: str = ("Asset name (smollm2), local path, or hub id (org/name: downloaded on first "
                                   "use, or from the local HF cache only with --offline / HF_HUB_OFFLINE=1)."),
                engine_alias: bool = False) -> Callable[[F], F]:
    """--model, --backend (one with the capabilities `needs`; default: the registry's
    :func:`~harness.backends.registry.default_backend` for them, or None with `backend_default`
    saying in words where the command takes it from), the engine settings, -M,
    (`judge`) --judge-model/--judge-backend/--judge-base-url and (`dataset`: "required",
    "optional" or None) --dataset with --label, --label-field, --limit and --first; the command
    gets ``opts`` (:class:`RunOptions`)."""
    alias = " (`--engine` is its old name)" if engine_alias else ""
    model: list[Callable[[F], F]] = [
        click.option("--model", required=model_required, help=model_help),
        click.option("--backend", *(["--engine"] if engine_alias else []), "backend",
                     type=BackendKind(needs), default=None if backend_default else default_backend(needs),
                     show_default=not backend_default,
                     help=f"Inference backend{alias}" + (f"; one that can {_can(needs)}: "
                                                         f"{', '.join(backends_with(*needs))}." if needs else ".")
                     + (f" Default: {backend_default}." if backend_default else "")),
        click.option("--dtype", default="auto", show_default=True,
                     help="The model's dtype (auto: the checkpoint's); a separate judge gets it too."),
        click.option("--tokenizer", help="Tokenizer path if different from the model (required for openai)."),
        click.option("-M", "--engine-arg", "engine_args", multiple=True, metavar="KEY=VALUE",
                     help="An engine argument the backend does not model, passed as is (repeatable; "
                          "the value is JSON when it parses, else a string; recorded): vllm: to "
                          "LLM(...) (e.g. -M enable_prefix_caching=false); hf: to from_pretrained "
                          "(e.g. -M attn_implementation=eager); openai: refused (give them to `vllm "
                          "serve`). A setting the backend has a flag for, or one its engine does not "
                          "know, is refused; so is one that changes the architecture (layer counts, "
                          "hidden sizes, vocabulary) without --allow-architecture-change."),
        click.option("--allow-architecture-change", "allow_architecture", is_flag=True,
                     help="Let -M change the model's architecture (e.g. -M num_hidden_layers=2 runs a "
                          "truncated model): the weights then run under another shape; recorded in "
                          "the model's identity."),
        click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True,
                     help="openai: env var holding the key."),
        click.option("--trust-remote-code", is_flag=True, help="Allow model repos to run their own code."),
        click.option("--revision", help="Hub models: the branch, tag or commit to load (recorded)."),
        click.option("--offline", is_flag=True, is_eager=True, expose_value=False,
                     callback=_set_offline, help="Never download: a hub id must be in the local "
                     "Hugging Face cache (as with HF_HUB_OFFLINE=1)."),
        click.option("--enable-thinking/--disable-thinking", default=None,
                     help="Chat-template switch for reasoning models (Qwen3); recorded in the manifest."),
    ]
    opts = [in_section("Model and engine", *model),
            in_section("One backend's own engine settings", *map(_engine_option, backend_options()))]
    if judge:
        opts.append(in_section("Judge",
            click.option("--judge-model", "--judge", "judge_model",
                         help="Judge model (default: the model under test)."),
            click.option("--judge-backend", type=BackendKind(), help="Judge backend (default: --backend)."),
            click.option("--judge-base-url", help="Judge server URL (openai backend).")))
    if dataset:
        opts.append(in_section("Dataset", click.option("--dataset", required=dataset == "required",
                                                       help="Dataset file, directory of Inspect logs, or `demo`.")))
    engine_keys = {f.name for f in fields(EngineOptions)}
    own = {o.param for o in backend_options()}

    def build(v: dict[str, Any]) -> RunOptions:
        specific = {k: v.pop(k) for k in list(v) if k in own}
        engine_args = parse_engine_args(v.pop("engine_args"), allow_architecture=v.pop("allow_architecture"))
        if architecture_args(engine_args):
            console.status(f"note: -M {', '.join(architecture_args(engine_args))} changes the model's "
                           f"architecture (allowed by --allow-architecture-change; recorded)")
        eng = EngineOptions(specific=specific, engine_args=engine_args,
                            **{k: v.pop(k) for k in list(v) if k in engine_keys})
        return RunOptions(engine=eng, needs=tuple(needs), **v)

    def deco(f: F) -> F:
        g = _grouped(opts, "opts", build)
        if not dataset:
            return g(f)

        # --label/--limit (their own decorators) are collected into the same object
        @functools.wraps(f)
        def inner(*args: Any, opts: RunOptions, label: str | None, label_field: str | None,
                  subset: Callable[[Sequence[Sample]], list[Sample]], **kwargs: Any) -> Any:
            return f(*args, opts=replace(opts, label=label, label_field=label_field, subset=subset), **kwargs)
        return g(in_section("Dataset", label_option, limit_options)(inner))
    return deco


# --- the methods and their settings ----------------------------------------------------------

class MethodList(click.ParamType):
    """The type of ``--methods`` (:func:`methods_option`): comma-separated registered methods, or
    ``all``; converted to a checked list (unknown or repeated names refused before any engine
    starts), or to what one of the command's `keywords` stands for."""

    name = "methods"

    def __init__(self, keywords: dict[str, Any] | None = None,
                 among: Callable[[type[Method]], bool] | None = None) -> None:
        self.keywords = dict(keywords or {})
        self.among = among

    def every(self) -> list[str]:
        """What ``all`` stands for: the registered methods (those `among` keeps), in report order."""
        return [c.name for c in ordered_methods() if self.among is None or self.among(c)]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # already converted (a default given as a list)
        if value in self.keywords:
            return self.keywords[value]
        names: list[str] = []
        for m in (m.strip() for m in value.split(",")):
            names += self.every() if m == "all" else [m] if m else []
        return check_methods(names)  # an EvalAwareError: one line, exit 2


def methods_option(default: str, help: str = "", *, keywords: dict[str, Any] | None = None,
                   among: Callable[[type[Method]], bool] | None = None) -> Callable[[F], F]:
    """``--methods``, declared here once for every command that runs methods; the command gets
    ``methods``, a checked list of names (:class:`MethodList`). `help`: what the command does
    with them; the list of methods ``all`` stands for is added from the registry."""
    kind = MethodList(keywords, among)
    words = "".join(f", or {k}" for k in kind.keywords)
    text = (f"{help} " if help else "") + (f"Comma-separated, from: {', '.join(kind.every())}; or all "
                                           f"(each of them){words}.")
    return click.option("--methods", type=kind, default=default, show_default=True, help=text)


@dataclass(frozen=True)
class MethodOptions:
    """The methods' settings from the command line: the declared options given (`values`, by
    name: :data:`~harness.methods.config.OPTIONS`; a token limit not given is None and comes from
    the model's kind, :mod:`harness.methods.token_limits`), the prompt overrides, the batch size."""

    values: dict[str, Any] = field(default_factory=dict)
    prompts_dir: str | None = None
    batch_size: int = 16

    def prompts(self) -> PromptLibrary:
        return PromptLibrary(self.prompts_dir)

    def config(self, tokenizer: Any, template_kwargs: dict[str, Any], seed: int) -> MethodConfig:
        limits = default_token_limits(tokenizer, template_kwargs, **{k: self.values.get(k) for k in PLAIN})
        given = {k: v for k, v in self.values.items() if k not in PLAIN}
        return MethodConfig(**given, **limits, seed=seed)


def _check_method_options(m: MethodOptions) -> MethodOptions:
    """What the declarations check beyond the types (word lists, sentence files) and the
    ``--prompts`` directory's templates: before any engine starts (exit 2)."""
    for name, value in m.values.items():
        o = OPTIONS[name]
        if o.check is not None and value is not None:
            try:
                o.check(value)
            except ValueError as e:
                raise click.BadParameter(str(e), param_hint=o.flag) from None
    if m.prompts_dir is not None:
        m.prompts()  # the directory's templates are checked as it is read
    return m


def _method_option(o: MethodOption) -> Callable[[F], F]:
    """The click option of one declared method option; its help names the methods that read it."""
    users = readers(o.name)
    note = f" [methods: {', '.join(users)}]" if len(users) < len(REGISTRY) else ""
    if o.is_flag and o.default:
        return click.option(f"{o.flag}/--no-{o.flag[2:]}", o.name, default=True, show_default=True,
                            help=o.help + note)
    if o.is_flag:
        return click.option(o.flag, o.name, is_flag=True, help=o.help + note)
    default = o.command_line_default
    return click.option(o.flag, o.name, type=o.type, default=default, show_default=default is not None,
                        help=o.help + note)


def method_options(*, methods: Sequence[str] | None = None,
                   batch_help: str = "Samples per committed batch.") -> Callable[[F], F]:
    """The declared method options (:mod:`harness.methods.config`) that `methods` (default: every
    registered method) read, with ``--prompts`` and ``--batch-size``. The command gets
    ``method_opts`` (:class:`MethodOptions`), checked; with ``--methods``, a ``--person`` one of
    them would not apply is refused."""
    wanted = set(REGISTRY if methods is None else methods)
    opts: list[Callable[[F], F]] = [
        _method_option(o) for o in OPTIONS.values()
        if o.cli and any(o.name in REGISTRY[m].options for m in wanted)]
    opts += [
        click.option("--prompts", "prompts_dir", type=click.Path(file_okay=False),
                     help="Directory overriding prompt files."),
        click.option("--batch-size", type=bounds.batch(), default=16, show_default=True, help=batch_help),
    ]

    def build(v: dict[str, Any]) -> MethodOptions:
        return _check_method_options(MethodOptions(prompts_dir=v.pop("prompts_dir"),
                                                   batch_size=v.pop("batch_size"), values=v))
    grouped = _grouped(opts, "method_opts", build)

    def deco(f: F) -> F:
        @functools.wraps(f)
        def wrapper(*args: Any, method_opts: MethodOptions, **kwargs: Any) -> Any:
            if isinstance(kwargs.get("methods"), list):  # the command's --methods (MethodList)
                check_person(kwargs["methods"], method_opts.values.get("person", "first"))
            return f(*args, method_opts=method_opts, **kwargs)
        return grouped(wrapper)
    return deco
