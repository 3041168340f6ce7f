"""The black-box methods. Each module registers one :class:`~harness.methods.base.Method`."""

from __future__ import annotations

from importlib import import_module

from .base import REGISTRY, Method, MethodConfig, RunContext

_MODULES = ("binary", "logprob", "probability", "motivation", "reasoning")


def available() -> dict[str, type[Method]]:
    for m in _MODULES:
        try:
            import_module(f"{__name__}.{m}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{m}":
                raise
    return dict(REGISTRY)


__all__ = ["Method", "MethodConfig", "RunContext", "available", "REGISTRY"]
