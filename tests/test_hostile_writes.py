"""Issue 50, round 2 of the hostile re-run: nothing destroyed, nothing silently wrong. Outputs
that would overwrite a run's own files or the command's input, or follow a link planted in an
output directory (one guard: harness/runlog/outputs.py); probe records under a name another
method or probe owns; a tampered probe file; a run's model reopened without its engine
arguments."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest

from harness.core.errors import EvalAwareError
from harness.data.readers import load_dataset, resolve_dataset
from harness.runlog import RunLog
from tests.helpers.cli import one_line as _one_line, run_main as _cli
from tests.helpers.probe_runs import answer_run, random_samples

LAYER = 1


def _records_run(path: Path, n: int = 4) -> Path:
    samples = load_dataset("demo")[:n]
    recs = [{"sample_id": s.id, "method": "binary", "label": s.label, "prediction": "eval",
             "score": 0.5 + 0.01 * i, "n_valid": 1, "n_invalid": 0, "category": s.metadata.category,
             "agentic": False, "eval_type": "", "n_turns": 1, "details": {}} for i, s in enumerate(samples)]
    with RunLog(path) as st:
        st.put_samples(samples)
        st.put_results("binary", recs)
    return path


def _log_intact(run: Path, n: int) -> None:
    """The run log is still a SQLite file holding its records."""
    with RunLog(run, readonly=True) as st:
        assert len(st.result_dicts()) == n


@pytest.fixture
def victim(tmp_path) -> Path:
    v = tmp_path / "victim.txt"
    v.write_text("precious\n")
    return v


# --- 1. the one output guard --------------------------------------------------------------------

def test_the_guard_refuses_run_files_inputs_and_links(tmp_path, victim):
    from harness.runlog.outputs import check_output

    run = _records_run(tmp_path / "run")
    new = tmp_path / "new"  # a run directory the command is about to create
    refused = {run / "store.sqlite": "run log", run / "store.sqlite-wal": "journal",
               run / "manifest.json": "manifest", run / "results.jsonl": "exported records",
               run / ".evalaware-lock": "lock", run / "activations" / "default" / "x.bin": "activations",
               tmp_path / "other" / ".." / "run" / "store.sqlite": "run log"}
    for path, what in refused.items():
        with pytest.raises(EvalAwareError, match=what):
            check_output(path, "--out")
    with pytest.raises(EvalAwareError, match="run log"):
        check_output(new / "store.sqlite", "--out", runs=[new])
    check_output(run / "results.jsonl", "--out", runs=[run], derived=["results.jsonl"])  # export's own
    with pytest.raises(EvalAwareError, match="exported records"):  # not another run's
        check_output(run / "results.jsonl", "--out", runs=[tmp_path / "new"], derived=["results.jsonl"])
    os.link(victim, tmp_path / "hard.txt")
    for given in (victim, tmp_path / "hard.txt", tmp_path / "." / "victim.txt"):
        with pytest.raises(EvalAwareError, match="an input of this command"):
            check_output(given, "--out", inputs=[victim])
    probe = tmp_path / "probe"
    probe.mkdir()
    with pytest.raises(EvalAwareError, match="an input of this command"):
        check_output(probe / "probe.json", "--out", inputs=[probe])
    os.symlink(victim, tmp_path / "link.txt")
    with pytest.raises(EvalAwareError, match="is a symbolic link"):
        check_output(tmp_path / "link.txt", "--out")
    check_output(run / "report.md", "--out", runs=[run])  # a file of its own beside the run's
    check_output(tmp_path / "scores.jsonl", "--out", inputs=[victim, None], runs=[run])
    assert victim.read_text() == "precious\n"


def test_export_refuses_to_write_over_the_run_log(tmp_path, monkeypatch, capsys):
    run = _records_run(tmp_path / "run")
    for target in ("store.sqlite", "manifest.json"):
        code, out, err = _cli(["export", run, "--out", run / target], monkeypatch, capsys)
        line = _one_line(code, err)
        assert f"--out {run / target}: would overwrite the" in line and str(run) in line, line
    _log_intact(run, 4)
    code, out, err = _cli(["export", run, "--out", run / "results.jsonl", "--format", "csv"], monkeypatch, capsys)
    assert "exported records" in _one_line(code, err)  # CSV over the run's own JSONL
    code, out, err = _cli(["export", run], monkeypatch, capsys)  # its own results.jsonl, as before
    assert code == 0 and len((run / "results.jsonl").read_text().splitlines()) == 4, err
    code, out, err = _cli(["show", run], monkeypatch, capsys)
    assert code == 0 and "binary" in out, err


def test_organism_dataset_refuses_a_run_log(tmp_path, monkeypatch, capsys):
    run = _records_run(tmp_path / "run")
    code, _, err = _cli(["organism", "dataset", "--cue", "graded", "--out", run / "store.sqlite"],
                        monkeypatch, capsys)
    assert "run log" in _one_line(code, err)
    _log_intact(run, 4)


def test_cues_write_neutralized_refuses_the_run_log_and_the_dataset_before_any_model(tmp_path, monkeypatch,
                                                                                     capsys):
    data = tmp_path / "data.jsonl"
    shutil.copy(resolve_dataset("demo"), data)
    before = data.read_bytes()
    out = tmp_path / "cues"
    base = ["cues", "--model", tmp_path / "no-such-model", "--backend", "hf", "--dataset", data,
            "--design", "neutralize", "--out", out]
    code, _, err = _cli([*base, "--write-neutralized", out / "store.sqlite"], monkeypatch, capsys)
    line = _one_line(code, err)
    assert f"--write-neutralized {out / 'store.sqlite'}: would overwrite the run log" in line, line
    code, _, err = _cli([*base, "--write-neutralized", data], monkeypatch, capsys)
    assert "would overwrite an input of this command" in _one_line(code, err)
    assert data.read_bytes() == before and not out.exists()


@pytest.mark.parametrize("name", ["report.md", "report.html", "auroc.png", "bars_binary.png"])
def test_report_follows_no_link_planted_in_its_output_directory(name, tmp_path, victim, monkeypatch, capsys):
    run = _records_run(tmp_path / "run", n=12)
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / name)
    code, _, err = _cli(["report", run, "--out", out, "--bootstrap", "0"], monkeypatch, capsys)
    line = _one_line(code, err)
    assert f"{out / name}: is a symbolic link" in line, line
    assert victim.read_text() == "precious\n" and (out / name).is_symlink()


def test_steer_build_follows_no_link_planted_in_its_output_directory(tmp_path, victim, monkeypatch, capsys):
    run = _records_run(tmp_path / "run")
    out = tmp_path / "vec"
    out.mkdir()
    os.symlink(victim, out / "vector.json")
    code, _, err = _cli(["steer", "build", "--run", run, "--out", out], monkeypatch, capsys)
    assert f"{out / 'vector.json'}: is a symbolic link" in _one_line(code, err)
    code, _, err = _cli(["steer", "build", "--run", run, "--out", run / "activations" / "v"], monkeypatch, capsys)
    assert "would overwrite the activations" in _one_line(code, err)
    assert victim.read_text() == "precious\n"


def test_report_counts_a_run_given_twice_once(tmp_path, monkeypatch, capsys):
    run = _records_run(tmp_path / "run")
    again = f"{tmp_path}/../{tmp_path.name}/run"  # the same directory under another name
    code, _, err = _cli(["report", run, again, "--out", tmp_path / "out", "--bootstrap", "0"], monkeypatch, capsys)
    assert "is given twice" in _one_line(code, err) and not (tmp_path / "out").exists()


# --- 2. probes: outputs, records names, tampered files -----------------------------------------

@pytest.fixture(scope="module")
def captured(tmp_path_factory, tiny_model_dir, hf_tiny):
    """A run of 24 samples with `logprob_question` records of its own, captured by the CLI, and
    two probes trained on it (layers 1 and 2)."""
    from click.testing import CliRunner

    from evalaware.main import cli

    root = tmp_path_factory.mktemp("writes")
    run = root / "run"
    samples = random_samples(n_groups=6, per_group=4, seed=5)
    store = answer_run(run, samples, hf_tiny, answers=False)
    store.set_meta("settings/logprob_question", {"config": {}})
    store.put_results("logprob_question", [
        {"sample_id": s.id, "method": "logprob_question", "label": s.label, "prediction": "eval",
         "score": 1.0, "n_valid": 1, "n_invalid": 0, "category": s.metadata.category, "agentic": False,
         "eval_type": "", "n_turns": 1, "details": {"own": True}} for s in samples])
    store.close()
    r = CliRunner()
    res = r.invoke(cli, ["activations", "capture", "--run", str(run), "--model", str(tiny_model_dir),
                         "--pooling", "mean_prompt", "--no-progress"])
    assert res.exit_code == 0, res.output + repr(res.exception)
    probes = {}
    for layer in (1, 2):
        probes[layer] = root / f"probe{layer}"
        res = r.invoke(cli, ["probes", "train", "--run", str(run), "--pooling", "mean_prompt", "--layer",
                             str(layer), "--out", str(probes[layer]), "--n-boot", "10", "--cv", "grouped"])
        assert res.exit_code == 0, res.output + repr(res.exception)
    return run, probes


@pytest.fixture
def run_copy(captured, tmp_path) -> tuple[Path, dict[int, Path]]:
    run, probes = captured
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run", probes


def _records(run: Path, method: str) -> dict[str, float]:
    with RunLog(run, readonly=True) as st:
        return {r["sample_id"]: r["score"] for r in st.result_dicts(method)}


def test_probes_apply_refuses_to_write_scores_over_the_run_log_or_the_probe(run_copy, monkeypatch, capsys):
    run, probes = run_copy
    for target, what in ((run / "store.sqlite", "run log"), (probes[1] / "probe.json", "an input")):
        before = target.read_bytes()
        code, out, err = _cli(["probes", "apply", "--probe", probes[1], "--run", run, "--out", target],
                              monkeypatch, capsys)
        assert what in _one_line(code, err) and "scored" not in out
        assert target.read_bytes() == before
    code, out, err = _cli(["show", run], monkeypatch, capsys)
    assert code == 0 and "logprob_question" in out, err


@pytest.mark.parametrize("name", ["logprob_question", "binary"])
def test_probes_apply_refuses_a_methods_name(name, run_copy, monkeypatch, capsys):
    """`--method-name logprob_question` replaced the method's 24 records with probe scores;
    `binary` added rows of a method the run never ran."""
    run, probes = run_copy
    before = _records(run, name)
    code, _, err = _cli(["probes", "apply", "--probe", probes[1], "--run", run, "--write-records",
                         "--allow-train-overlap", "--method-name", name], monkeypatch, capsys)
    assert f"--method-name {name!r}: is the name of a method" in _one_line(code, err)
    assert _records(run, name) == before and len(before) == (24 if name == "logprob_question" else 0)


def test_probes_eval_refuses_a_methods_name_before_the_sweep(run_copy, monkeypatch, capsys):
    run, _ = run_copy
    code, out, err = _cli(["probes", "eval", "--run", run, "--write-records", "--method-name", "binary",
                           "--n-boot", "10", "--n-perm", "2", "--cv", "grouped", "--baselines", "length",
                           "--no-progress"], monkeypatch, capsys)
    assert "is the name of a method" in _one_line(code, err) and "AUROC" not in out
    assert _records(run, "binary") == {} and not (run / "probes").exists()


def test_another_probe_is_refused_a_name_a_probe_owns(run_copy, monkeypatch, capsys):
    run, probes = run_copy
    args = ["--run", run, "--write-records", "--allow-train-overlap", "--method-name", "probe_x"]
    code, _, err = _cli(["probes", "apply", "--probe", probes[1], *args], monkeypatch, capsys)
    assert code == 0, err
    first = _records(run, "probe_x")
    code, _, err = _cli(["probes", "apply", "--probe", probes[2], *args], monkeypatch, capsys)
    line = _one_line(code, err)
    assert "holds the records of a saved probe (probe sha256" in line and "give another name" in line, line
    assert _records(run, "probe_x") == first
    code, _, err = _cli(["probes", "eval", "--run", run, "--write-records", "--method-name", "probe_x",
                         "--n-boot", "10", "--n-perm", "2", "--cv", "grouped", "--baselines", "length",
                         "--no-progress"], monkeypatch, capsys)
    assert "holds the records of a saved probe" in _one_line(code, err)
    code, _, err = _cli(["probes", "apply", "--probe", probes[1], *args], monkeypatch, capsys)
    assert code == 0 and _records(run, "probe_x") == first, err  # its owner re-writes them


def test_probe_records_of_unknown_origin_are_not_replaced(run_copy):
    from probes.records import check_method_name, sweep_owner

    run, _ = run_copy
    with RunLog(run, create=False) as st:
        st.put_results("mine", [{**r, "method": "mine", "details": {}} for r in st.result_dicts("logprob_question")])
        with pytest.raises(EvalAwareError, match="24 record\\(s\\) under this name that no probe wrote"):
            check_method_name(st, "mine", sweep_owner("default"))


def _flip(path: Path, tensor: str, n: int = 4) -> None:
    """Flip the low byte of the first `n` float32 values of `tensor` (finite values stay finite)."""
    b = bytearray(path.read_bytes())
    size = struct.unpack("<Q", b[:8])[0]
    start = 8 + size + json.loads(b[8:8 + size])[tensor]["data_offsets"][0]
    for i in range(n):
        b[start + 4 * i] ^= 0xFF
    path.write_bytes(bytes(b))


def test_a_tampered_probe_is_refused_naming_its_checksum(run_copy, monkeypatch, capsys, tmp_path):
    run, probes = run_copy
    probe = tmp_path / "probe"
    shutil.copytree(probes[1], probe)
    meta = json.loads((probe / "probe.json").read_text())
    assert meta["sha256"] and meta["bytes"] == (probe / "probe.safetensors").stat().st_size
    _flip(probe / "probe.safetensors", "weight")
    code, out, err = _cli(["probes", "apply", "--probe", probe, "--run", run], monkeypatch, capsys)
    line = _one_line(code, err)
    assert line.startswith(f"error: {probe / 'probe.safetensors'}: not the tensors this probe saved: sha256 ")
    assert "scored" not in out
    meta.pop("sha256")
    (probe / "probe.json").write_text(json.dumps(meta))
    code, out, err = _cli(["probes", "apply", "--probe", probe, "--run", run], monkeypatch, capsys)
    assert "field 'sha256': missing" in _one_line(code, err)


# --- 3. a run's model reopened with the run's engine arguments ------------------------------------

@pytest.fixture(scope="module")
def shallow_run(tmp_path_factory, tiny_model_dir):
    """A run made with `-M num_hidden_layers=1` (the tiny model has 2 layers)."""
    from harness.backends.hf.backend import HFBackend

    run = tmp_path_factory.mktemp("shallow") / "run"
    b = HFBackend(str(tiny_model_dir), batch_size=4, engine_args={"num_hidden_layers": 1})
    try:
        answer_run(run, random_samples(n_groups=2, per_group=2, seed=9), b, answers=False).close()
    finally:
        b.close()
    return run


def test_capture_reopens_the_run_model_with_its_engine_arguments(shallow_run, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    shutil.copytree(shallow_run, run)
    code, out, err = _cli(["activations", "capture", "--run", run, "--pooling", "last_prompt", "--no-progress"],
                          monkeypatch, capsys)
    assert code == 0, err
    with RunLog(run, readonly=True) as st:
        settings = st.get_meta("manifest")["activations"]["default"]
    assert settings["num_hidden_layers"] == 1 and settings["layers"] == [0, 1]
    assert settings["model_identity"]["engine_args"] == {"num_hidden_layers": 1}


def _no_notes(err: str) -> str:
    """stderr without its note lines (an allowed architecture change says it is recorded)."""
    return "".join(x for x in err.splitlines(True) if not x.startswith("note: "))


def test_capture_intervene_and_steer_refuse_other_engine_arguments_before_loading(shallow_run, tmp_path,
                                                                                  monkeypatch, capsys):
    from probes.steering.direction import from_differences
    import numpy as np

    with RunLog(shallow_run, readonly=True) as st:
        identity, model = st.get_meta("model_identity"), st.get_meta("manifest")["model"]["model"]
    other = ["-M", "num_hidden_layers=2", "--allow-architecture-change"]  # past the architecture check
    for args in (["activations", "capture", "--run", shallow_run, "--no-progress"],
                 ["intervene", "--run", shallow_run]):
        code, _, err = _cli([*args, *other], monkeypatch, capsys)
        line = _one_line(code, _no_notes(err))
        assert f"{shallow_run}: its model was loaded with -M num_hidden_layers=1; -M num_hidden_layers=2 would " \
               f"load another model" in line, line
    rng = np.random.default_rng(0)
    vec = from_differences({1: rng.standard_normal(16)}, {1: 3.0},
                           {"model": model, "model_identity": identity, "pooling": "mean_prompt"})
    d = vec.save(tmp_path / "vec")
    code, _, err = _cli(["steer", "run", "--vector", d, "--dataset", "demo", "--out", tmp_path / "steer", *other],
                        monkeypatch, capsys)
    assert "would load another model" in _one_line(code, _no_notes(err)) and not (tmp_path / "steer").exists()


def test_the_same_weights_under_other_engine_arguments_are_refused_after_loading():
    from harness.backends.recorded import check_reopened, engine_args_for

    rec = {"backend": "hf", "weights_sha256": "a" * 64, "engine_args": {"num_hidden_layers": 2}}
    assert engine_args_for(rec, None, "hf", "RUN") == {"num_hidden_layers": 2}
    assert engine_args_for(rec, {"num_hidden_layers": 2}, "hf", "RUN") == {"num_hidden_layers": 2}
    with pytest.raises(EvalAwareError, match="open it with --backend hf"):
        engine_args_for(rec, None, "vllm", "RUN")
    assert engine_args_for(rec, {"x": 1}, "vllm", "RUN") == {"x": 1}  # another engine's own arguments
    assert engine_args_for({"backend": "hf"}, None, "hf", "RUN") is None
    check_reopened(rec, {**rec}, "RUN")
    check_reopened(rec, {"backend": "hf", "weights_sha256": "b" * 64}, "RUN")  # another model: not ours
    with pytest.raises(EvalAwareError, match="RUN: its model was loaded with -M num_hidden_layers=2"):
        check_reopened(rec, {"backend": "hf", "weights_sha256": "a" * 64}, "RUN")


def test_a_capture_index_is_untouched_by_a_refused_write(run_copy, monkeypatch, capsys):
    """`--out` inside the capture's folder is refused, its shards as they were."""
    run, probes = run_copy
    shard = sorted((run / "activations" / "default").glob("*.safetensors"))[0]
    before = shard.read_bytes()
    code, _, err = _cli(["probes", "apply", "--probe", probes[1], "--run", run, "--out", shard], monkeypatch, capsys)
    assert "activations" in _one_line(code, err) and shard.read_bytes() == before
    db = sqlite3.connect(run / "store.sqlite")
    try:
        assert db.execute("SELECT count(*) FROM act_shards").fetchone()[0] >= 1
    finally:
        db.close()
