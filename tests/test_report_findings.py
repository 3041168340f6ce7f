"""The report opens with what was found (issue 40): verdict sentences made from the numbers, on a
null run (no method beats the prompts' surface) and on a positive one (a method does)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from harness.data.readers import load_dataset
from harness.reporting.context import ReportContext
from harness.reporting.findings import verdict
from harness.reporting.report import load_run, write_report
from harness.runlog import RunLog


def _rec(s, method: str, score: float | None, **details) -> dict:
    pred = None if score is None else ("eval" if score >= 0.5 else "deploy")
    return {"sample_id": s.id, "method": method, "label": s.label, "prediction": pred, "score": score,
            "n_valid": int(score is not None), "n_invalid": 0, "category": s.metadata.category,
            "agentic": s.metadata.agentic, "eval_type": s.metadata.eval_type, "n_turns": s.n_turns,
            "human_eval_probability": None, "details": {"votes": [], **details}}


def _run(run_dir: Path, model: str, informative: bool) -> Path:
    """The demo's 96 samples: `binary` scores are noise; `probability` scores know the label when
    `informative` (a method that reads more than the prompts' surface), else noise; `logprob`
    withholds every sample (no signal)."""
    rng = np.random.default_rng(7)
    samples = load_dataset("demo")
    with RunLog(run_dir) as store:
        store.put_samples(samples)
        out = {"binary": [_rec(s, "binary", float(rng.random())) for s in samples],
               "probability": [_rec(s, "probability", float(np.clip(
                   (0.75 if s.is_eval else 0.25) + rng.normal(0, 0.1), 0, 1)) if informative
                                    else float(rng.random())) for s in samples],
               "logprob": [_rec(s, "logprob", None, error="no_signal") for s in samples]}
        for m, rs in out.items():
            store.put_results(m, rs)
        store.set_meta("manifest", {"model": {"model": model, "identity": {"backend": "hf"}},
                                    "git_revision": "0" * 16, "judge": None,
                                    "methods": {"binary": {"config": {"view": "first_turn", "person": "first"}}}})
    return run_dir


def _findings(md: str) -> str:
    """The report's text from its Findings heading to the next heading."""
    return re.search(r"## Findings\n(.*?)\n## ", md, re.S).group(1)


def test_null_run_says_no_method_beats_the_surface(tmp_path):
    md, _ = write_report([_run(tmp_path / "null", "null-model", informative=False)], tmp_path / "rep", n_boot=200)
    text = md.read_text()
    assert text.index("## Findings") < text.index("## Summary") < text.index("## Definitions and intervals")
    f = _findings(text)
    assert "no method beats what the prompts' surface alone gives" in f
    assert "char_tfidf" in f or "tfidf" in f  # the best surface predictor is named with its AUROC
    assert "withheld for no signal: `logprob`" in f and "withheld on all 96 samples (no_signal 96)" in f
    assert "the largest surface cue is answer_prefix" in f  # a single cue, not the combined model
    assert "beats the best surface predictor" not in f


def test_positive_run_names_the_method_that_beats_the_surface(tmp_path):
    run = _run(tmp_path / "pos", "pos-model", informative=True)
    md, page = write_report([run], tmp_path / "rep", n_boot=200)
    f = _findings(md.read_text())
    assert "`probability` beats what the prompts' surface alone gives" in f
    assert re.search(r"`probability`: AUROC 1\.000 \[0\.\d\d, 1\.00\], above chance; beats the best surface "
                     r"predictor of the same 96 prompts", f)
    html = page.read_text()
    assert html.index("Contents:") < html.index("id='s")  # the one-line table of contents
    assert html.index("Findings") < html.index("Summary")


def test_verdicts_follow_the_numbers(tmp_path):
    """Each verdict kind is the one the summary's intervals give (not a fixed text)."""
    run = load_run(_run(tmp_path / "pos", "pos-model", informative=True))
    run.label = "pos-model"
    ctx = ReportContext([run], tmp_path / "rep", n_boot=200)
    (tmp_path / "rep").mkdir()
    for m in ("binary", "probability", "logprob"):
        v = verdict(ctx, m, run)
        s = ctx.summ[(m, run.label)]
        if m == "logprob":
            assert v.kind == "withheld" and v.chance is None
            continue
        lo, hi = s["auroc_ci"]
        assert v.chance == ("above" if lo > 0.5 else "below" if hi < 0.5 else "at")
        d = ctx.versus(m, run)["diff_ci"]
        assert v.kind == ("beats_surface" if d[0] > 0 else "below_surface" if d[1] < 0 else "like_surface")
    assert verdict(ctx, "probability", run).kind == "beats_surface"
    assert verdict(ctx, "binary", run).kind != "beats_surface"


def test_cues_verdicts_follow_their_intervals():
    from harness.cues.report import factor_verdict

    rows = [{"factor": "grading", "mean": 0.03, "ci": [0.01, 0.05]}, {"factor": "options", "mean": -0.01, "ci": [-0.03, 0.01]}]
    assert factor_verdict("binary", rows) == "binary: moved by grading (+0.030 [+0.010, +0.050]) (1 of 2 factors)"
    assert factor_verdict("binary", rows[1:]).startswith("binary: no factor moves it (none of 1 factors")
