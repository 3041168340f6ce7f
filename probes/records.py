"""Probe scores as standard method records (method ``probe``) in a run's results table, so the
report shows the probe's kappa and AUROC next to the black-box methods."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from harness.store import Store


def probe_records(store: Store, sample_ids: Sequence[str], proba: np.ndarray,
                  decision: np.ndarray, details: dict[str, Any],
                  per_sample: Sequence[dict[str, Any]] | None = None,
                  method: str = "probe") -> list[dict[str, Any]]:
    """One record per sample: prediction eval iff decision >= 0, score = P(eval)."""
    by_id = {s.id: s for s in store.samples()}
    out = []
    for i, sid in enumerate(sample_ids):
        s = by_id[sid]
        d = {**details, "decision": float(decision[i]), **(per_sample[i] if per_sample else {})}
        out.append({
            "sample_id": sid, "method": method, "label": s.label,
            "prediction": "eval" if decision[i] >= 0 else "deploy", "score": float(proba[i]),
            "n_valid": 1, "n_invalid": 0, "category": s.metadata.category,
            "agentic": s.metadata.agentic, "eval_type": s.metadata.eval_type,
            "n_turns": s.n_turns, "human_eval_probability": s.metadata.human_eval_probability,
            "human_eval_source": s.metadata.human_eval_source,
            "details": d,
        })
    return out


def write_records(store: Store, records: list[dict[str, Any]], method: str = "probe",
                  replace: bool = True) -> int:
    """Write records (replacing the method's previous records when `replace`)."""
    with store.transaction() as db:
        if replace:
            db.execute("DELETE FROM results WHERE method=?", (method,))
    store.put_results(method, records)
    return len(records)
