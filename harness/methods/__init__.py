"""The black-box methods. Each module registers one :class:`~harness.methods.base.Method`;
importing this package imports (and so registers) every one of them."""

from __future__ import annotations

from harness.methods import behaviour, binary, logprob, monitor, motivation, probability, reasoning  # noqa: F401  (register)
from harness.methods.base import REGISTRY, Method, MethodConfig, RunContext
from harness.methods.report_spec import Specs


def available() -> dict[str, type[Method]]:
    """Every registered method by name."""
    return dict(REGISTRY)


def report_specs() -> Specs:
    """The report specs of every registered method (and of the registered prefixes)."""
    return Specs({name: cls.report for name, cls in REGISTRY.items()})


def ordered_methods() -> list[type[Method]]:
    """Every registered method in the report's order (``ReportSpec.order``, then name): what
    ``--methods all`` stands for."""
    return sorted(REGISTRY.values(), key=lambda c: (c.report.order, c.name))


def readers(option: str) -> list[str]:
    """The registered methods that read (and so record) `option`, in the report's order."""
    return [c.name for c in ordered_methods() if option in c.options]


__all__ = ["Method", "MethodConfig", "RunContext", "available", "ordered_methods", "readers", "report_specs",
           "REGISTRY"]
