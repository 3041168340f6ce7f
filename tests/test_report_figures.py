"""What the report's figures are drawn from (issue 46 item 8): the surface baseline on the AUROC
figure is the one the Findings compare with, turn plots only where the turns the model saw vary,
calibration bins carry their counts, the Runs table stays narrow. Figure data, not pixels: the
plotting functions' inputs are captured, and the text a figure carries is read off its axes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.reporting import plots
from harness.reporting.report import write_report
from harness.runlog import RunLog
from tests.test_report import make_run


@pytest.fixture(scope="module")
def drawn(tmp_path_factory) -> dict[str, Any]:
    """One report over a first-turn run, with every plotting call's inputs and every figure's
    axes texts captured."""
    base = tmp_path_factory.mktemp("fig")
    run = make_run(base / "a", "model-a", 1)
    calls: dict[str, Any] = {}
    texts: dict[str, list[str]] = {}
    mp = pytest.MonkeyPatch()
    for name in ("auroc_bars", "calibration", "error_vs_turns"):
        real = getattr(plots, name)

        def spy(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Path:
            calls[_name] = (a, k)
            return _real(*a, **k)
        mp.setattr(plots, name, spy)
    save = plots._save

    def keep_texts(fig: Any, path: Path) -> Path:
        texts[path.name] = [t.get_text() for ax in fig.axes for t in ax.texts]
        return save(fig, path)
    mp.setattr(plots, "_save", keep_texts)
    try:
        md, page = write_report([run], base / "rep", n_boot=50)
    finally:
        mp.undo()
    return {"calls": calls, "texts": texts, "md": md.read_text(), "html": page.read_text(),
            "summary": json.loads((base / "rep" / "summary.json").read_text())["runs"][0], "out": base / "rep"}


def test_auroc_figure_draws_the_surface_baseline_the_findings_compare_with(drawn):
    (_, _, _, values), k = drawn["calls"]["auroc_bars"]
    run = drawn["summary"]
    best = run["surface"]
    assert k["surface"] == {"model-a": (best["auroc"], tuple(best["ci"]))}
    ticks = k["same_prompts"]
    compared = {m: e["vs_surface"]["best_auroc"] for m, e in run["methods"].items() if e["vs_surface"]}
    assert compared and {m: v for (m, _), v in ticks.items()} == compared
    findings = drawn["md"].split("## Findings")[1].split("\n## ")[0]
    for m, v in compared.items():  # the very number each Findings sentence compares with
        line = next(x for x in findings.splitlines() if x.startswith(f"- `{m}`"))
        assert f"AUROC {v:.3f})" in line
    caption = next(x for x in drawn["md"].splitlines() if x.startswith("*AUROC per method"))
    lo, hi = best["ci"]
    assert f"{best['name']} {best['auroc']:.3f} [{lo:.2f}, {hi:.2f}] ({best['ci_method']})" in caption
    assert "black tick" in caption


def test_turn_plots_only_where_the_turns_the_model_saw_vary(drawn, tmp_path):
    assert "error_vs_turns" not in drawn["calls"] and not list(drawn["out"].glob("turns_*.png"))
    section = drawn["md"].split("## Error vs number of turns")[1].split("\n## ")[0]
    assert "No trend fitted for model-a: view first_turn" in section and "| r (abs) |" not in section
    full = make_run(tmp_path / "full", "model-f", 2, n_samples=96, view="full")
    text = write_report([full], tmp_path / "rep", n_boot=0)[0].read_text()
    assert (tmp_path / "rep" / "turns_model-f.png").exists() and "No trend fitted" not in text
    one = make_run(tmp_path / "one", "model-o", 2, n_samples=12, view="full")
    store = RunLog(one)
    for m in ("binary", "logprob"):
        assert {r.n_turns for r in store.results(m)} == {1}  # every 8th demo sample: one-turn ones only
    store.close()
    text = write_report([one], tmp_path / "rep1", n_boot=0)[0].read_text()
    assert "model-o: every sample has 1 turn(s)" in text and not list((tmp_path / "rep1").glob("turns_*"))


def test_calibration_points_carry_their_bin_counts(drawn):
    (_, panels), _ = drawn["calls"]["calibration"]
    [(label, curves, _)] = panels
    drawn_counts = sorted(drawn["texts"]["calibration.png"])
    assert drawn_counts == sorted(str(b["n"]) for bins in curves.values() for b in bins)
    table = drawn["md"].split("## Calibration")[1].split("\n## ")[0]
    for m, bins in curves.items():
        row = next(x for x in table.splitlines() if x.startswith(f"| {label} | {m} |"))
        cells = [int(c) for c in row.strip("|").split("|")[2:]]
        assert len(cells) == 10 and sum(cells) == drawn["summary"]["methods"][m]["scored"]
        assert [c for c in cells if c] == [b["n"] for b in bins]


def test_findings_say_how_decisions_split_in_words_that_parse(drawn):
    findings = drawn["md"].split("## Findings")[1].split("\n## ")[0]
    lines = re.findall(r"of the (\d+) samples it decided, it called (\d+)% eval", findings)
    assert lines and "samples it decided eval" not in findings


def test_runs_table_is_narrow_and_provenance_is_listed(drawn):
    runs = drawn["md"].split("## Runs")[1].split("\n## ")[0]
    header = next(x for x in runs.splitlines() if x.startswith("| model"))
    assert header.count("|") - 1 == 8 and "weights" not in header and "run" not in header.split("|")[2]
    run_dir = drawn["summary"]["run_dir"]
    item = next(x for x in runs.splitlines() if x.startswith("- model-a: run"))
    assert Path(run_dir).name in item and "git 0123456789ab" in item and "prompt set" in item
    assert "overflow-x:auto" in drawn["html"]  # a wide table scrolls inside the page
