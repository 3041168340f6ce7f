"""Every caption names the interval rule the code used (issue 46): the report's surface section
said "paired bootstrap" and its kappa section "bootstrap as in the summary" where both were
cluster-jackknife t intervals over 12 categories; a kappa with no interval stood bare under a
"[95% CI]" header; `report --bootstrap` and `probes eval` said "bootstrap 95% CIs"."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from evalaware.main import cli
from harness.data.readers import load_dataset
from harness.reporting.context import ReportContext
from harness.reporting.report import load_run, write_report
from harness.runlog import RunLog
from harness.stats import metrics as M
from harness.stats import summaries as S
from tests.test_report_findings import _rec

#: Words that name an interval rule; a section may use one only inside a rule the code computed.
RULE_WORDS = re.compile(r"bootstrap|jackknife|Clopper|exact interval", re.I)
N_BOOT = 200


def _run(run_dir: Path) -> Path:
    """The demo's 96 samples in 12 categories: `binary` calls everything eval (kappa 0 with any
    method, in every resample: no interval), `probability` knows the label, `motivation` is noise."""
    rng = np.random.default_rng(3)
    samples = load_dataset("demo")
    with RunLog(run_dir) as store:
        store.put_samples(samples)
        store.put_results("binary", [_rec(s, "binary", 0.9) for s in samples])
        store.put_results("probability", [_rec(s, "probability", float(np.clip(
            (0.7 if s.is_eval else 0.3) + rng.normal(0, 0.2), 0, 1))) for s in samples])
        store.put_results("motivation", [_rec(s, "motivation", float(rng.random())) for s in samples])
        store.set_meta("manifest", {"model": {"model": "m", "identity": {"backend": "hf"}},
                                    "git_revision": "0" * 16, "judge": None,
                                    "methods": {"binary": {"config": {"view": "first_turn"}}}})
    return run_dir


def computed_rules(run_dir: Path) -> set[str]:
    """Every rule the report's computations used on this run (as the sections call them)."""
    run = load_run(run_dir)
    run.label = run.model
    ctx = ReportContext([run], run_dir, n_boot=N_BOOT)
    out = {x for s in ctx.summ.values() for x in S.ci_rules(s)}
    out |= {v.get("diff_ci_method") for m in run.records if (v := ctx.versus(m, run))}
    out |= {row.ci_method for row in ctx.audit(run).rows}
    out |= {v["ci_method"] for v in S.kappa_pairs(run.records, N_BOOT).values()}
    for m, recs in run.records.items():
        b = S.low_base_rate(recs, n_boot=N_BOOT)
        out |= {b[f"{k}_ci_method"] for k in ("tpr_at_fpr1", "tpr_at_fpr5", "decision_precision",
                                                   "precision_at_fpr5")}
    return out - {None}


def misnamed(md: str, rules: set[str]) -> dict[str, list[str]]:
    """Per section (but the closing definitions, which describe every rule the code has), the
    rule words left once the computed rules' own names are taken out: a rule named by hand."""
    out = {}
    for sec in md.split("\n## ")[1:]:
        title, body = sec.split("\n", 1)
        if title.startswith("Definitions"):
            continue
        for rule in sorted(rules, key=len, reverse=True):
            body = body.replace(rule, "")
        if words := RULE_WORDS.findall(body):
            out[title] = words
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("c") / "run")


def test_every_caption_names_the_rule_computed(run, tmp_path):
    md = write_report([run], tmp_path / "rep", n_boot=N_BOOT)[0].read_text()
    rules = computed_rules(run)
    assert any(r.startswith("cluster-jackknife t (12 units") for r in rules)
    assert not any("bootstrap" in r for r in rules)  # 12 categories: no interval here is a bootstrap one
    assert misnamed(md, rules) == {}
    for title in ("Summary", "Surface baselines", "Agreement between methods", "Low base rate"):
        sec = md.split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]
        assert "cluster-jackknife t (12 units, t with 11 df)" in sec, title
    # a kappa that every resample leaves at 0 says it has no interval
    assert re.search(r"\| m \| 0\.000 \(no interval\) \| 96 \| category \|", md)


def test_the_captions_follow_the_rule_when_it_changes(run, tmp_path, monkeypatch):
    """With the jackknife's threshold moved below 12 units every interval is a percentile
    bootstrap one, and the same sections say so: the words come from the computation."""
    monkeypatch.setattr(M, "SMALL_SAMPLE_UNITS", 5)
    md = write_report([run], tmp_path / "rep", n_boot=N_BOOT)[0].read_text()
    rules = computed_rules(run)
    assert "percentile bootstrap over 12 units" in rules and not any("jackknife" in r for r in rules)
    assert misnamed(md, rules) == {}
    assert "percentile bootstrap over 12 units" in md.split("\n## Agreement", 1)[1].split("\n## ", 1)[0]


def test_the_checker_catches_a_rule_named_by_hand():
    rules = {"cluster-jackknife t (12 units, t with 11 df)"}
    md = ("# R\n\n## Surface\n\nwith a paired bootstrap interval. Interval rules (95%): "
          "cluster-jackknife t (12 units, t with 11 df).\n\n## Definitions and intervals\n\nPercentile bootstrap.\n")
    assert misnamed(md, rules) == {"Surface": ["bootstrap"]}
    assert misnamed(md.replace("paired bootstrap ", "paired "), rules) == {}


@pytest.mark.parametrize("args", [["report", "--help"], ["probes", "eval", "--help"], ["data", "audit", "--help"]])
def test_help_names_the_rules_not_a_bootstrap_ci(args):
    text = " ".join(CliRunner().invoke(cli, args).output.split())
    assert "bootstrap 95% CI" not in text and "Bootstrap resamples for AUROC CIs" not in text
    assert "jackknife" in text
