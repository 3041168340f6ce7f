"""A record's score on the log-odds scale, as its method declares it (``ReportSpec.scale``): one
place for the cues' effects and validate's decision rule (issue 44).

Readouts saturate: `logprob_question` sits near 0.95-0.998 on SmolLM2, where a shift of one
log-odds unit moves P(eval) by 0.002 at 0.998 but by 0.2 at 0.5. Effects are compared on the
log-odds scale (ranked by it), with the raw change beside it:

- ``probability``: logit(p), p held inside [EPS, 1 - EPS] (a score of exactly 0 or 1 in floating
  point carries no finite log-odds: such a record is ``clipped``, counted, and its pairs are left
  out of the log-odds effects, which would otherwise be the bound's, not the model's);
- ``share`` (a share s of the votes or verdicts): the empirical logit with one n for every record
  of the method, the most valid votes any record has (the configured number): log((s n + 1/2) /
  (n - s n + 1/2)), finite at 0 and 1; with each record's own n, 5 of 5 and 4 of 4 would differ
  by 0.2 from one invalid vote alone;
- ``log-ratio`` (the monitor's nats): the score itself;
- a ``log_odds_detail`` (the probes' ``decision``, the logprob methods' ``log_odds``): that exact
  value where the record holds one, never clipped (a logprob P(eval) of exactly 1.0 keeps its
  log-odds, formed from the log-probabilities); a record without it (a run recorded before the
  field existed, an infinite log-odds) falls back to its scale above.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from harness.methods.report_spec import SCALES, ReportSpec
from harness.stats.metrics import LOGIT_EPS, clipped_logit

EPS = LOGIT_EPS


def _finite(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def log_odds(record: Mapping[str, Any], spec: ReportSpec, n_share: int | None = None
             ) -> tuple[float | None, bool]:
    """(the record's score on the log-odds scale or None, whether it was clipped at EPS);
    `n_share`: the n of a ``share`` (default: the record's own ``n_valid``)."""
    if spec.log_odds_detail:
        v = _finite((record.get("details") or {}).get(spec.log_odds_detail))
        if v is not None:
            return v, False
    s = _finite(record.get("score"))
    if s is None:
        return None, False
    if spec.scale not in SCALES:
        raise ValueError(f"unknown score scale {spec.scale!r}")
    if spec.scale == "log-ratio":
        return s, False
    if spec.scale == "share":
        n = int(n_share or record.get("n_valid") or 0)
        if n > 0:
            k = min(max(s, 0.0), 1.0) * n
            return math.log((k + 0.5) / (n - k + 0.5)), False
    return clipped_logit(s)


def describe(spec: ReportSpec) -> str:
    """How the readout's log-odds were made, in words (for the report's rows)."""
    how = {"probability": f"logit(P); a P beyond [{EPS:g}, 1 - {EPS:g}] is clipped and its pairs left out",
            "share": "empirical logit of a share s of n votes, n fixed per method: log((sn + 1/2) / (n - sn + 1/2))",
            "log-ratio": "the score (already nats)"}[spec.scale]
    return f"details.{spec.log_odds_detail} (exact); without it: {how}" if spec.log_odds_detail else how
