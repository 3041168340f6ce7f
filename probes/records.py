"""Probe scores as standard method records (method ``probe``) in a run's results table, so the
report shows the probe's kappa and AUROC next to the black-box methods."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from harness.core.records import Record
from harness.runlog import RunLog


def probe_records(store: RunLog, sample_ids: Sequence[str], proba: np.ndarray,
                  decision: np.ndarray, details: dict[str, Any],
                  per_sample: Sequence[dict[str, Any]] | None = None,
                  method: str = "probe") -> list[Record]:
    """One record per sample: prediction eval iff decision >= 0, score = P(eval)."""
    by_id = {s.id: s for s in store.samples()}
    return [Record.for_sample(by_id[sid], method, "eval" if decision[i] >= 0 else "deploy",
                              float(proba[i]), 1, 0, details={
                                  **details, "decision": float(decision[i]),
                                  **(per_sample[i] if per_sample else {})})
            for i, sid in enumerate(sample_ids)]


def write_records(store: RunLog, records: Sequence[Record], method: str = "probe",
                  replace: bool = True) -> int:
    """Write records (replacing the method's previous records, in the same transaction, when
    `replace`)."""
    if replace:
        store.replace_results(method, records)
    else:
        store.put_results(method, records)
    return len(records)
