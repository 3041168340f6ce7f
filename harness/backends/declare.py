"""What a backend declares about itself, and the checks made from it.

A backend's light spec (:class:`~harness.backends.specs.BackendSpec`, read without importing its
engine) declares:

- ``options``: its own settings (:class:`BackendOption`): the command line's flags, the refusal
  of a flag given to another backend and the recorded ``settings`` come from them;
- ``capabilities``: what it can do beyond the contract (:class:`~harness.backends.base.Capabilities`);
  commands ask for these (:data:`CAPABILITY_TEXT` says each in words), never for a backend's name;
- ``engine_args_to``: where ``-M key=value`` engine arguments it does not model go (None:
  refused), and ``sets_itself``: the engine arguments it sets itself (refused as ``-M``).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from harness.core.errors import EvalAwareError

BackendClass = Any  # a Backend subclass (harness.backends.base imports this module)
Spec = Any  # a harness.backends.specs.BackendSpec (it imports harness.backends.base, which imports this module)


@dataclass(frozen=True)
class BackendOption:
    """A setting one backend declares: `name` is its constructor keyword. `click` describes the
    flag's type without importing click (``min``, ``range``, ``choices``, ``multiple``, ``type``);
    `dest` is the command line's parameter name when it is not `name`, `flag` its flag when not
    ``--name``."""

    name: str
    help: str
    click: dict[str, Any] = field(default_factory=dict)
    dest: str | None = None
    flag_name: str | None = None

    @property
    def flag(self) -> str:
        return self.flag_name or "--" + self.name.replace("_", "-")

    @property
    def param(self) -> str:
        return self.dest or self.name


CAPABILITY_TEXT: dict[str, tuple[str, str]] = {
    "hidden_states": ("capture hidden states", "activations are read inside the model"),
    "steering": ("steer", "steering adds vectors inside the model, which needs local weights"),
    "local_weights": ("load a model directory", "the weights are loaded on this machine"),
    "structured_output": ("constrain answers", "generation follows a grammar"),
    "streaming": ("stream", "many calls share one running batch"),
    "training": ("train a model", "fine-tuning needs gradients through local weights"),
}
"""Each capability a command may ask for: (what it lets a backend do, why some cannot)."""


def keywords(cls: BackendClass) -> frozenset[str]:
    """The keywords `cls`'s constructor takes (besides the model), with those a ``**kwargs``
    hands on to its base class's constructor."""
    out: set[str] = set()
    for klass in cls.__mro__[:-1]:  # not object
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(klass.__init__).parameters.values()
        out |= {p.name for p in params if p.name not in ("self", "model")
                and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    return frozenset(out)


#: Engine arguments that change the model's architecture (its config read from the weights'
#: folder), as transformers' ``from_pretrained(**kwargs)`` and vLLM's ``hf_overrides`` apply them:
#: weights run under another shape (``num_hidden_layers=2``: a truncated model). Refused unless
#: the command is given ``--allow-architecture-change``.
ARCHITECTURE_ARGS = frozenset({
    "num_hidden_layers", "num_layers", "n_layer", "n_layers", "hidden_size", "n_embd", "d_model",
    "intermediate_size", "ffn_dim", "n_inner", "num_attention_heads", "n_head", "num_key_value_heads",
    "head_dim", "vocab_size", "num_experts", "num_local_experts", "num_experts_per_tok",
    "tie_word_embeddings", "model_type", "architectures", "text_config"})
ALLOW_ARCHITECTURE = "--allow-architecture-change"
MAX_SHOWN = 80  # characters of an -M value echoed in a message


def shown_pair(key: str, value: Any) -> str:
    """``key=value`` as given (JSON for a parsed value), a long value cut to :data:`MAX_SHOWN`."""
    v = value if isinstance(value, str) else json.dumps(value)
    return f"{key}={v}" if len(v) <= MAX_SHOWN else f"{key}={v[:MAX_SHOWN]}... ({len(v)} characters)"


def parse_engine_args(pairs: Iterable[str], allow_architecture: bool = False) -> dict[str, Any]:
    """``key=value`` strings (``-M``) as a dict: a value that parses as JSON is that value
    (``true``, ``3``, ``{"a": 1}``), else the string. Refused: a key given twice, without ``=``,
    not an identifier or private (``_x``, ``__class__``), and, unless `allow_architecture`, one of
    :data:`ARCHITECTURE_ARGS` (also inside vLLM's ``hf_overrides``)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, raw = pair.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise EvalAwareError(f"-M {shown_pair(key, raw) if eq else pair[:MAX_SHOWN]!r}: give an engine "
                                 f"argument as key=value (e.g. -M enable_prefix_caching=false)")
        if key.startswith("_"):
            raise EvalAwareError(f"-M {key}: a private name, not an engine argument")
        if key in out:
            raise EvalAwareError(f"-M {key}: given twice")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    changed = architecture_args(out)
    if changed and not allow_architecture:
        raise EvalAwareError(f"-M {', '.join(changed)}: changes the model's architecture (its weights would "
                             f"run under another shape, e.g. fewer layers); give {ALLOW_ARCHITECTURE} if "
                             f"that is meant (recorded in the model's identity)")
    return out


def architecture_args(args: Mapping[str, Any]) -> list[str]:
    """The names among `args` (and inside its ``hf_overrides``) that change the architecture."""
    overrides = args.get("hf_overrides")
    return sorted(({*args} | ({*overrides} if isinstance(overrides, dict) else set())) & ARCHITECTURE_ARGS)


def engine_refused(args: Mapping[str, Any], e: Exception) -> EvalAwareError:
    """The one line for an engine that raised `e` while being built with the ``-M`` `args`:
    ``-M key=value: the engine refused it: <its first line>``, naming the arguments its message
    mentions (else all of them); a missing package is the environment's failure (exit 1)."""
    from harness.core.errors import EnvironmentFailure, first_line

    text = str(e)
    named = [k for k, v in args.items() if k in text or (isinstance(v, str) and v and v in text)] or list(args)
    pairs = ", ".join(shown_pair(k, args[k]) for k in named)
    if isinstance(e, ImportError):
        return EnvironmentFailure(f"-M {pairs}: the engine refused it: {first_line(e)} (a package it needs "
                                  f"is missing: install it, or drop the argument)")
    return EvalAwareError(f"-M {pairs}: the engine refused it: {first_line(e)}")


def engine_identity(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """What ``-M`` engine arguments add to a backend's identity (the call cache's keys): they may
    change what the model computes (a quantization, an attention kernel), so calls made under
    other ones are not reused; nothing when none are given (the keys stay as they were)."""
    return {"engine_args": dict(sorted(args.items()))} if args else {}


def check_engine_args(spec: Spec, args: Mapping[str, Any],
                      flags: Mapping[str, str] | None = None) -> None:
    """Refuse, without loading anything, engine arguments `spec`'s backend cannot take: any on a
    backend without ``engine_args_to``, one it models (a keyword or a declared option; `flags`
    names the command line's flag for it) or sets itself, and one its engine does not know (where
    the spec can tell: ``known_engine_args``)."""
    if not args:
        return
    if spec.engine_args_to is None:
        raise EvalAwareError(f"-M {', '.join(sorted(args))}: the {spec.kind} backend takes no engine "
                             f"arguments ({spec.engine_args_refusal})")
    flags = {**{o.name: o.flag for o in spec.options}, **(flags or {})}
    for key in sorted(args):
        if key in spec.keywords or key in spec.sets_itself or key in flags:
            how = f"; use {flags[key]}" if key in flags else ""
            raise EvalAwareError(f"-M {key}: the {spec.kind} backend sets it itself{how}")
    known = spec.known_engine_args()
    unknown = sorted(k for k in args if known is not None and k not in known)
    if unknown:
        raise EvalAwareError(f"-M {', '.join(unknown)}: not an engine argument of "
                             f"{spec.engine_args_to}")
