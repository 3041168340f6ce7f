"""The one way to reach a model: backends by name, asked for by what they can do.

:data:`BACKEND_CLASSES` is the registry, one :func:`register_backend` line per backend (a name or
a class registered twice is an error): its name and its classes (the first serves; a later one
is a variant, e.g. vLLM's capture engine, chosen when a caller needs a capability only it has or
gives a keyword only it takes). Everything else is read from the
classes' declarations (:mod:`harness.backends.declare`): the command line builds each backend's
flags from :func:`backend_options`, :func:`check_backend` refuses another backend's option, a
lacking capability or a bad ``-M`` engine argument without loading anything, and
:func:`make_backend` hands each class only the keywords its constructor takes. Run, capture,
steering and the taxonomy all open their model through :func:`open_backend`.

Adding a backend: its own module with a :class:`~harness.backends.base.Backend` subclass (its
`options`, `capabilities` and engine-argument declarations), and its line here.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from harness.backends.base import Backend, refuse_lacking
from harness.backends.declare import BackendOption, check_engine_args, keywords
from harness.backends.hf.backend import HFBackend
from harness.backends.openai.backend import OpenAIBackend
from harness.backends.vllm.backend import VLLMBackend  # vllm itself: when an engine starts
from harness.backends.vllm.capture import VLLMCaptureBackend
from harness.core import console
from harness.core.errors import EvalAwareError
from harness.models.fingerprint import check_model

BACKEND_CLASSES: dict[str, tuple[type[Backend], ...]] = {}


def register_backend(name: str, *classes: type[Backend]) -> None:
    """Add a backend to :data:`BACKEND_CLASSES`: its name and its classes (the first serves, the
    rest are variants). A name or a class registered twice is refused, naming both registrations
    (a second line would silently replace the first)."""
    if name in BACKEND_CLASSES:
        raise EvalAwareError(f"backend {name!r} is registered twice: by {_names(BACKEND_CLASSES[name])} "
                             f"and by {_names(classes)}; give one of them another name")
    for cls in classes:
        other = next((k for k, cs in BACKEND_CLASSES.items() if cls in cs), None)
        if other is not None:
            raise EvalAwareError(f"{_names((cls,))} is registered twice: as backend {other!r} and as "
                                 f"{name!r}")
    BACKEND_CLASSES[name] = tuple(classes)


def _names(classes: Sequence[type]) -> str:
    return ", ".join(f"{c.__module__}.{c.__qualname__}" for c in classes)


register_backend("vllm", VLLMBackend, VLLMCaptureBackend)
register_backend("hf", HFBackend)
register_backend("openai", OpenAIBackend)
BACKENDS = tuple(BACKEND_CLASSES)


def backend_options() -> tuple[BackendOption, ...]:
    """Every backend's own options, each once (the command line's backend-specific flags)."""
    seen: dict[str, BackendOption] = {}
    for classes in BACKEND_CLASSES.values():
        for cls in classes:
            for o in cls.options:
                seen.setdefault(o.name, o)
    return tuple(seen.values())


def option_owners(name: str) -> tuple[str, ...]:
    """The backends that declare the option `name`."""
    return tuple(k for k, classes in BACKEND_CLASSES.items()
                 if any(name in (o.name for o in c.options) for c in classes))


def backends_with(*needs: str) -> tuple[str, ...]:
    """The backends with a class that has every capability of `needs`."""
    return tuple(k for k, classes in BACKEND_CLASSES.items()
                 if any(not c.capabilities.lacks(needs) for c in classes))


def takes(kind: str, keyword: str) -> bool:
    """Whether a class of backend `kind` takes `keyword` (e.g. an API key)."""
    return any(keyword in keywords(c) for c in BACKEND_CLASSES.get(kind, ()))


def backend_class(kind: str, needs: Sequence[str] = (), given: Sequence[str] = ()) -> type[Backend]:
    """The class of backend `kind` that has the capabilities `needs`: the first one, unless a
    variant's own keyword is in `given`. Refuses an unknown backend or a lacking capability,
    naming it and the backends that have it."""
    if kind not in BACKEND_CLASSES:
        raise EvalAwareError(f"unknown backend {kind!r}; use one of {', '.join(BACKENDS)}")
    first, *variants = BACKEND_CLASSES[kind]
    able = [c for c in (first, *variants) if not c.capabilities.lacks(needs)]
    if not able:
        refuse_lacking(first, needs, " or ".join(backends_with(*needs)))
    own = [c for c in able if c is not first and set(given) & (keywords(c) - keywords(first))]
    return (own or able)[0]


def make_backend(kind: str, model: str, needs: Sequence[str] = (), **opts: Any) -> Backend:
    """Create a backend by name (the class :func:`backend_class` picks); options its constructor
    does not take, or given as None, are dropped."""
    given = [k for k, v in opts.items() if v is not None]
    cls = backend_class(kind, needs, given)
    kept = {k: v for k, v in opts.items() if v is not None and k in keywords(cls)}
    return cls(model=model, **kept)


def check_backend(kind: str, model: str, opts: dict[str, Any], flags: Mapping[str, str] | None = None,
                  needs: Sequence[str] = ()) -> None:
    """Refuse without loading anything what cannot work: an unknown backend, one without the
    capabilities `needs`, another backend's option, a bad ``engine_args`` (``-M``), what the
    class's own check refuses (openai without a server URL), a model that is not on this machine
    (backends with `local_weights`). `flags` names the command-line options in messages."""
    flag: Callable[[str], str] = lambda k: (flags or {}).get(k) or "--" + k.replace("_", "-")  # noqa: E731
    cls = backend_class(kind, needs, [k for k, v in opts.items() if v is not None])
    wrong = sorted(k for k, v in opts.items() if v not in (None, (), [])
                   and option_owners(k) and kind not in option_owners(k))
    if wrong:
        raise EvalAwareError("; ".join(f"{flag(k)} applies to the {'/'.join(option_owners(k))} "
                                       f"backend" for k in wrong) + f", not to {kind}")
    check_engine_args(cls, opts.get("engine_args") or {}, flags)
    cls.check_options(model, opts, flag)
    if cls.capabilities.local_weights:
        check_model(model, opts.get("revision"))  # a hub id not cached is downloaded on opening


def open_backend(kind: str, model: str, role: str = "model", **opts: Any) -> Backend:
    """:func:`make_backend`, timed, with one line of our own: what was loaded, where, how fast."""
    t0 = time.perf_counter()
    backend = make_backend(kind, model, **opts)
    dtype = backend.identity.get("dtype")
    console.status(f"{role}: {model} ({kind}, {backend.device}" + (f", {dtype}" if dtype else "")
                   + f") ready in {time.perf_counter() - t0:.1f} s")
    return backend
