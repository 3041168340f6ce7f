"""A run's per-sample records written out: JSONL (every field, as stored) or CSV (one row per
sample x method with the main fields, for people who live in dataframes)."""

from __future__ import annotations

import csv
from typing import Any, Iterable, TextIO

from harness.runlog.codec import dumps

FORMATS = ("jsonl", "csv")

#: The CSV's columns: the record's main fields; `error` is the record-level error (e.g. the
#: logprob methods' ``no_signal``), `n_votes` the votes behind the prediction.
CSV_FIELDS = ("sample_id", "method", "label", "prediction", "score", "n_valid", "n_invalid", "n_votes",
              "error", "category", "agentic", "eval_type", "n_turns")

_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _cell(v: Any) -> Any:
    """A CSV cell; text that a spreadsheet would run as a formula (a category named ``=cmd|...``)
    gets a leading apostrophe, as OWASP advises. Numbers are left as they are."""
    if isinstance(v, str) and v.startswith(_FORMULA):
        return "'" + v
    return "" if v is None else v


def csv_row(r: dict[str, Any]) -> dict[str, Any]:
    details = r.get("details") or {}
    row = {k: r.get(k) for k in CSV_FIELDS}
    row["error"] = details.get("error")
    row["n_votes"] = len(details.get("votes") or []) or None
    return {k: _cell(v) for k, v in row.items()}


def format_for(path: str | None, fmt: str | None) -> str:
    """The format asked for, or the one the file name says (``.csv``), else JSONL."""
    if fmt:
        return fmt
    return "csv" if path and path.lower().endswith(".csv") else "jsonl"


def write_records(records: Iterable[dict[str, Any]], f: TextIO, fmt: str) -> int:
    """Write `records` to `f` in `fmt` (one of FORMATS); returns how many."""
    n = 0
    if fmt == "csv":
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, lineterminator="\n")
        w.writeheader()
        for r in records:
            w.writerow(csv_row(r))
            n += 1
        return n
    for r in records:
        f.write(dumps(r) + "\n")
        n += 1
    return n
