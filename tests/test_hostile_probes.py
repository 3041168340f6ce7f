"""Damaged files on the probe path, through the real CLI: a corrupt activation shard (bytes
zeroed, truncated, deleted) fails every reader with one line naming the shard and the capture,
and a capture re-run captures its samples again; a damaged saved probe (truncated tensors, bad
`layer`, non-finite weights, zero scale) fails `probes apply` with one line naming file and field."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.runlog import RunLog
from probes.activations.store import ActivationStore
from tests.helpers.cli import run_main as _cli
from tests.helpers.probe_runs import answer_run, random_samples

POOLINGS = ("last_prompt", "mean_prompt")
SHARD = "shard-00001.safetensors"  # the middle one of three


def _activations(run: Path) -> dict[str, tuple[list[str], dict[int, np.ndarray]]]:
    store = RunLog(run, create=False)
    try:
        acts = ActivationStore(store, "default")
        return {p: acts.load(p) for p in POOLINGS}
    finally:
        store.close()


@pytest.fixture(scope="module")
def captured(tmp_path_factory, tiny_model_dir, hf_tiny):
    """A run of 24 samples captured by the CLI in three shards, a probe trained on it, the
    original activations and the probe's scores."""
    root = tmp_path_factory.mktemp("hostile")
    run, probe = root / "run", root / "probe"
    answer_run(run, random_samples(n_groups=6, per_group=4, seed=3), hf_tiny, answers=False).close()
    from click.testing import CliRunner

    from evalaware.main import cli

    r = CliRunner()
    out = r.invoke(cli, ["activations", "capture", "--run", str(run), "--model", str(tiny_model_dir),
                         "--pooling", ",".join(POOLINGS), "--shard-size", "8", "--no-progress"])
    assert out.exit_code == 0, out.output + repr(out.exception)
    assert sorted(p.name for p in (run / "activations" / "default").glob("*.safetensors")) == \
        [f"shard-0000{i}.safetensors" for i in range(3)]
    out = r.invoke(cli, ["probes", "train", "--run", str(run), "--pooling", "mean_prompt",
                         "--layer", "1", "--out", str(probe), "--n-boot", "20", "--cv", "grouped",
                         "--no-progress"])
    assert out.exit_code == 0, out.output + repr(out.exception)
    scores = root / "scores.jsonl"
    out = r.invoke(cli, ["probes", "apply", "--probe", str(probe), "--run", str(run), "--out", str(scores)])
    assert out.exit_code == 0, out.output + repr(out.exception)
    return run, probe, _activations(run), scores.read_text()


def _zero_middle(f: Path) -> None:
    b = bytearray(f.read_bytes())
    mid = len(b) // 2
    b[mid:mid + 256] = bytes(256)
    f.write_bytes(bytes(b))


def _truncate(f: Path) -> None:
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


DAMAGE = {"zeroed": _zero_middle, "truncated": _truncate, "deleted": Path.unlink}


@pytest.fixture(params=sorted(DAMAGE))
def damaged(request, captured, tmp_path):
    """A copy of the captured run with one shard damaged; (run, probe, originals, scores, kind)."""
    run, probe, acts, scores = captured
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    DAMAGE[request.param](copy / "activations" / "default" / SHARD)
    return copy, probe, acts, scores, request.param


def _one_line_naming_the_shard(code: int, err: str, run: Path) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert lines[0].startswith("error:") and str(run / "activations" / "default" / SHARD) in lines[0]
    assert "capture 'default'" in lines[0] and "activations capture" in lines[0], lines[0]


def test_a_corrupt_shard_fails_apply_train_and_eval_with_one_line(damaged, monkeypatch, capsys, tmp_path):
    run, probe, _, _, _ = damaged
    for args in (["probes", "apply", "--probe", probe, "--run", run],
                 ["probes", "train", "--run", run, "--pooling", "mean_prompt", "--layer", "1",
                  "--out", tmp_path / "p2", "--n-boot", "20", "--cv", "grouped", "--no-progress"],
                 ["probes", "eval", "--run", run, "--n-boot", "20", "--n-perm", "2", "--cv", "grouped",
                  "--baselines", "length", "--no-progress", "--out", tmp_path / "ev"]):
        code, _, err = _cli(args, monkeypatch, capsys)
        _one_line_naming_the_shard(code, err, run)
    assert not (tmp_path / "p2").exists()


def test_a_corrupt_shard_is_one_line_from_a_fresh_process(captured, tmp_path):
    """The same through `python -m evalaware.main`: no per-process state hides the damage."""
    run, probe, _, _ = captured
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    _zero_middle(copy / "activations" / "default" / SHARD)
    p = subprocess.run([sys.executable, "-m", "evalaware.main", "probes", "apply", "--probe",
                        str(probe), "--run", str(copy)], capture_output=True, text=True)
    _one_line_naming_the_shard(p.returncode, p.stderr, copy)
    assert "sha256" in p.stderr


def test_a_capture_rerun_recaptures_a_corrupt_shard(damaged, tiny_model_dir, monkeypatch, capsys, tmp_path):
    run, probe, originals, scores, kind = damaged
    code, out, err = _cli(["activations", "capture", "--run", run, "--model", tiny_model_dir,
                           "--pooling", ",".join(POOLINGS), "--shard-size", "8", "--no-progress"],
                          monkeypatch, capsys)
    assert code == 0, err
    assert "captured 8 samples (16 already done)" in out and f"corrupt shard(s): {SHARD}" in out, out
    again = _activations(run)
    for p in POOLINGS:
        ids, X = again[p]
        ids0, X0 = originals[p]
        assert sorted(ids) == sorted(ids0)
        pos = [ids.index(s) for s in ids0]
        for layer in X0:
            np.testing.assert_array_equal(X[layer][pos], X0[layer])
    code, out, err = _cli(["probes", "apply", "--probe", probe, "--run", run, "--out", tmp_path / "s.jsonl"],
                          monkeypatch, capsys)
    assert code == 0, err
    assert (tmp_path / "s.jsonl").read_text() == scores
    # a second re-run finds nothing to repair
    code, out, err = _cli(["activations", "capture", "--run", run, "--model", tiny_model_dir,
                           "--pooling", ",".join(POOLINGS), "--no-progress"], monkeypatch, capsys)
    assert code == 0 and "captured 0 samples" in out and "corrupt" not in out, out + err


# --- saved probes ---------------------------------------------------------------------------
def _edit_json(field: str, value: object):
    def edit(d: Path) -> None:
        meta = json.loads((d / "probe.json").read_text())
        if value is _MISSING:
            meta.pop(field)
        else:
            meta[field] = value
        (d / "probe.json").write_text(json.dumps(meta))
    return edit


def _edit_tensor(name: str, index: int, value: float):
    def edit(d: Path) -> None:
        t = load_file(str(d / "probe.safetensors"))
        t[name] = t[name].clone()
        t[name][index] = value
        save_file(t, str(d / "probe.safetensors"), metadata={"format": "evalaware-probe-1"})
    return edit


_MISSING = object()
PROBE_DAMAGE = {
    "truncated": (lambda d: _truncate(d / "probe.safetensors"), "probe.safetensors",
                  "not a readable safetensors file"),
    "no_layer": (_edit_json("layer", _MISSING), "probe.json", "field 'layer': missing"),
    "text_layer": (_edit_json("layer", "best"), "probe.json", "field 'layer': 'best' is not a layer id"),
    "float_layer": (_edit_json("layer", 1.5), "probe.json", "field 'layer': 1.5"),
    "no_pooling": (_edit_json("pooling", _MISSING), "probe.json", "field 'pooling': missing"),
    "nan_weight": (_edit_tensor("weight", 3, float("nan")), "probe.safetensors",
                   "tensor 'weight': 1 non-finite value(s) (first at index 3"),
    "inf_bias": (_edit_tensor("bias", 0, float("inf")), "probe.safetensors", "tensor 'bias'"),
    "zero_scale": (_edit_tensor("scaler_scale", 5, 0.0), "probe.safetensors",
                   "tensor 'scaler_scale': 1 value(s) <= 0 (first at index 5"),
}


@pytest.mark.parametrize("case", sorted(PROBE_DAMAGE))
def test_a_damaged_probe_fails_apply_with_one_line(case, captured, monkeypatch, capsys, tmp_path):
    run, probe, _, _ = captured
    damage, file, message = PROBE_DAMAGE[case]
    copy = tmp_path / "probe"
    shutil.copytree(probe, copy)
    damage(copy)
    code, out, err = _cli(["probes", "apply", "--probe", copy, "--run", run], monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert lines[0].startswith(f"error: {copy / file}: ") and message in lines[0], lines[0]
    assert "scored" not in out


def test_an_undamaged_copy_of_the_probe_still_applies(captured, monkeypatch, capsys, tmp_path):
    """The checks refuse only damage: a probe as `probes train` wrote it scores as before."""
    run, probe, _, scores = captured
    copy = tmp_path / "probe"
    shutil.copytree(probe, copy)
    code, _, err = _cli(["probes", "apply", "--probe", copy, "--run", run, "--out", tmp_path / "s.jsonl"],
                        monkeypatch, capsys)
    assert code == 0, err
    assert (tmp_path / "s.jsonl").read_text() == scores
    t = load_file(str(copy / "probe.safetensors"))
    assert torch.all(t["scaler_scale"] > 0)
