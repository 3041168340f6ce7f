"""The gaps a re-run of issue 35's hostile pass left, each on real files: tampered activation
index rows (offsets out of range, swapped, shared, pointing at another shard), damaged or
hand-made steering vectors, links planted in a run directory under the names the run writes,
cue factors whose own code raises, `intervene` re-running each method with its own recorded
settings, `activations info` checking the shards, and `export --out - | head`."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from harness.core.errors import EvalAwareError
from harness.data.readers import load_dataset
from harness.runlog import RunLog
from probes.activations.shard_file import sha256
from probes.activations.store import ActivationStore
from tests.helpers.cli import in_process, one_line as _one_line, run_main as _cli
from tests.helpers.probe_runs import answer_run, random_samples

ROOT = Path(__file__).parents[1]
POOLINGS = ("last_prompt", "mean_prompt")
SHARD = "shard-00001.safetensors"  # the middle one of three
LAYER = 1  # the probe's layer


def _activations(run: Path) -> dict[str, tuple[list[str], dict[int, np.ndarray]]]:
    store = RunLog(run, create=False)
    try:
        acts = ActivationStore(store, "default")
        return {p: acts.load(p) for p in POOLINGS}
    finally:
        store.close()


# --- 1. activation index rows (#9/#10) ----------------------------------------------------------

@pytest.fixture(scope="module")
def captured(tmp_path_factory, tiny_model_dir, hf_tiny):
    """A run of 24 samples captured by the CLI in three shards of 8, a probe trained on it, the
    activations as read back and the probe's scores."""
    from click.testing import CliRunner

    from evalaware.main import cli

    root = tmp_path_factory.mktemp("rerun")
    run, probe = root / "run", root / "probe"
    answer_run(run, random_samples(n_groups=6, per_group=4, seed=3), hf_tiny, answers=False).close()
    r = CliRunner()
    out = r.invoke(cli, ["activations", "capture", "--run", str(run), "--model", str(tiny_model_dir),
                         "--pooling", ",".join(POOLINGS), "--shard-size", "8", "--no-progress"])
    assert out.exit_code == 0, out.output + repr(out.exception)
    out = r.invoke(cli, ["probes", "train", "--run", str(run), "--pooling", "mean_prompt",
                         "--layer", str(LAYER), "--out", str(probe), "--n-boot", "20", "--cv", "grouped",
                         "--no-progress"])
    assert out.exit_code == 0, out.output + repr(out.exception)
    scores = root / "scores.jsonl"
    out = r.invoke(cli, ["probes", "apply", "--probe", str(probe), "--run", str(run), "--out", str(scores)])
    assert out.exit_code == 0, out.output + repr(out.exception)
    return run, probe, _activations(run), scores.read_text()


def _rows(run: Path, shard: int = 1) -> list[tuple[str, int]]:
    """(sample id, offset) of the probe's rows (mean_prompt, its layer) in one shard, by offset."""
    db = sqlite3.connect(run / "store.sqlite")
    try:
        return db.execute("SELECT sample_id, offset FROM act_index WHERE capture='default' AND "
                          "pooling='mean_prompt' AND layer=? AND shard=? ORDER BY offset",
                          (LAYER, shard)).fetchall()
    finally:
        db.close()


def _set(run: Path, sample: str, **values: int) -> None:
    db = sqlite3.connect(run / "store.sqlite")
    try:
        sets = ", ".join(f"{k}=?" for k in values)
        db.execute(f"UPDATE act_index SET {sets} WHERE capture='default' AND pooling='mean_prompt' "
                   f"AND layer=? AND sample_id=?", (*values.values(), LAYER, sample))
        db.commit()
    finally:
        db.close()


# Each tampering returns the samples an error may name (the first wrong row read, in run order).
def _swap(run: Path) -> set[str]:
    (a, oa), (b, ob) = _rows(run)[:2]
    _set(run, a, offset=ob)
    _set(run, b, offset=oa)
    return {a, b}


def _out_of_range(run: Path) -> set[str]:
    a, _ = _rows(run)[2]
    _set(run, a, offset=99)
    return {a}


def _shared(run: Path) -> set[str]:
    (a, _), (b, ob) = _rows(run)[3], _rows(run)[4]
    _set(run, a, offset=ob)
    return {a, b}


def _other_shard(run: Path) -> set[str]:
    """A row of shard 1 pointed at the same offset of shard 2 (in range: another sample's)."""
    a, _ = _rows(run)[5]
    _set(run, a, shard=2)
    return {a}


def _names_one(text: str, samples: set[str]) -> bool:
    return any(f"sample {s!r}" in text for s in samples)


TAMPER = {"swapped": _swap, "out_of_range": _out_of_range, "shared": _shared,
          "other_shard": _other_shard}


@pytest.fixture(params=sorted(TAMPER))
def tampered(request, captured, tmp_path):
    """A copy of the captured run with index rows tampered; (run, probe, originals, scores,
    the sample whose row is wrong, the shard its row names)."""
    run, probe, acts, scores = captured
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    samples = TAMPER[request.param](copy)
    shard = "shard-00002.safetensors" if request.param == "other_shard" else SHARD
    return copy, probe, acts, scores, samples, shard


def test_a_tampered_index_row_fails_apply_and_info_with_one_line(tampered, monkeypatch, capsys):
    """No reader gets another sample's vector: one line naming the shard, the capture and the
    sample (exit 2), from `probes apply` and from `activations info`."""
    run, probe, _, _, samples, shard = tampered
    for args in (["probes", "apply", "--probe", probe, "--run", run],
                 ["activations", "info", "--run", run]):
        code, out, err = _cli(args, monkeypatch, capsys)
        line = _one_line(code, err)
        assert str(run / "activations" / "default") in line and shard in line, line
        assert "capture 'default'" in line and _names_one(line, samples), line
        assert "activations capture" in line and "scored" not in out


def test_a_capture_rerun_recaptures_the_samples_of_tampered_rows(tampered, tiny_model_dir,
                                                                  monkeypatch, capsys, tmp_path):
    run, probe, originals, scores, samples, shard = tampered
    code, out, err = _cli(["activations", "capture", "--run", run, "--model", tiny_model_dir,
                           "--pooling", ",".join(POOLINGS), "--shard-size", "8", "--no-progress"],
                          monkeypatch, capsys)
    assert code == 0, err
    assert "already done)" in out and _names_one(out, samples) and "index rows" in out, out
    again = _activations(run)
    for p in POOLINGS:
        ids, X = again[p]
        ids0, X0 = originals[p]
        assert sorted(ids) == sorted(ids0)
        pos = [ids.index(s) for s in ids0]
        for layer in X0:  # a sample captured in another batch: equal up to fp16 rounding
            np.testing.assert_allclose(X[layer][pos], X0[layer], rtol=1e-2, atol=1e-3)
    code, out, err = _cli(["probes", "apply", "--probe", probe, "--run", run, "--out", tmp_path / "s.jsonl"],
                          monkeypatch, capsys)
    assert code == 0, err
    assert _scores((tmp_path / "s.jsonl").read_text()) == pytest.approx(_scores(scores), abs=1e-3)
    code, out, err = _cli(["activations", "info", "--run", run], monkeypatch, capsys)
    assert code == 0 and "checked: 4 shard(s)" in out and "store: 24 samples" in out, out + err
    code, out, err = _cli(["activations", "capture", "--run", run, "--model", tiny_model_dir,
                           "--pooling", ",".join(POOLINGS), "--no-progress"], monkeypatch, capsys)
    assert code == 0 and "captured 0 samples" in out and "corrupt" not in out, out + err


def _scores(jsonl: str) -> dict[str, float]:
    return {r["sample_id"]: r["p_eval"] for r in map(json.loads, jsonl.splitlines())}


def _strip_row_record(run: Path) -> None:
    """Make the capture look like one written before shards recorded their rows' samples: the
    shards rewritten without that metadata, their sizes and sha256 updated in the index."""
    d = run / "activations" / "default"
    db = sqlite3.connect(run / "store.sqlite")
    try:
        for f in sorted(d.glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as g:
                meta = {k: v for k, v in (g.metadata() or {}).items() if not k.startswith("rows/")}
            save_file(load_file(str(f)), str(f), metadata=meta)
            db.execute("UPDATE act_shards SET bytes=?, sha256=? WHERE capture='default' AND shard=?",
                       (f.stat().st_size, sha256(f), f.name))
        db.commit()
    finally:
        db.close()


def test_a_capture_without_the_row_record_still_reads_and_refuses_a_shared_row(captured, tmp_path,
                                                                               monkeypatch, capsys):
    run, probe, originals, scores = captured
    old = tmp_path / "old"
    shutil.copytree(run, old)
    _strip_row_record(old)
    again = _activations(old)
    for p in POOLINGS:
        assert again[p][0] == originals[p][0]
        for layer in originals[p][1]:
            np.testing.assert_array_equal(again[p][1][layer], originals[p][1][layer])
    for tamper in (_shared, _out_of_range):
        copy = tmp_path / tamper.__name__
        shutil.copytree(old, copy)
        samples = tamper(copy)
        code, _, err = _cli(["probes", "apply", "--probe", probe, "--run", copy], monkeypatch, capsys)
        line = _one_line(code, err)
        assert SHARD in line and _names_one(line, samples), line


def test_activations_info_names_a_corrupt_shard(captured, tmp_path, monkeypatch, capsys):
    run, _, _, _ = captured
    code, out, err = _cli(["activations", "info", "--run", run], monkeypatch, capsys)
    assert code == 0 and "checked: 3 shard(s)" in out, out + err
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    f = copy / "activations" / "default" / SHARD
    b = bytearray(f.read_bytes())
    b[len(b) // 2] ^= 0xFF
    f.write_bytes(bytes(b))
    code, out, err = _cli(["activations", "info", "--run", copy], monkeypatch, capsys)
    line = _one_line(code, err)
    assert f"{SHARD} (sha256" in line and "1 corrupt shard(s)" in line, line
    assert "shard-00000" not in line and "shard-00002" not in line


# --- 2. steering vector files (#20) ---------------------------------------------------------------

@pytest.fixture
def vector(tmp_path) -> Path:
    from probes.steering.direction import from_differences

    rng = np.random.default_rng(0)
    raw = {1: rng.standard_normal(16), 2: rng.standard_normal(16)}
    vec = from_differences(raw, {1: 3.0, 2: 4.5}, {"model": "tiny", "pooling": "mean_prompt"})
    return vec.save(tmp_path / "vec")


def _edit(d: Path, tensors=None, meta=None, rehash: bool = True) -> None:
    """Edit a saved vector; `rehash`: record the sha256 of the edited directions and norms, as a
    careful forger (or a tool that re-saves) would."""
    from probes.steering.direction import SteeringVector

    t = {k: v.clone() for k, v in load_file(str(d / "vector.safetensors")).items()}
    m = json.loads((d / "vector.json").read_text())
    if tensors:
        tensors(t)
        save_file(t, str(d / "vector.safetensors"), metadata={"format": m["format"]})
    if meta:
        meta(m)
    if rehash and "sha256" in m:
        layers = [int(x) for x in m["layers"]]
        v = SteeringVector({l: t[f"direction/{l}"].numpy() for l in layers}, {},
                           {l: float(m["norms"][str(l)]) for l in layers}, m)
        m["sha256"] = v.sha256
    (d / "vector.json").write_text(json.dumps(m))


def _put(key, index, value):
    def edit(t):
        t[key][index] = value
    return edit


def _scale(key, factor):
    def edit(t):
        t[key] *= factor
    return edit


def _norm(layer, value):
    def edit(m):
        m["norms"][str(layer)] = value
    return edit


VECTOR_DAMAGE = {
    "nan_direction": (dict(tensors=_put("direction/1", 3, float("nan"))), "vector.safetensors",
                      "tensor 'direction/1': 1 non-finite value(s) (first at index 3"),
    "inf_raw": (dict(tensors=_put("raw/2", 0, float("inf"))), "vector.safetensors",
                "tensor 'raw/2': 1 non-finite value(s)"),
    "nan_norm": (dict(meta=_norm(2, float("nan"))), "vector.json", "field 'norms' of layer 2: nan"),
    "inf_norm": (dict(meta=_norm(1, float("inf"))), "vector.json", "field 'norms' of layer 1: inf"),
    "zero_norm": (dict(meta=_norm(1, 0.0)), "vector.json", "field 'norms' of layer 1: 0.0"),
    "no_norm": (dict(meta=lambda m: m["norms"].pop("2"), rehash=False), "vector.json",
                "field 'norms' of layer 2: missing"),
    "scaled_direction": (dict(tensors=_scale("direction/2", 100.0)), "vector.safetensors",
                         "tensor 'direction/2': length 100, expected 1"),
    "no_sha256": (dict(meta=lambda m: m.pop("sha256")), "vector.json", "field 'sha256': missing"),
    "stale_sha256": (dict(tensors=_put("direction/1", 0, 0.0), rehash=False), "vector.json",
                     "do not match the recorded sha256"),
    "text_layers": (dict(meta=lambda m: m.update(layers="1,2"), rehash=False), "vector.json",
                    "field 'layers': '1,2' is not a non-empty list of layer ids"),
}


@pytest.mark.parametrize("case", sorted(VECTOR_DAMAGE))
def test_a_damaged_steering_vector_is_refused_naming_the_file(case, vector):
    from probes.steering.direction import load_vector

    assert load_vector(vector).layers == [1, 2]  # as saved, it loads
    kw, file, message = VECTOR_DAMAGE[case]
    _edit(vector, **kw)
    with pytest.raises(EvalAwareError) as e:
        load_vector(vector)
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"{vector / file}: ") and message in text, text


def test_steer_run_refuses_a_nan_vector_with_one_line_before_any_model(vector, tmp_path,
                                                                       monkeypatch, capsys):
    _edit(vector, tensors=_put("direction/2", 5, float("nan")))
    code, _, err = _cli(["steer", "run", "--vector", vector, "--model", tmp_path / "no-such-model",
                         "--dataset", "demo", "--out", tmp_path / "steer"], monkeypatch, capsys)
    line = _one_line(code, err)
    assert str(vector / "vector.safetensors") in line and "non-finite" in line, line
    assert not (tmp_path / "steer").exists()


# --- 3. links planted in a run directory (#26) -------------------------------------------------------

def _records_run(path: Path, n: int = 4, pad: int = 0) -> Path:
    samples = load_dataset("demo")[:n]
    recs = [{"sample_id": s.id, "method": "binary", "label": s.label, "prediction": "eval",
             "score": 0.5, "n_valid": 1, "n_invalid": 0, "category": s.metadata.category,
             "agentic": False, "eval_type": "", "n_turns": 1, "details": {"pad": "x" * pad}}
            for s in samples]
    with RunLog(path) as st:
        st.put_samples(samples)
        st.put_results("binary", recs)
    return path


@pytest.fixture
def victim(tmp_path) -> Path:
    v = tmp_path / "victim.txt"
    v.write_text("precious\n")
    return v


def _plant(kind: str, at: Path, target: Path) -> None:
    at.unlink(missing_ok=True)
    (os.symlink if kind == "symlink" else os.link)(target, at)


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_a_link_planted_at_the_manifest_temporary_name_is_not_written_through(kind, tmp_path, victim):
    run = _records_run(tmp_path / "run")
    _plant(kind, run / "manifest.json.tmp", victim)
    with RunLog(run) as st:
        st.write_manifest({"model": {"model": "m"}})
    assert victim.read_text() == "precious\n"
    assert json.loads((run / "manifest.json").read_text())["model"] == {"model": "m"}
    assert not list(run.glob(".manifest.json.*"))  # no temporary file left behind


def test_a_hard_linked_manifest_or_results_file_is_replaced_not_written_through(tmp_path, victim):
    run = _records_run(tmp_path / "run")
    _plant("hardlink", run / "manifest.json", victim)
    _plant("hardlink", run / "results.jsonl", victim)
    with RunLog(run) as st:
        st.write_manifest({"model": {"model": "m"}})
        assert st.export_jsonl(run / "results.jsonl") == 4
    assert victim.read_text() == "precious\n"
    assert len((run / "results.jsonl").read_text().splitlines()) == 4


def test_a_symlinked_manifest_or_results_file_is_refused_with_one_line(tmp_path, victim):
    run = _records_run(tmp_path / "run")
    _plant("symlink", run / "results.jsonl", victim)
    with RunLog(run) as st, pytest.raises(EvalAwareError, match=r"results\.jsonl: is a symbolic link"):
        st.export_jsonl(run / "results.jsonl")
    (run / "results.jsonl").unlink()
    _plant("symlink", run / "manifest.json", victim)
    with RunLog(run) as st, pytest.raises(EvalAwareError, match=r"manifest\.json: is a symbolic link"):
        st.write_manifest({"model": {"model": "m"}})
    assert victim.read_text() == "precious\n" and (run / "manifest.json").is_symlink()


@pytest.mark.parametrize("kind", ["symlink", "hardlink"])
def test_export_follows_no_link_planted_at_its_partial_name(kind, tmp_path, victim, monkeypatch, capsys):
    run = _records_run(tmp_path / "run")
    _plant(kind, run / "results.jsonl.partial", victim)
    code, out, err = _cli(["export", run], monkeypatch, capsys)
    assert code == 0, err
    assert victim.read_text() == "precious\n"
    assert not (run / "results.jsonl").is_symlink()
    assert len((run / "results.jsonl").read_text().splitlines()) == 4
    _plant("symlink", run / "results.csv", victim)
    code, out, err = _cli(["export", run, "--format", "csv"], monkeypatch, capsys)
    line = _one_line(code, err)
    assert f"{run / 'results.csv'}: is a symbolic link" in line and victim.read_text() == "precious\n"


# --- 4. cue factors whose own code raises (#29) ------------------------------------------------------

FACTOR_FILE = '''
from harness.cues.factors import Factor, NotApplicable


class Boom(Factor):
    def detect(self, messages, turns="first"):
        if "{trigger}" in messages[-1].content:
            raise ValueError("kaboom")
        return False

    def add(self, messages, turns="first"):
        if {add_raises}:
            raise RuntimeError("cannot add")
        raise NotApplicable("never added")

    def remove(self, messages, turns="first"):
        return messages


FACTORS = [Boom("{name}", "raises")]
'''


def test_a_factor_whose_detect_raises_stops_cues_with_one_line_before_any_model(tmp_path,
                                                                                 tiny_model_dir):
    from harness.core.sample import Message
    from harness.data.readers import write_jsonl

    samples = random_samples(n_groups=2, per_group=2, seed=1)
    target = samples[2]
    samples[2] = replace(target, messages=(Message("user", target.messages[0].content + " trigger-zz"),))
    data = tmp_path / "data.jsonl"
    write_jsonl(samples, data)
    (tmp_path / "boom.py").write_text(FACTOR_FILE.format(name="boom", trigger="trigger-zz", add_raises=False))
    p = in_process("cues", "--model", tiny_model_dir, "--backend", "hf", "--dataset", data,
                   "--factors", f"grading,{tmp_path / 'boom.py'}", "--out", tmp_path / "cues", "--no-progress")
    line = _one_line(p.returncode, p.stderr)
    assert f"factor 'boom' raised ValueError: kaboom while detecting it in sample {target.id!r}" in line, line
    assert not (tmp_path / "cues").exists()  # refused before the run directory, or a model


@pytest.mark.parametrize("design", ["single", "factorial"])
def test_a_factor_whose_add_raises_names_factor_sample_and_exception(design, tmp_path):
    from harness.cues.factors import load_factor_file
    from harness.cues.variants import FactorError, build_plan

    (tmp_path / "boom.py").write_text(FACTOR_FILE.format(name="boom_add", trigger="never-present-zz", add_raises=True))
    factors = load_factor_file(tmp_path / "boom.py")
    samples = load_dataset("demo")[:2]
    with pytest.raises(FactorError) as e:
        build_plan(samples, factors, design)
    assert str(e.value) == (f"factor 'boom_add' raised RuntimeError: cannot add while adding it to "
                            f"sample {samples[0].id!r}")


# --- 5. intervene: each method with its own recorded settings (#33) ------------------------------

def test_intervene_reruns_each_method_with_its_own_recorded_settings(hf_tiny, tmp_path):
    """Two methods run into one directory by separate commands with other settings each: every
    condition re-runs each with its own (its recorded settings again, the view `full`), not both
    with the first method's."""
    from harness.methods import MethodConfig
    from harness.intervene.conditions import intervene
    from harness.run.loop import run_methods

    base = MethodConfig(answer_tokens=8, seed=1)
    own = {"logprob": replace(base, min_coverage=0.2, aware_boundary=False),
           "logprob_question": replace(base, min_coverage=0.3, words="extended", aware_tol=0.001)}
    run = tmp_path / "run"
    samples = load_dataset("demo")[:2]
    run_methods(samples, ["monitor"], hf_tiny, run, config=base, progress=False)  # the answers
    for m, cfg in own.items():
        run_methods(samples, [m], hf_tiny, run, config=cfg, progress=False)
    with RunLog(run, create=False) as st:
        recorded = {m: st.get_meta(f"settings/{m}") for m in own}
    assert recorded["logprob"]["min_coverage"] == 0.2 and recorded["logprob_question"]["min_coverage"] == 0.3
    intervene(run, hf_tiny, insert="placebo", at="end", methods=sorted(own), batch_size=2,
              n_boot=10, progress=False)
    for cond in ("none", "placebo"):
        with RunLog(run / "intervene" / "end_pair0" / cond, create=False) as st:
            for m in own:
                want = json.loads(json.dumps(recorded[m]))
                want["config"]["view"] = "full"
                assert st.get_meta(f"settings/{m}") == want, (cond, m)
                assert len(st.result_dicts(m)) == len(samples)
            assert st.manifest()["methods"].keys() == set(own)


# --- 6. export to a pipe that closes --------------------------------------------------------------

def test_export_to_a_closed_pipe_ends_quietly_with_exit_0(tmp_path):
    run = _records_run(tmp_path / "run", n=40, pad=4000)  # ~160 kB: more than a pipe holds
    p = subprocess.Popen([sys.executable, "-m", "evalaware.main", "export", str(run), "--out", "-"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    assert p.stdout is not None and p.stderr is not None
    first = p.stdout.readline()  # `| head -1`
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, err
    assert json.loads(first)["method"] == "binary"
    assert err == "", err
