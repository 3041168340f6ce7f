"""What the report shows for probe records (`probes eval --write-records`, `probes apply
--write`; method name `probe` unless `--method-name` says otherwise): a "Probes" section with
one row per score variant and the layer-selection table. Registered when `probes` is imported."""

from __future__ import annotations

from harness.methods.report_spec import Family, ReportSpec, register_prefix

REPORT = ReportSpec(score="the probe's P(eval)", log_odds_detail="decision", family=Family(
    title="Probes", order=20, note="Linear-probe records; score is the probe's P(eval)."))

register_prefix("probe", REPORT)
