"""Issue 38, "declared once": a method or backend registered twice is refused, an organism's
resume state is safetensors + JSON (no pickle) and resumes exactly, and ARCHITECTURE.md is a
short map whose paths exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.core.errors import EvalAwareError

ROOT = Path(__file__).resolve().parents[1]


# --- the method registry --------------------------------------------------------------------


def test_a_method_name_registered_twice_is_refused_naming_both_classes():
    from harness.methods import base
    from harness.methods.binary import BinaryTest

    class Impostor(base.Method):
        name = "binary"

        def run_batch(self, samples):
            return []

    before = dict(base.REGISTRY)
    with pytest.raises(EvalAwareError, match=r"'binary' is registered twice") as e:
        base.register(Impostor)
    assert "harness.methods.binary.BinaryTest" in str(e.value)
    assert f"{__name__}.test_a_method_name_registered_twice_is_refused_naming_both_classes.<locals>.Impostor" \
        in str(e.value)
    assert base.REGISTRY == before and base.REGISTRY["binary"] is BinaryTest  # the first one kept
    assert base.register(BinaryTest) is BinaryTest and base.REGISTRY == before  # the same class again


def test_a_backend_name_or_class_registered_twice_is_refused_naming_both(monkeypatch):
    from dataclasses import replace

    from harness.backends import registry
    from harness.backends.specs import HF, OPENAI

    impostor = replace(HF, kind="toy", engine="tests.impostor:Impostor")
    monkeypatch.setattr(registry, "BACKEND_SPECS", dict(registry.BACKEND_SPECS))
    before = dict(registry.BACKEND_SPECS)
    with pytest.raises(EvalAwareError, match=r"backend 'hf' is registered twice") as e:
        registry.register_backend("hf", impostor)
    assert "by harness.backends.hf.backend.HFBackend and by tests.impostor.Impostor" in str(e.value)
    with pytest.raises(EvalAwareError, match=r"OpenAIBackend is registered twice: as backend "
                                             r"'openai' and as 'toy'"):
        registry.register_backend("toy", impostor, OPENAI)
    assert registry.BACKEND_SPECS == before  # nothing replaced, nothing half-added
    registry.register_backend("toy", impostor)
    assert registry.BACKEND_SPECS["toy"] == (impostor,) and registry.backend_spec("toy") is impostor


def test_a_report_prefix_registered_twice_with_another_spec_is_refused(monkeypatch):
    from harness.methods import report_spec
    from probes.report_spec import REPORT

    monkeypatch.setattr(report_spec, "_PREFIXES", {})
    report_spec.register_prefix("probe", REPORT)
    report_spec.register_prefix("probe", REPORT)  # the same declaration again (a re-import)
    other = report_spec.ReportSpec(scale="share")
    with pytest.raises(EvalAwareError, match=r"report prefix 'probe' is registered twice"):
        report_spec.register_prefix("probe", other)
    assert report_spec._PREFIXES == {"probe": REPORT}


# --- the organism's resume state ------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, smollm2_dir):
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("resume-base") / "model", smollm2_dir, hidden=64)


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("train, layers", [("lora", 1), ("full", 2)])
def test_an_interrupted_build_resumes_from_safetensors_and_json_to_the_same_weights(
        tiny_base, tmp_path, monkeypatch, train, layers):
    import torch
    from safetensors.torch import load_file

    from harness.organisms import train as T

    recipe = T.Recipe(base=str(tiny_base), cue="graded", train=train, layers=layers, steps=24,
                      batch_size=4, lr=1e-2, lora_rank=4, verbalizations=1, max_len=128)
    whole = T.build_organism(recipe, tmp_path / "whole", progress=False)
    assert whole.trained

    loss, calls = T.Split.loss, []

    def interrupted_loss(self, *a, **k):  # stop in the middle of step 15: the state of step 10 is saved
        calls.append(1)
        if len(calls) == 15:
            raise Interrupted
        return loss(self, *a, **k)

    out = tmp_path / "resumed"
    with monkeypatch.context() as m:
        m.setattr(T.Split, "loss", interrupted_loss)
        with pytest.raises(Interrupted):
            T.build_organism(recipe, out, progress=False)
    partial = out / T.PARTIAL
    files = sorted(p.name for p in partial.iterdir())
    assert files == ["state.json", "step-10.safetensors"], files  # no .pt / .pkl: nothing pickled
    state = json.loads((partial / "state.json").read_text())
    assert state["step"] == 10 and len(state["losses"]) == 10 and state["tensors"] == "step-10.safetensors"

    said: list[str] = []
    with monkeypatch.context() as m:
        m.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load (pickle) used to resume"))
        resumed = T.build_organism(recipe, out, progress=False, say=said.append)
    said = [s for s in said if not s.startswith("step ")]  # the step lines of a build without a bar
    assert said[0] == "resuming from step 10 of 24" and len(said) == 2
    assert said[1].startswith("the frozen base's states: 0 computed")  # the first build's, read back
    assert not partial.exists()
    a, b = load_file(tmp_path / "whole" / "model.safetensors"), load_file(out / "model.safetensors")
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)  # exactly the same weights
    assert resumed.card["losses"] == whole.card["losses"]
    assert resumed.card["weights_sha256"] == whole.card["weights_sha256"]


def test_a_state_of_another_recipe_or_an_old_pickle_is_set_aside(tiny_base, tmp_path):
    from harness.organisms import train as T

    recipe = T.Recipe(base=str(tiny_base), cue="graded", train="lora", layers=1, steps=2,
                      batch_size=2, lora_rank=2, verbalizations=1, max_len=128)
    out = tmp_path / "org"
    (out / T.PARTIAL).mkdir(parents=True)
    (out / T.PARTIAL / "state.pt").write_bytes(b"\x80\x04not loaded")  # written before this change
    said: list[str] = []
    assert T.build_organism(recipe, out, progress=False, say=said.append).trained
    assert not any("resuming" in s for s in said) and not (out / T.PARTIAL).exists()


# --- ARCHITECTURE.md ------------------------------------------------------------------------


def test_architecture_is_short_and_every_path_it_names_exists():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 150, len(lines)
    assert max(len(ln) for ln in lines) <= 120
    named = {s for s in re.findall(r"`([^`\s]+)`", text) if "/" in s}
    assert len(named) >= 20, named  # it is a map: it names the files
    # `harness/prompts/<name>/`: the folder before the placeholder; `file.py::test`: the file
    missing = [p for p in sorted(named) if not (ROOT / p.split("::")[0].split("<")[0].rstrip("/")).exists()]
    assert not missing, missing
    # a claim names the test that checks it: that test is there
    cited = [p.split("::") for p in named if "::" in p]
    assert len(cited) >= 10, cited
    absent = [f"{f}::{t}" for f, t in cited if not re.search(rf"^def {t}\(", (ROOT / f).read_text(), re.M)]
    assert not absent, absent


def test_an_organism_is_built_through_the_backend_that_can_train(tiny_base, tmp_path, monkeypatch):
    """organism build asks the registry for the `training` capability (hf) and loads its base
    through that backend's `trainable`; a backend without it is refused naming the capability."""
    from harness.backends import registry
    from harness.backends.hf.backend import HFBackend
    from harness.core.errors import BackendError
    from harness.organisms import train as T

    loaded: list[str] = []
    trainable = HFBackend.trainable.__func__

    def spy(cls, path):
        loaded.append(path)
        return trainable(cls, path)

    monkeypatch.setattr(HFBackend, "trainable", classmethod(spy))
    recipe = T.Recipe(base=str(tiny_base), cue="graded", train="lora", layers=1, steps=2,
                      batch_size=2, lora_rank=2, verbalizations=1, max_len=128)
    assert T.build_organism(recipe, tmp_path / "org", progress=False).trained
    assert loaded == [str(tiny_base)]
    assert registry.default_backend(T.TRAINING) == "hf"
    with pytest.raises(BackendError, match="cannot train a model"):
        registry.backend_spec("vllm", T.TRAINING)
