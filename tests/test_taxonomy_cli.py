"""`evalaware taxonomy`: --run reuse makes zero model calls; bad input gives one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalaware.main import cli
from harness.runlog import RunLog
from tests.helpers.cli import in_process
from tests.helpers.scripted import ScriptedBackend
from tests.helpers.taxonomy_texts import motivation_records

FAST = ["--restarts", "1", "--categories", "5", "--no-progress"]


@pytest.fixture()
def run_dir(tmp_path):
    recs, samples = motivation_records(40, seed=2)
    store = RunLog(tmp_path / "run")
    store.put_samples(samples)
    store.put_results("motivation", recs)
    store.close()
    return tmp_path / "run"


def invoke(*args):
    res = CliRunner().invoke(cli, ["taxonomy", *map(str, args)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def calls(run):
    s = RunLog(run, create=False)
    try:
        return sum(s.count_calls().values())
    finally:
        s.close()


def load(out):
    t = json.loads((Path(out) / "taxonomy.json").read_text())
    return t, t.pop("manifest")


def test_run_reuse_without_model_makes_no_calls(run_dir, tmp_path):
    before = calls(run_dir)
    out = invoke("--run", run_dir, "--out", tmp_path / "tax", *FAST)
    assert "model calls made: 0" in out and calls(run_dir) == before
    t, man = load(tmp_path / "tax")
    assert t["namer"] is None and man["calls"] == {"naming": {"model_calls": {}, "cache_hits": {}}}
    assert man["run_dir"] == str(run_dir) and "packages" in man
    with RunLog(run_dir, create=False) as log:  # the run's manifest lists the taxonomy
        entry = log.manifest()["taxonomies"][str((tmp_path / "tax").resolve())]
    assert entry["k"] == t["k"] and "taxonomy.json" in entry["files"]
    for f in ("taxonomy.md", "taxonomy.html", "sweep.png", "sizes.png"):
        assert (tmp_path / "tax" / f).stat().st_size > 0


def test_run_reuse_with_naming_model_is_cached(run_dir, tmp_path, tiny_model_dir):
    args = ["--run", run_dir, "--model", tiny_model_dir, "--backend", "hf", "--name-tokens", "4", *FAST]
    before = calls(run_dir)
    invoke(*args, "--out", tmp_path / "a")
    t1, m1 = load(tmp_path / "a")
    made = m1["calls"]["naming"]["model_calls"]["generate"]
    assert made == len(t1["clusters"]) + len([c for c in t1["categories"] if c["id"] != "T00"])
    assert calls(run_dir) == before + made
    # second time: every answer and every embedding from the run's store
    out = invoke(*args, "--out", tmp_path / "b")
    t2, m2 = load(tmp_path / "b")
    assert "model calls made: 0" in out and calls(run_dir) == before + made
    assert m2["calls"]["naming"] == {"model_calls": {}, "cache_hits": {"generate": made}}
    assert m2["texts_embedded"] == 0 and t2 == t1


def test_too_few_features_ends_with_a_plain_statement(tmp_path):
    """One distinct feature: exit 0, the statement on the terminal, json/md/html written."""
    from test_taxonomy_build import MCQ, _record, _vote

    store = RunLog(tmp_path / "run")
    store.put_results("motivation", [
        _record("a", [_vote(0, True, [MCQ]), _vote(1, True, [MCQ]), _vote(2, False, [])]),
        _record("b", [_vote(k, False, []) for k in range(3)], "deploy")])
    store.close()
    out = invoke("--run", tmp_path / "run", "--out", tmp_path / "tax", *FAST)
    assert out.startswith('The model called too little a test to cluster: 2 feature(s), 1 distinct, '
                          'from 1 sample(s): "Multiple-choice format" (2x in 1 sample)')
    assert "model calls made: 0" in out
    t, _ = load(tmp_path / "tax")
    assert t["clustered"] is False and [f["count"] for f in t["features"]] == [2]
    assert sorted(p.name for p in (tmp_path / "tax").glob("[!.]*")) == ["taxonomy.html", "taxonomy.json",
                                                                    "taxonomy.md"]


def run_main(*args):
    return in_process("taxonomy", *args)


def test_bad_input_one_line_errors(tmp_path, run_dir):
    r = run_main("--run", tmp_path / "missing", "--out", tmp_path / "o")
    assert r.returncode == 2 and "not a run directory" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    empty = tmp_path / "empty"
    RunLog(empty).close()
    r = run_main("--run", empty, "--out", tmp_path / "o")
    assert r.returncode == 2 and "no 'motivation' records" in r.stderr
    r = run_main("--run", run_dir, "--out", tmp_path / "o", "--k", "100000", "--no-progress")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: --k 100000")
    r = run_main("--run", run_dir, "--out", tmp_path / "o", "--embedder", tmp_path / "nope")
    assert r.returncode == 2 and "not a known embedding asset" in r.stderr
    assert not (tmp_path / "o" / "taxonomy.json").exists()
    for args, msg in [(["--out", tmp_path / "o"], "exactly one of --dataset"),
                      (["--run", run_dir, "--dataset", "demo", "--out", tmp_path / "o"], "exactly one"),
                      (["--dataset", "demo", "--out", tmp_path / "o"], "--dataset needs --model")]:
        r = run_main(*args)
        assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_dataset_mode_runs_motivation_then_reuse_is_free(tmp_path, tiny_model_dir):
    args = ["--model", tiny_model_dir, "--backend", "hf", "--name-tokens", "4", *FAST]
    res = CliRunner().invoke(cli, ["taxonomy", "--dataset", "demo", "--limit", "4",
                                   "--answer-tokens", "8", "--probe-tokens", "8", "--judge-tokens", "16",
                                   "--out", str(tmp_path / "t"), *map(str, args)])
    run = tmp_path / "t" / "run"
    store = RunLog(run, create=False)
    assert len(store.result_dicts("motivation")) == 4
    store.close()
    made = calls(run)
    assert made > 0
    res2 = CliRunner().invoke(cli, ["taxonomy", "--run", str(run), "--out", str(tmp_path / "t2"),
                                    *map(str, args)])
    assert calls(run) == made  # nothing new, whether or not the tiny model's judge found evidence
    assert (res.exit_code == 0) == (res2.exit_code == 0)


class ScriptedModel(ScriptedBackend):
    """A deterministic stand-in model for the motivation method and its judge (real runner, real
    method and judge code): it names a cue it finds in the sample, and as a judge returns the
    JSON verdict with a verbatim quote of the answer it judges."""

    CUES = [("\nB) ", "multiple-choice format"), ("\nA. ", "lettered answer options"),
            ("/testbed", "uploaded repository task"), ("Challenge:", "capture-the-flag challenge"),
            ("step by step", "math word problem with a final-answer line"),
            ("Question ", "numbered benchmark question")]

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer, self.answer, name="scripted-motivation")

    def answer(self, prompt: str) -> str:
        if "<answer>" in prompt:  # judge
            ans = prompt.split("<answer>")[-1].split("</answer>")[0].strip()
            if "testing me" not in ans:
                return '{"aware": false, "evidence": []}'
            quote = ans.split(" because")[0]
            feats = [f for _, f in self.CUES if f in ans]
            ev = [{"quote": quote, "feature": f} for f in feats]
            ev.append({"quote": "a quote the answer never contains", "feature": "none stated"})
            return json.dumps({"aware": True, "evidence": ev})
        if "Here is my answer." in prompt:  # the motivation question follows the answer
            found = [f for key, f in self.CUES if key in prompt]
            if not found:
                return "They are a real person who needs help with this."
            return "The user is probably testing me because of the " + ", ".join(found) + "."
        return "Here is my answer."


def test_motivation_runner_records_feed_the_taxonomy(tmp_path):
    from transformers import AutoTokenizer

    from harness.models import assets
    from harness.data.readers import load_dataset
    from harness.run.loop import run_methods
    from harness.taxonomy.build import TaxonomyConfig, build_taxonomy

    model = ScriptedModel(AutoTokenizer.from_pretrained(assets.prepare("smollm2")))
    samples = load_dataset("demo")
    run = tmp_path / "run"
    run_methods(samples, ["motivation"], model, run, judge=model, progress=False)
    store = RunLog(run, create=False)
    recs = store.result_dicts("motivation")
    tax = build_taxonomy(recs, TaxonomyConfig(n_categories=4, restarts=1), store=store,
                         samples=store.samples())
    store.close()
    flagged = {r["sample_id"] for r in recs if r["prediction"] == "eval"}
    assert flagged and set(tax["samples"]) == flagged
    texts = {f["text"] for c in tax["clusters"] for f in c["features"]}
    assert "multiple-choice format" in texts and "uploaded repository task" in texts
    quotes = [q for c in tax["clusters"] for f in c["features"] for o in f["occurrences"]
              for q in o["quotes"]]
    # the judge verified the real quotes; the invented one is kept, flagged, its quote as feature
    assert {q["verified"] for q in quotes} == {True, False}
    assert "a quote the answer never contains" in texts
    mmlu = tax["samples"]["science:organelle_atp"]
    assert "multiple-choice format" in {f["text"] for f in mmlu["features"]}
    assert mmlu["prompt_preview"].startswith("Which organelle produces most of the ATP")
    before = calls(run)
    out = invoke("--run", run, "--out", tmp_path / "tax", *FAST)
    assert "model calls made: 0" in out and calls(run) == before
