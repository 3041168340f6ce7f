"""The cues' log-odds scale: :mod:`harness.methods.scale` (one place, shared with validate's rule)."""

from __future__ import annotations

from harness.methods.scale import EPS, describe, log_odds  # noqa: F401  (re-exported for the cues)
from harness.reporting.runs import method_specs as specs  # noqa: F401  (the methods' declared specs)
