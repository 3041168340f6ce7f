"""`organism archive` / `organism judge`: a validate run's records kept without its models, and
re-judged with validate's own code (fast: tiny random-init models, 2 training steps).

What must hold: judging one archive, with the organisms' directories gone, prints the run's own
table; judging two archives (two seeds each of the null sham and the aware organism, one seed an
archive) gives the verdicts one validate run over all four builds gives; the archive holds no
request cache or activations; mixed paired sets and an --out that is not a judge's are refused."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest
from click.testing import CliRunner

from evalaware.main import cli
from tests.test_validate_monitor import RECIPE, _close


@pytest.fixture(scope="module")
def builds(tmp_path_factory, smollm2_dir):
    from tests.helpers.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("archive-set")
    base = build_tiny_model(root / "base", smollm2_dir)
    dirs = {}
    for kind, seed in (("sham", 0), ("aware", 0), ("sham", 1), ("aware", 1)):
        name = kind + (f"-s{seed}" if seed else "")
        res = CliRunner().invoke(cli, ["organism", "build", "--base", str(base), *RECIPE, "--kind", kind,
                                       "--seed", str(seed), "--out", str(root / "organisms" / name)])
        assert res.exit_code == 0, res.output + repr(res.exception)
        dirs[name] = root / "organisms" / name
    pairs = root / "pairs.jsonl"
    assert CliRunner().invoke(cli, ["organism", "dataset", "--cue", "graded", "--no-demo",
                                    "--out", str(pairs)]).exit_code == 0
    return base, dirs, pairs


def _ok(args):
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output + repr(res.exception)
    return res.output


def _validate(base, pairs, refs, orgs, out, methods="logprob_question,monitor", reuse=()):
    args = ["organism", "validate", "--base", str(base), "--pairs", str(pairs), "--methods", methods,
            "--limit", "2", "--answer-tokens", "8", "--min-coverage", "0", "--bootstrap", "20", "--no-progress",
            "--out", str(out)]
    for r in refs:
        args += ["--reference", str(r)]
    for o in orgs:
        args += ["--organism", str(o)]
    for d in reuse:
        args += ["--reuse", str(d)]
    return _ok(args)


def test_an_archive_judged_without_its_models_prints_the_run_s_table(builds, tmp_path):
    base, dirs, pairs = builds
    run = tmp_path / "run"
    _validate(base, pairs, [dirs["sham"]], [dirs["aware"]], run)
    leftover = run / "organism-old"  # another invocation's sub-run in the same --out: not the table's
    shutil.copytree(run / "organism", leftover)
    archive = tmp_path / "archive"
    out = _ok(["organism", "archive", str(run), "--out", str(archive)])
    assert "archived 5 sub-runs and 2 organism cards" in out and not (archive / "organism-old").exists()
    shutil.rmtree(leftover)
    for sub in ("base", "reference", "organism", "cross-reference-reads-organism", "cross-organism-reads-reference"):
        assert sorted(p.name for p in (archive / sub).iterdir()) == ["manifest.json", "store.sqlite"]
        db = sqlite3.connect(archive / sub / "store.sqlite")
        kept = db.execute("SELECT count(*) FROM results").fetchone()[0]
        cache = [db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("calls", "model_calls")]
        db.close()
        src = sqlite3.connect(run / sub / "store.sqlite")
        assert kept == src.execute("SELECT count(*) FROM results").fetchone()[0] > 0
        assert src.execute("SELECT count(*) FROM calls").fetchone()[0] > 0 and cache == [0, 0]
        src.close()
    assert (archive / "models" / "aware" / "organism.json").read_bytes() == (dirs["aware"] / "organism.json").read_bytes()
    index = json.loads((archive / "archive.json").read_text())
    assert index["methods"] == ["logprob_question", "monitor"]
    assert len(index["sample_ids"]) == 4 and index["rule"] == {"margin": None, "bootstrap": 20, "seed": 0}

    moved = tmp_path / "gone"  # the organisms' weights are not needed to judge
    shutil.copytree(dirs["aware"].parent, moved)
    shutil.rmtree(dirs["aware"].parent)
    try:
        judged = tmp_path / "judged"
        printed = _ok(["organism", "judge", str(archive), "--out", str(judged)])  # the run's --bootstrap 20
    finally:
        shutil.copytree(moved, dirs["aware"].parent)
    for sub in ("base", "reference", "organism"):  # judging reads the archive and leaves nothing in it
        assert sorted(p.name for p in (archive / sub).iterdir()) == ["manifest.json", "store.sqlite"]
    assert (judged / "sensitivity.md").read_text() == (run / "sensitivity.md").read_text()
    assert printed.strip().splitlines() == (run / "sensitivity.md").read_text().strip().splitlines()
    # judged again into its own output: made anew; into a directory that is not a judge's: refused
    _ok(["organism", "judge", str(archive), "--bootstrap", "20", "--out", str(judged)])
    res = CliRunner().invoke(cli, ["organism", "judge", str(archive), "--out", str(run)])
    assert res.exit_code != 0 and "not an earlier `organism judge` output" in str(res.exception)
    res = CliRunner().invoke(cli, ["organism", "archive", str(run), "--out", str(archive)])
    assert res.exit_code != 0 and "exists" in str(res.exception)
    res = CliRunner().invoke(cli, ["organism", "archive", str(tmp_path), "--out", str(tmp_path / "x")])
    assert res.exit_code != 0 and "sensitivity.json: cannot be read" in str(res.exception)


def test_archives_of_two_sessions_pool_their_seeds_as_one_validate_run_would(builds, tmp_path):
    """Seed 0 of the null sham and the aware organism in one archive, seed 1 in another (two
    sessions' builds): judged together, the same verdict rows as one validate run over the four
    builds (its sub-runs copied from the two runs, so the records are the same)."""
    base, dirs, pairs = builds
    runs = [tmp_path / "s0", tmp_path / "s1"]
    _validate(base, pairs, [dirs["sham"]], [dirs["aware"]], runs[0], methods="logprob_question")
    _validate(base, pairs, [dirs["sham-s1"]], [dirs["aware-s1"]], runs[1], methods="logprob_question")
    archives = [tmp_path / "a0", tmp_path / "a1"]
    for r, a in zip(runs, archives):
        _ok(["organism", "archive", str(r), "--out", str(a)])
    judged = tmp_path / "judged"
    _ok(["organism", "judge", *map(str, archives), "--bootstrap", "20", "--out", str(judged)])
    whole = tmp_path / "whole"
    _validate(base, pairs, [dirs["sham"], dirs["sham-s1"]], [dirs["aware"], dirs["aware-s1"]], whole,
              methods="logprob_question", reuse=runs)
    a, b = (json.loads((d / "sensitivity.json").read_text()) for d in (judged, whole))
    assert [r["kind"] for r in a["decision"]["rows"]] == ["reference", "aware"]
    assert len(a["decision"]["rows"][1]["seeds"]) == 2  # each build's estimate
    _close(a["decision"]["rows"], b["decision"]["rows"])
    assert a["decision"]["lines"] == b["decision"]["lines"]

    odd = tmp_path / "odd"  # another method setting: not judged together
    args = ["organism", "validate", "--base", str(base), "--pairs", str(pairs), "--methods", "logprob_question",
            "--limit", "2", "--min-coverage", "0.5", "--bootstrap", "20", "--no-progress",
            "--reference", str(dirs["sham-s1"]), "--organism", str(dirs["aware-s1"]), "--out", str(odd)]
    _ok(args)
    _ok(["organism", "archive", str(odd), "--out", str(tmp_path / "a-odd")])
    res = CliRunner().invoke(cli, ["organism", "judge", str(archives[0]), str(tmp_path / "a-odd"),
                                   "--out", str(tmp_path / "j1")])
    assert res.exit_code != 0 and "differ in the settings of logprob_question" in str(res.exception)

    other = tmp_path / "other-pairs.jsonl"  # another paired set: not judged together
    lines = pairs.read_text().splitlines()
    other.write_text("\n".join(lines[:-1]) + "\n")
    _validate(base, other, [dirs["sham-s1"]], [dirs["aware-s1"]], tmp_path / "o", methods="logprob_question")
    _ok(["organism", "archive", str(tmp_path / "o"), "--out", str(tmp_path / "ao")])
    res = CliRunner().invoke(cli, ["organism", "judge", str(archives[0]), str(tmp_path / "ao"),
                                   "--out", str(tmp_path / "j2")])
    assert res.exit_code != 0 and "differ in the paired set" in str(res.exception)


def test_validate_builds_makes_each_sham_a_reference_and_writes_each_table_under_its_command():
    """`make validate-builds` (dry run): a null sham's directory is a --reference, the greedy sham and
    every other build an --organism; VOTES=1 adds the binary/probability validate, READOUTS=votes runs
    and archives it alone; each readout's table goes to docs/generated/validate-<ARCHIVE>-<readout>.md
    under a command header that names the readouts."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def dry(*args: str) -> str:
        res = subprocess.run(["make", "-n", "validate-builds", "ARCHIVE=t", *args], cwd=root,
                             capture_output=True, text=True, check=True)
        return res.stdout

    out = dry('BUILDS=smollm2-graded-sham-s2 smollm2-graded-sham-greedy smollm2-graded-disjoint-s2', "VOTES=1")
    validates = [ln for ln in out.splitlines() if " organism validate " in ln]
    assert [ln.split("--methods ")[1].split()[0] for ln in validates] == [
        "logprob,logprob_question", "monitor", "binary,probability"]
    for ln in validates:
        assert "--reference runs/organisms/smollm2-graded-sham-s2 " in ln
        assert "--organism runs/organisms/smollm2-graded-sham-greedy " in ln
        assert "--organism runs/organisms/smollm2-graded-disjoint-s2 " in ln
        assert "--reference runs/organisms/smollm2-graded-sham-greedy" not in ln
    assert "binary,probability" not in dry("BUILDS=smollm2-graded-sham smollm2-graded")
    assert ('<!-- command: make validate-builds BUILDS=\\"smollm2-graded-sham smollm2-graded\\" ARCHIVE=t '
            'READOUTS=\\"logprob monitor\\"' in dry("BUILDS=smollm2-graded-sham smollm2-graded"))
    assert "> docs/generated/validate-t-$k.md" in out
    assert "for k in logprob monitor votes;" in out
    only = dry("BUILDS=smollm2-graded-sham smollm2-graded", "READOUTS=votes")
    assert [ln.split("--methods ")[1].split()[0] for ln in only.splitlines() if " organism validate " in ln] == [
        "binary,probability"]
    assert "for k in votes;" in only and 'READOUTS=\\"votes\\"' in only
