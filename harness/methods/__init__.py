"""The black-box methods. Each module registers one :class:`~harness.methods.base.Method`;
importing this package imports (and so registers) every one of them."""

from __future__ import annotations

from harness.methods import binary, logprob, monitor, motivation, probability, reasoning  # noqa: F401  (register)
from harness.methods.base import REGISTRY, Method, MethodConfig, RunContext


def available() -> dict[str, type[Method]]:
    """Every registered method by name."""
    return dict(REGISTRY)


__all__ = ["Method", "MethodConfig", "RunContext", "available", "REGISTRY"]
