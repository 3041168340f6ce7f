"""Activation capture, linear probes and steering (see probes/README.md)."""

from probes import report_spec  # noqa: F401  (registers what the report shows for probe records)
