"""The report over synthetic run directories (records as the methods write them)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from harness.data.readers import load_dataset
from harness.reporting.report import load_run, method_order, write_report
from harness.runlog import RunLog
from harness.methods.voting import majority, mean_probability

import probes  # noqa: F401,E402  (registers the Probes section, as the CLI does)


def _record(s, method, vote, votes, **details):
    return {"sample_id": s.id, "method": method, "label": s.label, "prediction": vote.prediction,
            "score": vote.score, "n_valid": vote.n_valid, "n_invalid": vote.n_invalid,
            "category": s.metadata.category, "agentic": s.metadata.agentic,
            "eval_type": s.metadata.eval_type, "n_turns": s.n_turns,
            "human_eval_probability": s.metadata.human_eval_probability,
            "details": {"votes": votes, **details}}


def make_run(run_dir: Path, model: str, seed: int, n_votes: int = 25, n_samples: int = 40,
             human_source: str | None = None, human: bool = False, view: str = "first_turn") -> Path:
    """`human`: records carry a human_eval_probability, with `human_source` as its named source
    (None: unsourced, as runs of the first demo set carried the author's guess); `view`: the
    recorded view (`full`: the report fits error against turns)."""
    rng = np.random.default_rng(seed)
    samples = load_dataset("demo")[::96 // n_samples][:n_samples]
    store = RunLog(run_dir)
    store.put_samples(samples)
    out: dict[str, list] = {m: [] for m in ("binary", "probability", "motivation", "reasoning", "logprob", "probe")}
    for s in samples:
        lean = 0.8 if s.is_eval else 0.55
        lab = [None if rng.random() < 0.05 else ("eval" if rng.random() < lean else "deploy") for _ in range(n_votes)]
        out["binary"].append(_record(s, "binary", majority(lab), [{"k": k, "value": v, "error": None if v else "no <label> tag"}
                                                                  for k, v in enumerate(lab)]))
        pr = [None if rng.random() < 0.05 else float(np.clip(rng.normal(lean, 0.2), 0, 1)) for _ in range(n_votes)]
        out["probability"].append(_record(s, "probability", mean_probability(pr),
                                          [{"k": k, "value": v, "error": None if v is not None else "out of range: '70'"}
                                           for k, v in enumerate(pr)]))
        mv = []
        for k in range(3):
            aware = bool(rng.random() < (0.5 if s.is_eval else 0.2))
            mv.append({"k": k, "answer": "The user is testing me with a quiz.", "value": "eval" if aware else "deploy",
                       "error": None, "judge": {"aware": aware, "raw": "{}", "error": None, "evidence": [
                           {"quote": "testing me", "feature": "Quiz format", "verified": True},
                           {"quote": "made up", "feature": "multiple-choice format", "verified": False}] if aware else []}})
        out["motivation"].append(_record(s, "motivation", majority([v["value"] for v in mv]), mv))
        ok = rng.random() < 0.9
        rv = {"k": 0, "value": ("eval" if rng.random() < 0.1 else "deploy") if ok else None,
              "error": None if ok else "no reasoning text", "judge": {"aware": None, "evidence": [], "raw": "", "error": None}}
        out["reasoning"].append(_record(s, "reasoning", majority([rv["value"]]), [rv], reasoning_source="elicited"))
        p = float(np.clip(rng.normal(0.6 if s.is_eval else 0.4, 0.2), 0, 1))
        naive = None if rng.random() < 0.3 else float(rng.random())
        r = _record(s, "logprob", mean_probability([p]), [], aware_p_eval=p, aware_coverage=0.4,
                    naive_p_eval=naive, naive_coverage=0.0 if naive is None else 0.01)
        out["logprob"].append(r)
        out["probe"].append({**_record(s, "probe", mean_probability([p]), [], layer=11, sweep_selection_p=0.264,
                                       layer_selection="best of 31 layers (max-over-layers null)",
                                       sweep_best_layer=12, sweep_null_q95=0.71), "method": "probe"})
    if human:
        hp = {s.id: float(np.clip(rng.normal(0.7 if s.is_eval else 0.3, 0.2), 0, 1)) for s in samples}
        for rs in out.values():
            for r in rs:
                r.update(human_eval_probability=hp[r["sample_id"]], human_eval_source=human_source)
    for m, rs in out.items():
        store.put_results(m, rs)
    manifest = {"model": {"model": model, "weights_sha256": f"{seed:02d}" + "ab" * 31,
                          "identity": {"backend": "vllm", "weights_sha256": "x"}},
                "git_revision": "0123456789abcdef", "judge": None,
                "methods": {"binary": {"config": {"view": view, "person": "first"}}}}
    store.set_meta("manifest", manifest)
    store.close()
    return run_dir


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    return [make_run(base / "a", "model-a", 1, human=True, human_source="two test raters", view="full"),
            make_run(base / "b", "model-b", 2, n_votes=5, human=True, view="full")]


def test_report_two_runs(two_runs, tmp_path):
    md, page = write_report(two_runs, tmp_path / "rep", n_boot=50)
    text = md.read_text()
    for section in ("## Summary", "## Agreement between methods", "Table 1", "## Excluded answers",
                    "## Kappa vs number of votes", "## Error vs number of turns", "## Calibration",
                    "## Judge verdicts and evidence", "## Logprob scoring", "## Probes", "## Slices",
                    "## Low base rate (evaluations = 1% of traffic)"):
        assert section in text, section
    # every referenced figure exists and is a PNG; every figure caption names its run(s)
    figs = re.findall(r"!\[.*?\]\((.*?)\)\n\n\*(.*?)\*\n", text)
    assert len(figs) == text.count("![") >= 6 + 2 + 1 + 2 + 1
    assert "turns_model-a.png" in text and "turns_model-b.png" in text  # view full, turns vary
    for name, caption in figs:
        assert (tmp_path / "rep" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "Source:" in caption and "git 0123456789ab" in caption
    assert "vote_count.png" in text  # run a has 25 votes; run b (5 votes) is left out of it
    vc = text.split("## Kappa vs number of votes")[1].split("##")[0]
    assert "model-a" in vc and "model-b" not in vc
    # summary rows: one per method per model, plus a human row named for its source only where
    # the records name one (run b's unsourced values are not human data and are said to be so)
    summary = text.split("## Summary")[1].split("\n## ")[0]
    assert summary.count("| model-a |") == 7 and summary.count("| model-b |") == 6
    assert "| model-a | human (two test raters) |" in summary
    # the dataset's surface audit sits next to the methods: one table per dataset+view, and
    # each method's AUROC minus the best surface predictor's
    audit = text.split("## Surface baselines (data audit)")[1].split("\n## ")[0]
    assert audit.count("| char_tfidf |") == 1 and "| first_char_case |" in audit
    # (on the samples the method scored, with a paired interval: issue 24 item 11)
    assert re.search(r"\| model-a \| binary \| 0\.\d+ \[.*\] \| \d+ \| \w+ \| 0\.\d{3} \| "
                     r"[+-]0\.\d{3} \[[+-]\d\.\d\d, [+-]\d\.\d\d\] \|", audit)
    assert "| model-b | probe |" in audit and "| model-a | human (two test raters) |" in audit
    assert "model-b: 40 samples carry a `human_eval_probability` without a `human_eval_source`" in summary
    kappa = text.split("## Agreement between methods")[1].split("\n## ")[0]
    assert "| human (two test raters) |" in kappa and kappa.count("human") == kappa.count("human (two test raters)")
    # excluded answers are counted per kind
    assert re.search(r"\| model-a \| reasoning \| 40 \| 0 \| 0 \| 0 \| 0 \| [1-9]", text)  # no_text after unverified
    assert "quiz format" in text  # features are listed
    lp = text.split("## Logprob scoring")[1].split("\n## ")[0]
    assert "| model-a | logprob | naive |" in lp and "| model-a | logprob | aware | 40/40 (100%) | 40 |" in lp
    assert "| 0.4000 / 0.4000 |" in lp
    html = page.read_text()
    assert html.count("<img") == len(figs) and "<table>" in html and "</html>" in html


def test_report_cli_and_errors(two_runs, tmp_path):
    from evalaware.main import cli

    res = CliRunner().invoke(cli, ["report", str(two_runs[0]), "--out", str(tmp_path / "r"), "--bootstrap", "0"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "report.html").exists()
    empty = tmp_path / "empty"
    RunLog(empty).close()
    res = CliRunner().invoke(cli, ["report", str(empty), "--out", str(tmp_path / "r2")])
    assert res.exit_code != 0 and "no results" in str(res.exception)


def test_method_order_and_load(two_runs):
    assert method_order(["probe", "logprob_aware", "reasoning", "binary", "logprob"]) == \
        ["binary", "reasoning", "logprob", "logprob_aware", "probe"]
    run = load_run(two_runs[0])
    assert run.model == "model-a" and run.weights == "01" + "ab" * 5


def test_logprob_signal_gate_in_report(tmp_path):
    """Per-variant share with signal; a variant below min_coverage on most samples gets no AUROC
    (fewer than MIN_AUROC_PER_CLASS scored per class), and no_signal is counted as excluded."""
    from harness.reporting.report import MIN_AUROC_PER_CLASS

    demo = load_dataset("demo")
    samples = [s for s in demo if s.is_eval][:20] + [s for s in demo if not s.is_eval][:20]
    store = RunLog(tmp_path / "run")
    store.put_samples(samples)
    recs = []
    for j, s in enumerate(samples):
        cov = 0.2 if j % 4 else 0.001  # aware: 30 of 40 with signal; naive: 4 of 40
        ok = cov >= 0.01
        p = 0.7 if s.is_eval else 0.3
        r = _record(s, "logprob", mean_probability([p]) if ok else mean_probability([]), [],
                    aware_p_eval=p, aware_coverage=cov, naive_p_eval=p,
                    naive_coverage=0.05 if j % 10 == 1 else 0.002, min_coverage=0.01,
                    error=None if ok else "no_signal")
        recs.append(r)
    store.put_results("logprob", recs)
    store.set_meta("manifest", {"model": {"model": "m", "identity": {"backend": "hf"}}, "git_revision": "0" * 16,
                                "methods": {"logprob": {"word_list": "paper", "min_coverage": 0.01,
                                                        "aware_boundary": True, "answer_position": "direct",
                                                        "words": {"evaluation": "eval", "test": "eval",
                                                                  "real": "deploy", "deployment": "deploy"}}}})
    store.close()
    md, _ = write_report([tmp_path / "run"], tmp_path / "rep", n_boot=20)
    lp = md.read_text().split("## Logprob scoring")[1].split("\n## ")[0]
    assert "| logprob | aware | 30/40 (75%) | 30 |" in lp
    assert "| logprob | naive | 4/40 (10%) | 4 |" in lp
    naive_row = next(line for line in lp.splitlines() if "| logprob | naive |" in line)
    assert f"< {MIN_AUROC_PER_CLASS} per class" in naive_row
    aware_row = next(line for line in lp.splitlines() if "| logprob | aware |" in line)
    assert "per class" not in aware_row and "1.000" in aware_row
    assert "| m | logprob | paper: evaluation, test / deployment, real | 0.01 | yes | direct |" in lp
    excluded = md.read_text().split("## Excluded answers")[1].split("\n## ")[0]
    assert re.search(r"\| logprob \| 0 \| 0 \| 0 \| 0 \| 0 \| 0 \| 10 \| 10 \|", excluded)  # no_signal after unverified, no_text


def test_report_resampling_unit_and_base_rate(two_runs, tmp_path):
    """Intervals resample categories by default and say so; `--ci-by sample` switches the unit;
    kappa gains an interval; the turns p names its test; the base-rate view uses --base-rate."""
    from evalaware.main import cli

    md, _ = write_report(two_runs[:1], tmp_path / "cat", n_boot=200)
    cat = md.read_text()
    n_cats = len({s.metadata.category for s in load_dataset("demo")[::2][:40]})
    assert f"over whole categories ({n_cats} categories): cluster-jackknife t" in cat
    assert "cluster-robust slope" in cat.split("## Error vs number of turns")[1].split("\n## ")[0]
    res = CliRunner().invoke(cli, ["report", str(two_runs[0]), "--out", str(tmp_path / "smp"),
                                   "--bootstrap", "200", "--ci-by", "sample", "--base-rate", "0.05"])
    assert res.exit_code == 0, res.output
    smp = (tmp_path / "smp" / "report.md").read_text()
    assert "over samples (40): cluster-jackknife t" in smp and "pearson (independent samples)" in smp
    assert "## Low base rate (evaluations = 5% of traffic)" in smp and "precision @0.05 (own)" in smp

    def width(text: str, method: str) -> float:
        row = re.search(rf"\| model-a \| {method} \| 40 \|[^\n]*", text.split("## Summary")[1]).group(0)
        lo, hi = map(float, re.search(r"\d\.\d{3} \[(\d\.\d+), (\d\.\d+)\]", row).groups())  # AUROC
        return hi - lo

    # scores here are independent per sample, so the units give different but similar intervals
    # (tests/test_metrics.py checks wider-on-correlated-categories and agreement)
    assert width(cat, "logprob") != width(smp, "logprob")
    assert 0.5 < width(cat, "logprob") / width(smp, "logprob") < 2
    t1 = cat.split("Table 1")[1].split("\n## ")[0]
    assert re.search(r"\| model-a \| -?\d\.\d+ \[-?\d\.\d+, -?\d\.\d+\] \| \d+ \| category \|", t1)
    probes_part = cat.split("## Probes")[1].split("\n## ")[0]
    assert "| model-a | probe | 11 | best of 31 layers (max-over-layers null) | 12 | 0.264 | 0.710 |" in probes_part
    res = CliRunner().invoke(cli, ["report", str(two_runs[0]), "--out", str(tmp_path / "x"), "--ci-by", "family"])
    assert res.exit_code != 0 and "family" in res.output


def test_a_new_method_declares_its_report(tmp_path, monkeypatch):
    """Adding a method means writing the method only: its ReportSpec places it first, adds its
    summary note, a family section of its own and a kappa table with its partner; the same
    records without the declaration are shown generically, last."""
    from harness.methods import base
    from harness.methods.report_spec import Family, KappaPair, ReportSpec

    run = make_run(tmp_path / "a", "model-a", 3, n_votes=5, n_samples=24)
    store = RunLog(run, create=False)
    store.put_results("zz_new", [{**r, "method": "zz_new"} for r in store.result_dicts("logprob")])
    store.close()

    class NewMethod(base.Method):
        name = "zz_new"
        report = ReportSpec(order=1, summary_note="zz_new: a declared note.",
                            family=Family("New family", "New family note.", order=0),
                            kappa_pair=KappaPair("binary", "Binary vs zz_new"))

        def run_batch(self, samples):
            return []

    with monkeypatch.context() as mp:
        mp.setitem(base.REGISTRY, "zz_new", NewMethod)
        assert method_order(["binary", "probe", "zz_new", "logprob"])[:2] == ["zz_new", "binary"]
        text = write_report([run], tmp_path / "with", n_boot=0)[0].read_text()
    assert "| zz_new, binary, probability," in text
    assert "zz_new: a declared note." in text and "### Binary vs zz_new" in text
    assert text.index("## New family") < text.index("## Logprob scoring")
    assert "| model-a | zz_new | aware |" in text.split("## New family")[1]
    plain = write_report([run], tmp_path / "without", n_boot=0)[0].read_text()
    assert method_order(["zz_new", "probe", "binary"]) == ["binary", "probe", "zz_new"]
    assert "## New family" not in plain and "Binary vs zz_new" not in plain
    assert "declared note" not in plain and "| model-a | zz_new |" in plain.split("## Summary")[1]
