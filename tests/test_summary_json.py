"""RUN/summary.json (issue 46): one schema for `run`, `report` and `show --json`, the same numbers
the report prints."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from evalaware.main import cli
from harness.reporting import summary as RS
from harness.reporting.report import write_report
from tests.helpers.cli import in_process
from tests.test_report_findings import _findings, _run

NUM, OPT_NUM = (int, float), (int, float, type(None))
PAIR = (list, type(None))
OPT_STR = (str, type(None))
RUN_KEYS = {"run_dir": str, "model": str, "backend": str, "weights_sha256": OPT_STR, "samples": int,
            "incomplete": list, "finding": str, "surface": (dict, type(None)), "surface_note": OPT_STR,
            "methods": dict, "linkage": dict, "linkage_line": OPT_STR}
METHOD_KEYS = {"label": str, "n": int, "scored": int, "undecided": int, "withheld": dict,
               "eval_correct": OPT_NUM, "deploy_correct": OPT_NUM, "auroc": OPT_NUM, "auroc_ci": PAIR,
               "auroc_ci_method": OPT_STR, "auroc_gate": OPT_STR, "ci_by": str, "n_groups": int,
               "vs_surface": (dict, type(None)), "verdict": dict}
VS_KEYS = {"n": int, "best": str, "best_auroc": NUM, "diff": NUM, "diff_ci": PAIR, "diff_ci_method": OPT_STR}
VERDICT_KEYS = {"kind": str, "chance": OPT_STR, "line": str}
LINK_KEYS = {"n": int, "n_eval": int, "n_deploy": int, "n_groups": int, "rate_eval": OPT_NUM,
             "rate_deploy": OPT_NUM, "diff": OPT_NUM, "diff_ci": PAIR, "odds_ratio": OPT_NUM,
             "odds_ratio_ci": PAIR, "ci_method": OPT_STR, "verdict": str, "n_undecided": int,
             "n_no_record": int, "holm_family": (int, type(None)), "holm_shown": bool}
KINDS = {"beats_surface", "below_surface", "like_surface", "no_surface", "no_auroc", "withheld"}


def _keys(d: dict, spec: dict, where: str) -> None:
    assert set(d) == set(spec), f"{where}: {sorted(set(d) ^ set(spec))}"
    for k, t in spec.items():
        assert isinstance(d[k], t), f"{where}.{k}: {type(d[k]).__name__}"


def check_schema(obj: dict) -> None:
    """Schema 1 as harness/reporting/summary.py documents it."""
    assert obj["schema"] == RS.SCHEMA == 1 and set(obj) == {"schema", "intervals", "runs"}
    _keys(obj["intervals"], {"level": float, "resamples": int, "seed": int, "ci_by": OPT_STR}, "intervals")
    for i, run in enumerate(obj["runs"]):
        _keys(run, RUN_KEYS, f"runs[{i}]")
        assert (run["surface"] is None) != (run["surface_note"] is None)
        if run["surface"]:
            _keys(run["surface"], {"name": str, "auroc": NUM, "ci": PAIR, "ci_method": OPT_STR}, "surface")
        for m, s in run["methods"].items():
            _keys(s, METHOD_KEYS, m)
            assert all(isinstance(k, str) and isinstance(v, int) for k, v in s["withheld"].items())
            for key in ("auroc_ci",):
                assert s[key] is None or (len(s[key]) == 2 and s[key][0] <= s[key][1])
            assert (s["auroc_ci"] is None) == (s["auroc_ci_method"] is None)
            assert (s["auroc"] is None) == (s["auroc_gate"] is not None) or s["auroc"] is None
            if s["vs_surface"] is not None:
                _keys(s["vs_surface"], VS_KEYS, f"{m}.vs_surface")
            _keys(s["verdict"], VERDICT_KEYS, f"{m}.verdict")
            assert s["verdict"]["kind"] in KINDS and s["verdict"]["line"].startswith(f"{m}: ")
        assert (run["linkage_line"] is None) == (run["linkage"] == {})
        for b, by_readout in run["linkage"].items():
            assert set(by_readout) <= set(run["methods"]) and b not in run["methods"]
            for m, strata in by_readout.items():
                assert list(strata) == ["all", "eval_labelled", "deploy_labelled"]
                for k, t in strata.items():
                    _keys(t, LINK_KEYS, f"linkage.{b}.{m}.{k}")
                    assert t["n_eval"] + t["n_deploy"] == t["n"]
                    assert (t["diff_ci"] is None) == (t["ci_method"] is None)
                    assert (t["holm_family"] is None) == t["verdict"].startswith("no verdict")
                    assert not t["holm_shown"] or t["verdict"].endswith("called eval")


def _md_plain(text: str) -> str:
    """A line of the report's Markdown as plain text (code spans and escapes removed)."""
    return re.sub(r"\\(.)", r"\1", text.replace("`", ""))


@pytest.fixture(scope="module")
def pos_run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("s") / "pos", "pos-model", informative=True)


def test_schema(pos_run):
    obj = RS.summarize([pos_run], n_boot=200)
    check_schema(obj)
    json.loads(RS.dumps(obj))  # plain JSON (no NaN)
    run = obj["runs"][0]
    assert run["samples"] == 96 and run["incomplete"] == [] and run["model"] == "pos-model"
    assert run["methods"]["logprob"]["verdict"]["kind"] == "withheld"
    lp = run["methods"]["logprob"]
    assert lp["withheld"] == {"no_signal": 96} and lp["auroc"] is None and lp["eval_correct"] is None
    p = run["methods"]["probability"]
    assert p["verdict"]["kind"] == "beats_surface" and p["vs_surface"]["diff_ci"][0] > 0
    assert p["auroc"] == 1.0 and p["auroc_ci_method"] == "exact (Clopper-Pearson) at the bound over 12 units"
    b = run["methods"]["binary"]
    assert b["auroc_ci_method"].startswith("cluster-jackknife t (12 units") and b["ci_by"] == "category"
    assert p["vs_surface"]["diff_ci_method"].startswith("cluster-jackknife t (12 units")


def test_summary_json_show_json_and_the_report_agree(pos_run, tmp_path):
    md, _ = write_report([pos_run], tmp_path / "rep", n_boot=1000)
    from_report = json.loads((tmp_path / "rep" / "summary.json").read_text())
    RS.write_summary(RS.summarize([pos_run]), pos_run)  # what `run` writes at its end
    from_run = json.loads((pos_run / "summary.json").read_text())
    shown = CliRunner().invoke(cli, ["show", str(pos_run), "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == from_run == from_report
    check_schema(from_run)
    text = md.read_text()
    findings = _findings(text)
    run = from_run["runs"][0]
    assert f"**pos-model**: {run['finding']}" in _md_plain(findings)
    bullets = [_md_plain(x[2:]) for x in findings.splitlines() if x.startswith("- ")]
    for m, s in run["methods"].items():
        assert s["verdict"]["line"] in bullets
        if s["auroc"] is None:
            continue
        cell = f"{s['auroc']:.3f} [{s['auroc_ci'][0]:.2f}, {s['auroc_ci'][1]:.2f}]"
        assert f"| {m} | 96 |" in text and cell in text
        v = s["vs_surface"]
        diff = f"{v['diff']:+.3f} [{v['diff_ci'][0]:+.2f}, {v['diff_ci'][1]:+.2f}]"
        assert re.search(rf"\| {m} \| {re.escape(cell)} \| {v['n']} \| .+ \| {v['best_auroc']:.3f} \| "
                         rf"{re.escape(diff)} \|", _md_plain(text)), m


def test_run_writes_summary_json_equal_to_show_json(tmp_path, tiny_model_dir):
    out = tmp_path / "r"
    r = in_process("run", "--model", tiny_model_dir, "--backend", "hf", "--dataset", "demo", "--limit", "4",
                   "--methods", "binary", "--answer-tokens", "2", "--probe-tokens", "2", "--no-progress",
                   "--out", out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"summary (AUROC with its interval and rule, surface baseline, verdicts): {out / 'summary.json'}" in r.stdout
    assert f"report: `evalaware report {out}` writes {out.resolve() / 'report' / 'report.html'}" in r.stdout
    assert "\nfinding: " in r.stdout and "\nsurface baseline: " in r.stdout
    obj = json.loads((out / "summary.json").read_text())
    check_schema(obj)
    assert obj["runs"][0]["methods"]["binary"]["n"] == 4
    assert obj["runs"][0]["methods"]["binary"]["verdict"]["kind"] in ("no_auroc", "withheld")
    shown = CliRunner().invoke(cli, ["show", str(out), "--json"])
    assert json.loads(shown.output) == obj


def test_the_table_says_what_the_report_says(pos_run, tmp_path):
    """Issue 46: the end-of-run / `show` table read 0.00 for a method that decided nothing, had no
    interval, no surface baseline and no finding."""
    run = RS.summarize([pos_run])["runs"][0]
    out = CliRunner().invoke(cli, ["show", str(pos_run)]).output
    rows = {ln.split()[0]: ln for ln in out.splitlines() if ln.split() and ln.split()[0] in run["methods"]}
    assert rows["logprob"].split()[1:5] == ["96", "–", "–", "96"]  # withheld: no share, not 0.00
    for m in ("binary", "probability"):
        s = run["methods"][m]
        v = s["vs_surface"]
        assert (f"{s['auroc']:.2f} [{s['auroc_ci'][0]:.2f}, {s['auroc_ci'][1]:.2f}] "
                f"{v['diff']:+.2f} [{v['diff_ci'][0]:+.2f}, {v['diff_ci'][1]:+.2f}]") in " ".join(rows[m].split())
    best = run["surface"]
    lo, hi = best["ci"]
    assert f"surface baseline: {best['name']} AUROC {best['auroc']:.2f} [{lo:.2f}, {hi:.2f}]" in out
    assert f"finding: {run['finding']}" in out
    assert "interval rules (95%): cluster-jackknife t (12 units" in out
    assert out.startswith("model: pos-model ")


def test_report_out_defaults_to_the_run_directory(pos_run, tmp_path):
    res = CliRunner().invoke(cli, ["report", str(pos_run), "--bootstrap", "0"])
    assert res.exit_code == 0, res.output
    assert str((pos_run / "report" / "report.html").resolve()) in res.output
    assert json.loads((pos_run / "report" / "summary.json").read_text())["intervals"]["resamples"] == 0
    two = CliRunner().invoke(cli, ["report", str(pos_run), str(pos_run)])
    assert two.exit_code == 2 and "--out is required with several run directories" in two.output
