"""Metrics over method records (dicts with label, prediction, score)."""

from __future__ import annotations

from typing import Any, Sequence


def per_class_accuracy(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The paper's two numbers: share of eval samples called eval, share of deploy samples called
    deploy. Undecided/unparseable predictions count as not correct and are reported."""
    out: dict[str, Any] = {"n": len(records)}
    for cls in ("eval", "deploy"):
        rs = [r for r in records if r["label"] == cls]
        out[f"n_{cls}"] = len(rs)
        out[f"{cls}_correct"] = (sum(1 for r in rs if r["prediction"] == cls) / len(rs)) if rs else None
    out["undecided"] = sum(1 for r in records if r["prediction"] is None)
    out["invalid_answers"] = sum(int(r.get("n_invalid") or 0) for r in records)
    return out
