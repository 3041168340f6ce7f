"""The methods' options, each declared once: a field of :class:`MethodConfig` made with
:func:`option` is the whole declaration (name, type with its bounds, default, help, where a method
records it). Everything else is derived from it:

- the command line's flags (``--view``, ``--n-votes``, ...: ``method_options`` in
  ``evalaware/options.py``), their types, defaults and help, plus the methods that read each;
- MethodConfig's validation (the same bounds as the command line: :mod:`harness.core.bounds`);
- a method's recorded settings (:meth:`harness.methods.base.Method.settings`): the options the
  method declares it reads (``Method.options``) and no other, so a run directory refuses to resume
  after a change that matters to its methods, and only after such a change.

Where an option is recorded (``record``): ``"config"``, in the settings' ``config`` block, where
the report, ``intervene`` and ``activations capture`` read a run's view, person, token limits and
sampling; ``"top"``, at the top level of the settings (options of one family of methods);
``"own"``, by the method itself, as what it resolved the option to (the words themselves, the
sentence pairs with their sha256).

Run directories made before options were declared here recorded the whole ``config`` block
(:data:`LEGACY_CONFIG`) with every method; one that agrees on every option a method reads resumes
(``harness.methods.base.recorded_options``; docs/decisions.md, "Method options").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Mapping

import click

from harness.backends.base import SamplingParams
from harness.core import bounds
from harness.methods.sentences import load_pairs
from tokenization import TargetWords

VIEWS = ("first_turn", "full")
PERSONS = ("first", "third")
MONITOR_SOURCES = ("answer", "elicited")
RECORDS = ("config", "top", "own")
_SAME = object()  # MethodOption.cli_default: the command line's default is `default`
#: The ``config`` block every method recorded before issue 38 (all these, whichever it read).
LEGACY_CONFIG = ("view", "person", "n_votes", "answer_tokens", "probe_tokens", "judge_tokens",
                 "constrain", "temperature", "top_p", "seed")


@dataclass(frozen=True)
class MethodOption:
    """One option of the methods. `name` and `default` come from its :class:`MethodConfig` field.

    type: a click type (bounds from :mod:`harness.core.bounds`), None for a flag or free text.
    check: further validation of a given value (raises ValueError or EvalAwareError).
    cli_default: the command line's default where it differs from `default` (the token limits:
      None, then the model's kind decides, :mod:`harness.methods.token_limits`).
    cli: whether ``method_options`` adds a flag (``seed`` is each command's own ``--seed``).
    """

    help: str
    type: click.ParamType | None = None
    record: str = "config"
    check: Callable[[Any], Any] | None = None
    cli_default: Any = _SAME
    cli: bool = True
    name: str = ""
    default: Any = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def is_flag(self) -> bool:
        return isinstance(self.default, bool)

    @property
    def command_line_default(self) -> Any:
        return self.default if self.cli_default is _SAME else self.cli_default

    def validate(self, value: Any) -> None:
        """Refuse a value outside the option's type (ValueError naming the option) or its check."""
        if value is None and self.default is None:
            return
        if self.type is not None:
            try:
                self.type.convert(value, None, None)
            except click.BadParameter as e:
                raise ValueError(f"{self.name}: {e.message}") from None
        if self.check is not None:
            self.check(value)


def option(default: Any, help: str, type: click.ParamType | None = None, **kw: Any) -> Any:
    """A :class:`MethodConfig` field declaring one option (see :class:`MethodOption`)."""
    return field(default=default, metadata={"option": MethodOption(help, type, **kw)})


def _check_words(spec: str) -> None:
    TargetWords.parse(spec)


def _check_sentences(path: str | None) -> None:
    if path is not None:
        load_pairs(path)  # a malformed file is refused before any engine starts


_RATE = bounds.FiniteFloat(0, 1)


@dataclass(frozen=True)
class MethodConfig:
    """The methods' settings: one field per option, declared with :func:`option` (its help below
    is the command line's help, too). A method records the options it reads
    (``Method.options``); the manifest holds each method's settings."""

    view: str = option("first_turn", "Which part of the sample the model sees: first_turn (the "
                       "system prompt(s) and the first user message; the paper's default) or full "
                       "(the whole conversation).", click.Choice(VIEWS))
    person: str = option("first", "first: the model answers the sample, then is asked in the same "
                         "conversation; third: the transcript, with the model's answer, is shown "
                         "inside one user message (a method asking no question about a transcript "
                         "refuses it).", click.Choice(PERSONS))
    n_votes: int | None = option(None, "Questions per sample (default: one per prompt variant); vote "
                                 "k uses variant k mod n_variants and seed + k // n_variants (use "
                                 "--temperature > 0 for repeats to differ).", bounds.votes())
    answer_tokens: int = option(256, "Max tokens of the model's answer to the sample (and of an "
                                "elicited reasoning trace) [default: 256; 4096 for a model whose "
                                "template opens a reasoning block].", bounds.tokens(), cli_default=None)
    probe_tokens: int = option(160, "Max tokens of the answer to each probe question [default: 160; "
                               "reasoning model 2048].", bounds.tokens(), cli_default=None)
    judge_tokens: int = option(1024, "Max tokens of each judge verdict [default: 1024; reasoning "
                               "model 4096].", bounds.tokens(), cli_default=None)
    aware_tol: float = option(1e-4, "Skip multi-token variants that cannot move the aware P(eval) by "
                              "more than this (0: score every variant; see tokenization.scoring).",
                              bounds.FiniteFloat(0, 1, max_open=True), record="top")
    constrain: bool = option(False, "Engine-enforced answers: binary/probability give exactly their "
                             "tagged answer, judge verdicts follow their JSON schema (vllm: structured "
                             "outputs; hf: xgrammar; openai: a vLLM server's structured_outputs). "
                             "Recorded; labelled in reports.")
    min_coverage: float = option(0.01, "Samples whose target words get less probability than this "
                                 "have no prediction and no score (counted as no_signal).", _RATE,
                                 record="top")
    words: str = option("paper", "Target words: paper | extended | a JSON file {eval: [..], deploy: "
                        "[..]} | 'eval=a,b;deploy=c,d' (recorded as the words themselves).",
                        record="own", check=_check_words)
    aware_boundary: bool = option(True, "Aware scoring counts a word only when a word boundary "
                                  "follows it.", record="top")
    full_vocab: bool = option(False, "Read (and cache) the full next-token distribution instead of "
                              "the candidate ids + top-k (same scores, slower on vLLM).", record="top")
    min_label_mass: float = option(0.01, "A vote whose answer options get less probability than this "
                                   "at the label position gives no label probability to the score "
                                   "(withheld and counted; the parsed answer still votes).", _RATE,
                                   record="top")
    monitor_source: str = option("answer", "Read the model's answer (with its reasoning, if any) or "
                                 "the reasoning method's <think>-elicited trace (recorded as "
                                 "`source`).", click.Choice(MONITOR_SOURCES), record="own")
    monitor_sentences: str | None = option(None, "File of 'AWARENESS | PLACEBO' sentence pairs, one a "
                                           "line [default: harness/prompts/monitor/sentences_v1.txt] "
                                           "(recorded as the pairs and their sha256).",
                                           click.Path(dir_okay=False), record="own",
                                           check=_check_sentences)
    temperature: float = option(0.0, "Sampling temperature of the model's generations (0: greedy; "
                                "judges always decode greedily).", bounds.FiniteFloat(0, 10))
    top_p: float = option(1.0, "Nucleus sampling at temperature > 0.",
                          bounds.FiniteFloat(0, 1, min_open=True))
    seed: int = option(0, "Seed of sampled generations (temperature > 0).", cli=False)

    def __post_init__(self) -> None:
        for o in OPTIONS.values():
            o.validate(getattr(self, o.name))

    def params(self, max_tokens: int, seed_offset: int = 0) -> SamplingParams:
        greedy = self.temperature <= 0.0
        return SamplingParams(max_tokens=max_tokens, temperature=0.0 if greedy else self.temperature,
                              top_p=1.0 if greedy else self.top_p,
                              seed=0 if greedy else self.seed + seed_offset)

    def to_dict(self) -> dict[str, Any]:
        """Every option recorded in the ``config`` block, whichever method reads it (the block
        that run directories made before issue 38 hold for every method)."""
        return {o.name: getattr(self, o.name) for o in OPTIONS.values() if o.record == "config"}

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> "MethodConfig":
        """The run's configuration from its methods' recorded settings (``{method: settings}``):
        each option as the first method that records it has it, the default where none does
        (a method records only the options it reads: ``logprob`` no token limits)."""
        return cls(**shared_settings(settings))


def shared_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The union of the methods' ``config`` blocks (the first method recording an option wins),
    limited to the options declared now."""
    out: dict[str, Any] = {}
    for s in settings.values():
        block = s.get("config") if isinstance(s, dict) else None
        for k, v in (block or {}).items():
            if k in OPTIONS:
                out.setdefault(k, v)
    return out


def _declared() -> dict[str, MethodOption]:
    out = {}
    for f in fields(MethodConfig):
        o = f.metadata.get("option")
        if o is None:
            raise TypeError(f"MethodConfig.{f.name} is not declared with option()")
        if o.record not in RECORDS:
            raise TypeError(f"MethodConfig.{f.name}: record must be one of {RECORDS}, got {o.record!r}")
        out[f.name] = replace(o, name=f.name, default=f.default)
    return out


#: Every option by name, in MethodConfig's field order.
OPTIONS: dict[str, MethodOption] = _declared()


def legacy_block_agrees(old: Any, new: Mapping[str, Any]) -> bool:
    """Whether `old` is a ``config`` block as every method recorded it before issue 38
    (:data:`LEGACY_CONFIG`) that holds the values of `new` (the block of the options a method
    reads now): a run directory made then resumes under the same settings."""
    if not isinstance(old, dict) or set(old) != set(LEGACY_CONFIG) or not set(new) <= set(old):
        return False
    return all(json.dumps(old[k], sort_keys=True) == json.dumps(new[k], sort_keys=True) for k in new)
