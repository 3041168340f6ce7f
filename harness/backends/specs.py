"""Each backend's declaration, light: what it takes and can do, and where its engine class lives.

A :class:`BackendSpec` is all the command line and the checks made before loading need (the
backend's flags, its capabilities, where ``-M`` engine arguments go, its constructor's keywords);
its engine class is named as ``"module:Class"`` and imported only when a backend is made
(:meth:`BackendSpec.load`), so no command imports torch or vLLM to start. The engine classes read
their declarations from here (one place); ``tests/test_backend_declarations.py`` checks that each
spec's `keywords` are its class's constructor's.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from harness.backends.base import Capabilities
from harness.backends.declare import BackendOption
from harness.core.errors import BackendError, EvalAwareError

CheckOptions = Callable[[str, dict[str, Any], Callable[[str], str]], None]


@dataclass(frozen=True)
class BackendSpec:
    """One backend class, declared without importing it: `kind` (its name), `engine`
    (``"module:Class"``), `capabilities`, `keywords` (what its constructor takes besides the
    model), `options` (its own flags), `engine_args_to` (where ``-M`` goes, in words; None:
    refused, `engine_args_refusal` says why), `sets_itself` (engine arguments refused as ``-M``),
    `known_engine_args` (the engine's own argument names, where they can be told without a model)
    and `check_options` (refuses options that cannot work, before loading)."""

    kind: str
    engine: str
    capabilities: Capabilities
    keywords: frozenset[str]
    options: tuple[BackendOption, ...] = ()
    engine_args_to: str | None = None
    engine_args_refusal: str = "it has no engine of its own"
    default_for: frozenset[str] = frozenset()
    sets_itself: frozenset[str] = frozenset()
    known_engine_args: Callable[[], frozenset[str] | None] = lambda: None
    check_options: CheckOptions = lambda model, opts, flag: None

    def load(self) -> Any:
        """The engine class (imported now: torch, transformers or vLLM's client may come with it)."""
        module, _, name = self.engine.partition(":")
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise EvalAwareError(f"backend {self.kind!r}: cannot import its engine {self.engine} ({e})") from None


def refuse_data_parallel(data_parallel_size: int | None) -> None:
    """vLLM's offline engine takes no data parallelism: name the recipe that does."""
    if (data_parallel_size or 1) > 1:
        raise BackendError(
            f"--data-parallel-size {data_parallel_size}: vLLM's offline engine does not take data "
            f"parallelism; serve the model with `vllm serve MODEL --data-parallel-size "
            f"{data_parallel_size}` (or start one `vllm serve` per replica) and run with "
            f"--backend openai --base-url URL (one --base-url per replica)")


def _vllm_engine_args() -> frozenset[str] | None:
    from dataclasses import fields
    try:
        from vllm.engine.arg_utils import EngineArgs  # heavy: only when -M is given
    except ImportError:
        return None  # refused when the engine starts, if at all
    return frozenset(f.name for f in fields(EngineArgs))


def _check_openai(model: str, opts: dict[str, Any], flag: Callable[[str], str]) -> None:
    from harness.backends.urls import check_base_urls
    check_base_urls(opts.get("base_url"), flag("base_url"))


HF = BackendSpec(
    kind="hf", engine="harness.backends.hf.backend:HFBackend",
    capabilities=Capabilities(hidden_states=True, steering=True, structured_output=True, local_weights=True,
                              training=True),
    keywords=frozenset({"dtype", "device", "batch_size", "trust_remote_code", "tokenizer", "revision",
                        "keep_kv_bytes", "engine_args"}),
    options=(BackendOption("batch_size", "hf: prompts per forward pass (default 8).",
                           {"type": "batch"}, dest="hf_batch_size", flag_name="--hf-batch-size"),),
    engine_args_to="transformers' from_pretrained",
    # the white-box reference: every position's residual stream and gradients, on any machine
    default_for=frozenset({"hidden_states", "steering", "training", "local_weights"}),
    sets_itself=frozenset({"pretrained_model_name_or_path", "torch_dtype", "config"}))

VLLM = BackendSpec(
    kind="vllm", engine="harness.backends.vllm.backend:VLLMBackend",
    capabilities=Capabilities(steering=True, structured_output=True, streaming=True, local_weights=True),
    keywords=frozenset({"dtype", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
                        "max_model_len", "seed", "trust_remote_code", "tokenizer", "enforce_eager",
                        "data_parallel_size", "distributed_executor_backend", "revision", "engine_args"}),
    options=(
        BackendOption("tensor_parallel_size", "vLLM: GPUs per model.", {"min": 1}),
        BackendOption("pipeline_parallel_size", "vLLM: pipeline stages (multi-node with Ray).", {"min": 1}),
        BackendOption("data_parallel_size", "vLLM: engine replicas. vLLM 0.32 takes it only in `vllm "
                      "serve` (offline LLM refuses it): serve with `--data-parallel-size N` and use "
                      "--backend openai, or give --base-url per replica.", {"min": 1}),
        BackendOption("distributed_executor_backend", "vLLM: how tensor/pipeline workers are started "
                      "(ray for multi-node).", {"choices": ("mp", "ray", "uni", "external_launcher")}),
        BackendOption("gpu_memory_utilization", "vLLM: share of GPU (CPU: host) memory.",
                      {"range": (0.0, 1.0)}),
        BackendOption("max_model_len", "vLLM: context length.", {"min": 1}),
    ),
    engine_args_to="vLLM's engine (LLM(...), EngineArgs)",
    sets_itself=frozenset({"model", "tokenizer", "use_tqdm_on_load", "max_logprobs", "worker_extension_cls",
                           "logits_processors", "structured_outputs_config"}),
    known_engine_args=_vllm_engine_args,
    check_options=lambda model, opts, flag: refuse_data_parallel(opts.get("data_parallel_size")))

VLLM_CAPTURE = BackendSpec(
    kind="vllm", engine="harness.backends.vllm.capture:VLLMCaptureBackend",
    capabilities=Capabilities(hidden_states=True, local_weights=True),
    keywords=VLLM.keywords | {"hidden_state_layers", "hidden_state_connector"},
    options=VLLM.options, engine_args_to=VLLM.engine_args_to,
    sets_itself=VLLM.sets_itself | {"speculative_config", "kv_transfer_config", "enable_chunked_prefill",
                                    "enable_prefix_caching"},
    known_engine_args=_vllm_engine_args, check_options=VLLM.check_options)

OPENAI = BackendSpec(
    kind="openai", engine="harness.backends.openai.backend:OpenAIBackend",
    capabilities=Capabilities(structured_output=True, streaming=True),  # narrowed per instance
    keywords=frozenset({"base_url", "api_key", "tokenizer", "weights", "max_concurrency", "timeout",
                        "max_retries", "backoff_base", "backoff_cap", "top_logprobs", "chat_mode",
                        "vllm_extensions", "headers"}),
    options=(
        BackendOption("base_url", "openai: server URL, e.g. http://127.0.0.1:8000/v1; give it several "
                      "times to spread requests over replicas serving the same model (a failing "
                      "one's requests go to the others).", {"multiple": True}, dest="base_urls"),
        BackendOption("max_concurrency", "openai: requests in flight per server, over all of a run's "
                      "tasks (default 256; set it to the server's --max-num-seqs: vLLM's default is "
                      "256, 1024 on an H100/H200, 128 on CPU). 429/5xx answers are retried with "
                      "backoff.", {"min": 1}),
        BackendOption("top_logprobs", "openai: logprobs per position the server returns (vLLM: up to "
                      "--max-logprobs; OpenAI: 20).", {"min": 1}),
    ),
    # -M is refused: the engine is the server's (`vllm serve` takes its engine arguments), and a
    # request field passed on would change every answer without changing the call cache's keys
    engine_args_refusal=("its engine is the server's: give engine arguments to `vllm serve`; "
                         "request fields would change answers the call cache does not tell apart"),
    check_options=_check_openai)
