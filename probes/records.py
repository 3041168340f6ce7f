"""Probe scores as standard method records (method ``probe``) in a run's results table, so the
report shows the probe's kappa and AUROC next to the black-box methods.

A records name (``--method-name``) is owned: a registered method's name never holds probe
scores, nor does a name the run's methods wrote; the first probe to write under a name records
itself as its owner (meta ``probe_records/<name>``: what wrote it, and the probe), and another
probe is refused the name (:func:`check_method_name`), so records are only ever replaced by a
re-run of what wrote them."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from harness.core.errors import EvalAwareError
from harness.core.records import Record
from harness.methods import available
from harness.runlog import RunLog

OWNER_KEY = "probe_records/"


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


def sweep_owner(capture: str) -> dict[str, Any]:
    """The owner of out-of-fold records: `probes eval` on one capture (a re-run replaces them)."""
    return {"by": "probes eval", "capture": capture}


def saved_probe_owner(meta: dict[str, Any]) -> dict[str, Any]:
    """The owner of a saved probe's scores (`probes apply`, a frozen readout): that probe, by its
    tensor file's sha256."""
    return {"by": "a saved probe", "probe_sha256": meta.get("sha256")}


def _describe(owner: dict[str, Any]) -> str:
    probe = f" (probe sha256 {str(owner['probe_sha256'])[:12]}...)" if owner.get("probe_sha256") else ""
    capture = f" (capture {owner['capture']!r})" if owner.get("capture") else ""
    return f"{owner.get('by', 'a probe')}{probe or capture}"


def check_method_name(store: RunLog, method: str, owner: dict[str, Any]) -> None:
    """Refuse (one line) to write probe records named `method` where they would replace or join
    records that are not `owner`'s: a registered method's name, a method the run ran, or another
    probe's records (see the module's docstring)."""
    where = f"{store.run_dir}: --method-name {method!r}"
    if method in available():
        raise EvalAwareError(f"{where}: is the name of a method; probe records under it would pass for "
                             f"that method's: give another name (e.g. probe_{method})")
    if store.get_meta(f"settings/{method}") is not None:
        raise EvalAwareError(f"{where}: the run's method {method!r} wrote records under this name; "
                             f"give another name")
    recorded = store.get_meta(OWNER_KEY + method)
    if recorded is not None and recorded != owner:
        raise EvalAwareError(f"{where}: holds the records of {_describe(recorded)}, not of "
                             f"{_describe(owner)}; give another name")
    if recorded is None:
        foreign = [r.sample_id for r in store.results(method) if "probe" not in r.details]
        if foreign:
            raise EvalAwareError(f"{where}: the run has {len(foreign)} record(s) under this name that no "
                                 f"probe wrote (first: sample {foreign[0]!r}); give another name")


def write_records(store: RunLog, records: Sequence[Record], method: str, owner: dict[str, Any],
                  replace: bool = True) -> int:
    """Write records under `method` for `owner` (:func:`check_method_name`, then the owner and
    the records, replacing the method's previous ones when `replace`, in one transaction)."""
    with store.transaction():
        check_method_name(store, method, owner)
        store.set_meta(OWNER_KEY + method, owner)
        if replace:
            store.replace_results(method, records)
        else:
            store.put_results(method, records)
    return len(records)
