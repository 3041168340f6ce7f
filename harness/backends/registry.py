"""The one way to reach a model: backends by name, and the engine options each one takes.

:data:`ENGINE_OPTIONS` declares once every option that only some backends take: its name, the
backends that take it, its command-line flag and help. The command line builds its options from
it (:mod:`harness.cli.options`), :func:`check_backend` refuses one given to another backend, and
:func:`make_backend` hands each backend only what it takes. Run, capture, steering and the
taxonomy all open their model through :func:`open_backend`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from harness.backends.base import Backend
from harness.backends.hf.backend import HFBackend
from harness.backends.openai.backend import OpenAIBackend
from harness.backends.openai.http_client import normalize_base_url
from harness.backends.vllm.backend import VLLMBackend, refuse_data_parallel  # vllm: when started
from harness.core import console
from harness.core.errors import EvalAwareError
from harness.models.fingerprint import check_model

BACKEND_CLASSES: dict[str, type[Backend]] = {"vllm": VLLMBackend, "hf": HFBackend,
                                              "openai": OpenAIBackend}
BACKENDS = tuple(BACKEND_CLASSES)


@dataclass(frozen=True)
class EngineOption:
    """An engine setting that only `backends` take; `name` is the backend's keyword."""

    name: str
    backends: tuple[str, ...]
    help: str
    click: dict[str, Any] = field(default_factory=dict)  # type, multiple, choices, min, range
    dest: str | None = None  # the command line's parameter name when it is not `name`

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def param(self) -> str:
        return self.dest or self.name


ENGINE_OPTIONS: tuple[EngineOption, ...] = (
    EngineOption("tensor_parallel_size", ("vllm",), "vLLM: GPUs per model.", {"min": 1}),
    EngineOption("pipeline_parallel_size", ("vllm",), "vLLM: pipeline stages (multi-node with Ray).",
                 {"min": 1}),
    EngineOption("data_parallel_size", ("vllm",),
                 "vLLM: engine replicas. vLLM 0.32 takes it only in `vllm serve` (offline LLM "
                 "refuses it): serve with `--data-parallel-size N` and use --backend openai, or "
                 "give --base-url per replica.", {"min": 1}),
    EngineOption("distributed_executor_backend", ("vllm",),
                 "vLLM: how tensor/pipeline workers are started (ray for multi-node).",
                 {"choices": ("mp", "ray", "uni", "external_launcher")}),
    EngineOption("gpu_memory_utilization", ("vllm",), "vLLM: share of GPU (CPU: host) memory.",
                 {"range": (0.0, 1.0)}),
    EngineOption("max_model_len", ("vllm",), "vLLM: context length.", {"min": 1}),
    EngineOption("base_url", ("openai",),
                 "openai: server URL, e.g. http://127.0.0.1:8000/v1; give it several times to "
                 "spread requests over replicas serving the same model (a failing one's "
                 "requests go to the others).", {"multiple": True}, dest="base_urls"),
    EngineOption("max_concurrency", ("openai",),
                 "openai: requests in flight per server, over all of a run's tasks (default 256; "
                 "set it to the server's --max-num-seqs: vLLM's default is 256, 1024 on an "
                 "H100/H200, 128 on CPU). 429/5xx answers are retried with backoff.", {"min": 1}),
    EngineOption("top_logprobs", ("openai",),
                 "openai: logprobs per position the server returns (vLLM: up to --max-logprobs; "
                 "OpenAI: 20).", {"type": int}),
)
"""Options that only some backends take (a value given for another backend is refused)."""

BY_NAME = {o.name: o for o in ENGINE_OPTIONS}

COMMON = {"hf": {"dtype", "device", "batch_size", "trust_remote_code", "tokenizer", "revision"},
          "openai": {"tokenizer", "api_key", "timeout", "max_retries"}}
"""The keywords hf and openai take besides their :data:`ENGINE_OPTIONS`; vllm takes every other
keyword (its engine's own, e.g. ``seed``, ``enforce_eager``), except these of hf and openai:"""
NOT_VLLM = {"device", "batch_size", "api_key", "timeout", "max_retries"}


def _takes(kind: str, key: str) -> bool:
    opt = BY_NAME.get(key)
    if opt is not None:
        return kind in opt.backends
    return key not in NOT_VLLM if kind == "vllm" else key in COMMON[kind]


def make_backend(kind: str, model: str, **opts: Any) -> Backend:
    """Create a backend by name; options it does not take, or given as None, are dropped."""
    if kind not in BACKEND_CLASSES:
        raise EvalAwareError(f"unknown backend {kind!r}; use one of {', '.join(BACKENDS)}")
    kept = {k: v for k, v in opts.items() if v is not None and _takes(kind, k)}
    if kind == "openai":
        return OpenAIBackend(model=model, **kept)
    return BACKEND_CLASSES[kind](model, **kept)


def check_backend(kind: str, model: str, opts: dict[str, Any],
                  flags: dict[str, str] | None = None) -> None:
    """Refuse without loading anything what cannot work: an unknown backend, another backend's
    option, openai without a server URL, a model that is not on this machine (hf, vllm).
    `flags` names the command-line options in messages (default ``--option-name``)."""
    flag = lambda k: (flags or {}).get(k) or "--" + k.replace("_", "-")  # noqa: E731
    if kind not in BACKENDS:
        raise EvalAwareError(f"unknown backend {kind!r}; use one of {', '.join(BACKENDS)}")
    wrong = sorted(k for k, v in opts.items() if v not in (None, (), []) and k in BY_NAME
                   and kind not in BY_NAME[k].backends)
    if wrong:
        raise EvalAwareError("; ".join(f"{flag(k)} applies to the {'/'.join(BY_NAME[k].backends)} "
                                       f"backend" for k in wrong) + f", not to {kind}")
    if kind == "openai" and not opts.get("base_url"):
        raise EvalAwareError(f"the openai backend needs {flag('base_url')} (the server's URL)")
    if kind == "openai":
        urls = opts["base_url"]
        for url in [urls] if isinstance(urls, str) else urls:
            try:
                normalize_base_url(url)
            except ValueError as e:
                raise EvalAwareError(f"{flag('base_url')}: {e}") from None
    if kind == "vllm":
        refuse_data_parallel(opts.get("data_parallel_size"))
    if kind in ("hf", "vllm"):
        check_model(model, opts.get("revision"))  # a hub id not cached is downloaded on opening


def open_backend(kind: str, model: str, role: str = "model", **opts: Any) -> Backend:
    """:func:`make_backend`, timed, with one line of our own: what was loaded, where, how fast."""
    t0 = time.perf_counter()
    backend = make_backend(kind, model, **opts)
    dtype = backend.identity.get("dtype")
    console.status(f"{role}: {model} ({kind}, {backend.device}" + (f", {dtype}" if dtype else "")
                   + f") ready in {time.perf_counter() - t0:.1f} s")
    return backend
