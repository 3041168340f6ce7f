"""The one way to reach a model: backends by name, asked for by what they can do.

:data:`BACKEND_SPECS` is the registry, one :func:`register_backend` line per backend (a name or
an engine class registered twice is an error): its name and its light specs
(:class:`~harness.backends.specs.BackendSpec`; the first serves, a later one is a variant, e.g.
vLLM's capture engine, chosen when a caller needs a capability only it has or gives a keyword
only it takes). Everything is read from the specs, without importing an engine: the command line
builds each backend's flags from :func:`backend_options`, :func:`check_backend` refuses another
backend's option, a lacking capability or a bad ``-M`` engine argument without loading anything,
and :func:`make_backend` imports the chosen engine class and hands it only the keywords its
constructor takes. Run, capture, steering and the taxonomy all open their model through
:func:`open_backend`.

Adding a backend: its own module with a :class:`~harness.backends.base.Backend` subclass, its
spec (:mod:`harness.backends.specs`) and its line here; or, from another package, an entry point
of the group ``evalaware.backends`` naming its spec (or a tuple of specs), e.g. in its
``pyproject.toml``: ``[project.entry-points."evalaware.backends"] toy = "toy_pkg:SPEC"``. Nothing
here is frozen at import: :func:`backend_names` and :func:`default_backend` read the registry
when asked.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from harness.backends.base import Backend, refuse_lacking
from harness.backends.declare import BackendOption, check_engine_args, engine_refused
from harness.backends.specs import HF, OPENAI, VLLM, VLLM_CAPTURE, BackendSpec
from harness.core import console
from harness.core.errors import EvalAwareError, is_out_of_memory
from harness.models.fingerprint import check_model

BACKEND_SPECS: dict[str, tuple[BackendSpec, ...]] = {}


def register_backend(name: str, *specs: BackendSpec) -> None:
    """Add a backend to :data:`BACKEND_SPECS`: its name and its specs (the first serves, the rest
    are variants). A name or an engine class registered twice is refused, naming both
    registrations (a second line would silently replace the first)."""
    if name in BACKEND_SPECS:
        raise EvalAwareError(f"backend {name!r} is registered twice: by {_names(BACKEND_SPECS[name])} "
                             f"and by {_names(specs)}; give one of them another name")
    for spec in specs:
        other = next((k for k, ss in BACKEND_SPECS.items() if spec.engine in (s.engine for s in ss)), None)
        if other is not None:
            raise EvalAwareError(f"{_names((spec,))} is registered twice: as backend {other!r} and as "
                                 f"{name!r}")
    BACKEND_SPECS[name] = tuple(specs)


def _names(specs: Sequence[BackendSpec]) -> str:
    return ", ".join(s.engine.replace(":", ".") for s in specs)


ENTRY_POINTS = "evalaware.backends"


def register_entry_points() -> None:
    """Register the backends other installed packages declare under the entry point group
    :data:`ENTRY_POINTS` (each loads to a spec or a tuple of specs; its name is the backend's).
    Loading one imports its spec's module only, not its engine."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINTS):
        if ep.name in BACKEND_SPECS:
            continue  # already registered (this function ran before)
        try:
            loaded = ep.load()
        except Exception as e:  # noqa: BLE001 - a broken plug-in is named, not a traceback
            raise EvalAwareError(f"backend {ep.name!r} (entry point {ep.value}): cannot load it ({e})") from None
        specs = tuple(loaded) if isinstance(loaded, (tuple, list)) else (loaded,)
        if not specs or not all(isinstance(s, BackendSpec) for s in specs):
            raise EvalAwareError(f"backend {ep.name!r} (entry point {ep.value}): expected a BackendSpec "
                                 f"or a tuple of them, got {type(loaded).__name__}")
        register_backend(ep.name, *specs)


register_backend("vllm", VLLM, VLLM_CAPTURE)
register_backend("hf", HF)
register_backend("openai", OPENAI)
register_entry_points()


def backend_names() -> tuple[str, ...]:
    """The registered backends, in registration order (read now: a later line counts)."""
    return tuple(BACKEND_SPECS)


def default_backend(needs: Sequence[str] = ()) -> str:
    """The backend a command gets when it names none, from what it `needs`: the first registered
    whose serving spec can do all of `needs` and declares itself their default
    (``BackendSpec.default_for``: hf for hidden states, steering, training and model
    directories), else the first that can (vLLM for plain generation). Refuses when none can."""
    able = [k for k, specs in BACKEND_SPECS.items() if not specs[0].capabilities.lacks(needs)]
    chosen = [k for k in able if set(needs) <= BACKEND_SPECS[k][0].default_for] or able
    if not chosen:
        variants = backends_with(*needs)  # a variant that can (vLLM's capture engine) is not a default
        if variants:
            return variants[0]
        raise EvalAwareError(f"no registered backend can {', '.join(needs)}")
    return chosen[0]


def backend_options() -> tuple[BackendOption, ...]:
    """Every backend's own options, each once (the command line's backend-specific flags)."""
    seen: dict[str, BackendOption] = {}
    for specs in BACKEND_SPECS.values():
        for spec in specs:
            for o in spec.options:
                seen.setdefault(o.name, o)
    return tuple(seen.values())


def option_owners(name: str) -> tuple[str, ...]:
    """The backends that declare the option `name`."""
    return tuple(k for k, specs in BACKEND_SPECS.items()
                 if any(name in (o.name for o in s.options) for s in specs))


def backends_with(*needs: str) -> tuple[str, ...]:
    """The backends with a spec that has every capability of `needs`."""
    return tuple(k for k, specs in BACKEND_SPECS.items()
                 if any(not s.capabilities.lacks(needs) for s in specs))


def takes(kind: str, keyword: str) -> bool:
    """Whether a class of backend `kind` takes `keyword` (e.g. an API key)."""
    return any(keyword in s.keywords for s in BACKEND_SPECS.get(kind, ()))


def backend_spec(kind: str, needs: Sequence[str] = (), given: Sequence[str] = ()) -> BackendSpec:
    """The spec of backend `kind` that has the capabilities `needs`: the first one, unless a
    variant's own keyword is in `given`. Refuses an unknown backend or a lacking capability,
    naming it and the backends that have it. Imports nothing."""
    if kind not in BACKEND_SPECS:
        raise EvalAwareError(f"unknown backend {kind!r}; use one of {', '.join(BACKEND_SPECS)}")
    first, *variants = BACKEND_SPECS[kind]
    able = [s for s in (first, *variants) if not s.capabilities.lacks(needs)]
    if not able:
        refuse_lacking(first, needs, " or ".join(backends_with(*needs)))
    own = [s for s in able if s is not first and set(given) & (s.keywords - first.keywords)]
    return (own or able)[0]


def backend_class(kind: str, needs: Sequence[str] = (), given: Sequence[str] = ()) -> type[Backend]:
    """The engine class of :func:`backend_spec`, imported now (torch or vLLM's client may come
    with it)."""
    cls: type[Backend] = backend_spec(kind, needs, given).load()
    return cls


def make_backend(kind: str, model: str, needs: Sequence[str] = (), **opts: Any) -> Backend:
    """Create a backend by name (the class :func:`backend_class` picks); options its constructor
    does not take, or given as None, are dropped."""
    given = [k for k, v in opts.items() if v is not None]
    spec = backend_spec(kind, needs, given)
    kept = {k: v for k, v in opts.items() if v is not None and k in spec.keywords}
    cls = spec.load()
    try:
        return cls(model=model, **kept)
    except EvalAwareError:
        raise
    except Exception as e:  # an engine refusing what -M handed it: one line naming the argument
        if not kept.get("engine_args") or is_out_of_memory(e) or isinstance(e, OSError):
            raise
        raise engine_refused(kept["engine_args"], e) from e


def check_backend(kind: str, model: str, opts: dict[str, Any], flags: Mapping[str, str] | None = None,
                  needs: Sequence[str] = ()) -> None:
    """Refuse without loading anything what cannot work: an unknown backend, one without the
    capabilities `needs`, another backend's option, a bad ``engine_args`` (``-M``), what the
    spec's own check refuses (openai without a server URL), a model that is not on this machine
    (backends with `local_weights`). `flags` names the command-line options in messages."""
    flag: Callable[[str], str] = lambda k: (flags or {}).get(k) or "--" + k.replace("_", "-")  # noqa: E731
    spec = backend_spec(kind, needs, [k for k, v in opts.items() if v is not None])
    wrong = sorted(k for k, v in opts.items() if v not in (None, (), [])
                   and option_owners(k) and kind not in option_owners(k))
    if wrong:
        raise EvalAwareError("; ".join(f"{flag(k)} applies to the {'/'.join(option_owners(k))} "
                                       f"backend" for k in wrong) + f", not to {kind}")
    check_engine_args(spec, opts.get("engine_args") or {}, flags)
    spec.check_options(model, opts, flag)
    if spec.capabilities.local_weights:
        check_model(model, opts.get("revision"))  # a hub id not cached is downloaded on opening


def open_backend(kind: str, model: str, role: str = "model", **opts: Any) -> Backend:
    """:func:`make_backend`, timed, with one line of our own: what was loaded, where, how fast."""
    t0 = time.perf_counter()
    backend = make_backend(kind, model, **opts)
    dtype = backend.identity.get("dtype")
    console.status(f"{role}: {model} ({kind}, {backend.device}" + (f", {dtype}" if dtype else "")
                   + f") ready in {time.perf_counter() - t0:.1f} s")
    return backend
