"""Capture pooled residual-stream activations for every sample of a run directory, resumably."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from harness.core.errors import EvalAwareError
from harness.runlog.provenance import git_revision, package_versions
from harness.runlog.lock import writes_run_dir
from harness.backends.recorded import check_reopened, engine_args_for
from harness.backends.registry import backend_spec, backends_with, default_backend, open_backend
from harness.core.sample import Sample
from harness.runlog import RunLog

from harness.backends.base import Backend, refuse_lacking
from harness.models.fingerprint import local_model_path, text_config_shape
from probes.activations.store import CANONICAL_DTYPE, DTYPES, ActivationStore, CapturedSample
from probes.activations.pooling import DEFAULT_POOLINGS, POOLINGS, pooling_weights
from probes.activations.sequences import CaptureItem, build_items

if TYPE_CHECKING:
    import torch

HIDDEN = ("hidden_states",)  # what a capture needs of its backend


def parse_layers(spec: str, n_layers: int) -> list[int]:
    """`all`, `every:K` (0, K, 2K, ... plus the last), or a comma list (negative = from the end).
    Ids run 0..n_layers (0 = embeddings)."""
    spec = spec.strip().lower()
    top = n_layers
    if spec == "all":
        return list(range(top + 1))
    if spec.startswith("every:"):
        try:
            k = int(spec.split(":", 1)[1])
        except ValueError:
            k = 0
        if k <= 0:
            raise EvalAwareError(f"--layers {spec!r}: every:K needs a positive integer K")
        return sorted(set(range(0, top + 1, k)) | {top})
    out = []
    for part in spec.split(","):
        part = part.strip()
        try:
            v = int(part)
        except ValueError:
            raise EvalAwareError(f"--layers {spec!r}: {part!r} is not a layer id; use all, every:K "
                                 f"or a comma list such as 0,5,10") from None
        v = top + 1 + v if v < 0 else v
        if not 0 <= v <= top:
            raise EvalAwareError(f"--layers {spec!r}: layer {part} out of range 0..{top}")
        out.append(v)
    return sorted(set(out))


def parse_poolings(spec: str | Sequence[str]) -> list[str]:
    items = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else list(spec)
    bad = [p for p in items if p not in POOLINGS]
    if bad or not items:
        raise EvalAwareError(f"--pooling: unknown {', '.join(bad) or '(empty)'}; use any of "
                             f"{', '.join(POOLINGS)}")
    return list(dict.fromkeys(items))


@dataclass
class CaptureSummary:
    """What a capture did (printed by the CLI, used by the benchmark)."""

    samples_total: int
    samples_done_before: int
    samples_captured: int
    tokens: int
    seconds: float
    shards_written: int
    removed_files: list[str] = field(default_factory=list)
    repaired_shards: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    absent: dict[str, int] = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        return self.samples_captured / self.seconds if self.seconds else 0.0


def pooled(backend: Backend, items: Sequence[CaptureItem], layers: Sequence[int],
           poolings: Sequence[str]) -> torch.Tensor:
    """(batch, n_poolings, n_layers, hidden) float32: each item's poolings, from the backend."""
    weights = [pooling_weights([it.spans], poolings, len(it.ids), left_padded=False)[0]
               for it in items]
    return backend.pooled_hidden_states([it.ids for it in items], layers, weights)


def capture(store: RunLog, backend: Backend, layers: Sequence[int], poolings: Sequence[str],
            dtype: str = "fp16", name: str = "default", batch_size: int = 8,
            shard_size: int = 64, method: str | None = None,
            evidence_methods: Sequence[str] = ("reasoning",), include_answer: bool = True,
            sequence: str = "auto", progress: bool = True,
            extra_settings: dict[str, Any] | None = None,
            subset: Callable[[list[Sample]], list[Sample]] | None = None) -> CaptureSummary:
    """Capture every sample of the run (or of `subset` of them) not yet captured under `name`;
    commits shard by shard. Existing shards are checked first: a corrupt one's samples are
    captured again (`repaired_shards`).

    `backend` has the `hidden_states` capability (hf; vllm started with these layers)."""
    refuse_lacking(backend, HIDDEN, " or ".join(backends_with(*HIDDEN)))
    layout = backend.hidden_layout()
    if dtype not in DTYPES:
        raise EvalAwareError(f"--store-dtype {dtype!r}: use fp16, bf16 or fp32")
    dtype = CANONICAL_DTYPE.get(DTYPES[dtype], dtype)
    if batch_size < 1 or shard_size < 1:
        raise EvalAwareError("--batch-size and --shard-size must be positive")
    acts = ActivationStore(store, name)
    settings = {
        "layers": list(layers), "poolings": list(poolings), "dtype": dtype,
        "engine": backend.kind, "layer_convention": layout.convention,
        "model_identity": backend.identity, "num_hidden_layers": layout.n_layers,
        "hidden_size": layout.hidden_size, "answer_method": method,
        "evidence_methods": list(evidence_methods), "include_answer": include_answer,
        "sequence": sequence, **(extra_settings or {}),
    }
    removed = acts.begin(settings)
    repaired = acts.repair()  # corrupt shards: their samples are captured again below
    _record_in_manifest(store, name, settings)
    samples = store.samples()
    if subset is not None:
        samples = subset(samples)
    done = acts.done_ids()
    todo = [s for s in samples if s.id not in done]
    t0 = time.perf_counter()
    items = build_items(store, todo, backend.tokenizer, method=method,
                        evidence_methods=evidence_methods, include_answer=include_answer,
                        sequence=sequence)
    items.sort(key=lambda it: len(it.ids))
    bar = tqdm(total=len(samples), initial=len(samples) - len(todo), desc=f"capture {name}",
               unit="sample", disable=not progress, dynamic_ncols=True)
    pending: list[CapturedSample] = []
    shards, tokens = 0, 0
    absent = {p: 0 for p in poolings}

    def flush() -> None:
        nonlocal shards, pending
        if pending:
            acts.write_shard(pending, dtype=dtype)
            shards += 1
            pending = []

    for start in range(0, len(items), batch_size):
        batch = items[start:start + batch_size]
        vecs_all = pooled(backend, batch, layers, poolings).numpy()  # (B, P, L, H)
        for b, it in enumerate(batch):
            vecs = {}
            for j, p in enumerate(poolings):
                if it.spans.tokens(p):
                    v = vecs_all[b, j]
                    if not np.isfinite(v.astype(DTYPES_NP[dtype])).all():
                        raise EvalAwareError(f"sample {it.sample_id}: {p} overflows {dtype}; "
                                             f"use --store-dtype bf16")
                    vecs[p] = v
                else:
                    absent[p] += 1
            pending.append(CapturedSample(it.sample_id, vecs, it.info))
            tokens += len(it.ids)
        bar.update(len(batch))
        if len(pending) >= shard_size:
            flush()
    flush()
    bar.close()
    return CaptureSummary(samples_total=len(samples), samples_done_before=len(samples) - len(todo),
                          samples_captured=len(todo), tokens=tokens,
                          seconds=time.perf_counter() - t0, shards_written=shards,
                          removed_files=removed, repaired_shards=repaired, stats=acts.stats(),
                          absent=absent)


def _record_in_manifest(store: RunLog, name: str, settings: dict[str, Any]) -> None:
    """Add the capture (settings, package versions, git revision) to the run manifest."""
    store.add_to_manifest("activations", name, {
        **settings, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "packages": package_versions(), "git_revision": git_revision()})


DTYPES_NP = {"fp16": np.float16, "bf16": np.float32, "fp32": np.float32}
"""numpy dtype used for the overflow check (bf16 has float32's range)."""


def _open(engine: str, model: str, layers: str, opts: dict[str, Any]) -> Backend:
    """Backend `engine` for capture (its class with the `hidden_states` capability); one started
    for the layers it captures gets their ids, read from the model's config."""
    if "hidden_state_layers" in backend_spec(engine, HIDDEN).keywords:
        n_layers, _ = text_config_shape(local_model_path(model, opts.get("revision")),
                                        bool(opts.get("trust_remote_code")))
        opts = {**opts, "hidden_state_layers": parse_layers(layers, n_layers)}
    return open_backend(engine, model, needs=HIDDEN, **opts)


@writes_run_dir("run_dir", create=False)
def run_capture(run_dir: str | Path, layers: str = "all",
                poolings: str | Sequence[str] = DEFAULT_POOLINGS, dtype: str = "fp16",
                model: str | None = None, name: str = "default", batch_size: int = 8,
                shard_size: int = 64, method: str | None = None,
                evidence_methods: Sequence[str] = ("reasoning",), include_answer: bool = True,
                engine: str | None = None, device: str | None = None, progress: bool = True,
                backend: Any | None = None, sequence: str = "auto",
                subset: Callable[[list[Sample]], list[Sample]] | None = None,
                engine_opts: dict[str, Any] | None = None) -> CaptureSummary:
    """Hold the run directory, open the run, load its model (`model` overrides the manifest's),
    capture the run's samples (those `subset` chooses, e.g. ``--limit``). `engine_opts`: how the
    model is loaded (dtype, trust_remote_code, ...; :class:`evalaware.options.EngineOptions`);
    `dtype` is the storage dtype of the activations.

    `engine` names a backend with the `hidden_states` capability (default: the registry's for it), opened through
    :func:`harness.backends.registry.open_backend` (one that takes ``hidden_state_layers``, vLLM's
    capture engine, is started for the layers it captures: their ids come from the model's
    config); `backend` (an already opened one) skips loading, for tests and benchmarks."""
    engine = engine or default_backend(HIDDEN)
    store = RunLog(run_dir, create=False)
    own_backend = backend is None
    try:
        manifest = store.get_meta("manifest") or {}
        run_model = (manifest.get("model") or {}).get("model")
        run_identity = store.get_meta("model_identity") or {}
        name_or_path = model or run_model
        if backend is None and not name_or_path:
            raise EvalAwareError(f"{run_dir}: the run's manifest names no model; pass --model")
        pools = parse_poolings(poolings)
        opts = {k: v for k, v in (engine_opts or {}).items() if v is not None}
        runs_model = model is None or model == run_model  # not another model asked for by name
        if backend is None:
            if runs_model:  # the run's engine arguments (-M), or a refusal of others
                opts["engine_args"] = engine_args_for(run_identity, opts.get("engine_args"), engine, str(run_dir))
                opts = {k: v for k, v in opts.items() if v is not None}
            backend = _open(engine, name_or_path, layers, {**opts, "device": device,
                                                           "batch_size": batch_size})
        if runs_model:
            check_reopened(run_identity, backend.identity, str(run_dir))
        layer_ids = parse_layers(layers, backend.hidden_layout().n_layers)
        want = run_identity.get("weights_sha256")
        got = backend.identity.get("weights_sha256")
        if want and got and want != got and model is None:
            raise EvalAwareError(f"{run_dir}: the run used weights {want[:12]}..., the loaded model "
                                 f"has {got[:12]}...; pass --model to capture with another model")
        return capture(store, backend, layer_ids, pools, dtype=dtype, name=name,
                       batch_size=batch_size, shard_size=shard_size, method=method,
                       evidence_methods=evidence_methods, include_answer=include_answer,
                       sequence=sequence, progress=progress, subset=subset)
    finally:
        if own_backend and backend is not None:
            backend.close()
        store.close()
