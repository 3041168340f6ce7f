"""Run methods over a dataset into a run directory, resumably.

Samples are processed in batches; each batch's records are committed in one transaction, and
every model call is committed to the call cache as soon as it returns. A re-run with the same
arguments skips finished (method, sample) pairs and gets every finished call from the cache.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from tqdm.auto import tqdm

from .backends.base import Backend
from .cache import CachedBackend
from .errors import EvalAwareError, StoreError
from .manifest import base_manifest
from .methods import MethodConfig, RunContext, available
from .prompts import PromptLibrary
from .render import Renderer
from .run_monitor import JUDGED_METHODS, RunMonitor, default_say
from .sample import Sample
from .store import Store

BACKENDS = ("vllm", "hf", "openai")


def make_backend(kind: str, model: str, **opts: Any) -> Backend:
    """Create a backend by name; options not meant for it are dropped when None."""
    opts = {k: v for k, v in opts.items() if v is not None}
    if kind == "hf":
        from .backends.hf import HFBackend

        keep = {"dtype", "device", "batch_size", "trust_remote_code", "tokenizer"}
        return HFBackend(model, **{k: v for k, v in opts.items() if k in keep})
    if kind == "vllm":
        from .backends.vllm import VLLMBackend

        drop = {"device", "batch_size", "base_url", "api_key", "max_concurrency", "top_logprobs"}
        return VLLMBackend(model, **{k: v for k, v in opts.items() if k not in drop})
    if kind == "openai":
        from .backends.openai import OpenAIBackend

        keep = {"base_url", "api_key", "tokenizer", "max_concurrency", "timeout", "max_retries",
                "top_logprobs"}
        return OpenAIBackend(model=model, **{k: v for k, v in opts.items() if k in keep})
    raise EvalAwareError(f"unknown backend {kind!r}; use one of {', '.join(BACKENDS)}")


def _check_same(store: Store, key: str, value: Any, what: str) -> None:
    old = store.get_meta(key)
    if old is None:
        store.set_meta(key, value)
    elif json.loads(json.dumps(old)) != json.loads(json.dumps(value)):
        raise StoreError(f"{store.run_dir}: this run directory was made with a different {what} "
                         f"({json.dumps(old, sort_keys=True)}); use a new --out directory")


def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def run_methods(samples: list[Sample], methods: Sequence[str], backend: Backend, run_dir: str | Path,
                config: MethodConfig | None = None, prompts: PromptLibrary | None = None,
                template_kwargs: dict[str, Any] | None = None, judge: Backend | None = None,
                batch_size: int = 16, dataset_path: str | Path | None = None,
                progress: bool = True, extra_manifest: dict[str, Any] | None = None,
                say: Any = default_say) -> dict[str, Any]:
    """Run `methods` on `samples`, storing into `run_dir`; returns per-method counts.

    Judge independence: when a judged method (motivation, reasoning) runs with the model under
    test as its judge (`judge` None, the same backend, or the same weights), the run says so
    through `say` and the manifest records ``self_judged: true`` (None without judged methods).
    """
    config = config or MethodConfig()
    prompts = prompts or PromptLibrary()
    registry = available()
    unknown = [m for m in methods if m not in registry]
    if unknown:
        raise EvalAwareError(f"unknown method(s) {', '.join(unknown)}; available: "
                             f"{', '.join(sorted(registry))}")
    store = Store(run_dir)
    cached = CachedBackend(backend, store)
    judge_cached = CachedBackend(judge, store) if judge is not None else None
    renderer = Renderer(backend.tokenizer, dict(template_kwargs or {}))
    ctx = RunContext(backend=cached, renderer=renderer, config=config, prompts=prompts,
                     judge=judge_cached,
                     judge_renderer=Renderer(judge.tokenizer, {}) if judge is not None and
                     judge.tokenizer is not None else None)
    _check_same(store, "model_identity", backend.identity, "model")
    store.put_samples(samples)
    self_judged = is_self_judged(methods, backend, judge)
    if self_judged:
        say("judge: the model under test judges its own answers (self-judged: its awareness is "
            "mixed with its judging skill); pass --judge-model for an independent judge")
    monitor = RunMonitor(say)
    summary: dict[str, Any] = {}
    try:
        for name in methods:
            method = registry[name](ctx)
            _check_same(store, f"settings/{name}", method.settings(), f"setting for method {name}")
            done = store.done_ids(name)
            todo = [s for s in samples if s.id not in done]
            bar = tqdm(total=len(samples), initial=len(samples) - len(todo), desc=name, unit="sample",
                       disable=not progress, dynamic_ncols=True)
            for batch in chunks(todo, batch_size):
                records = method.run_batch(batch)
                store.put_results(name, records)
                monitor.add(name, records)
                bar.update(len(batch))
            bar.close()
            summary[name] = {"skipped": len(samples) - len(todo), "computed": len(todo)}
    finally:
        manifest = base_manifest(dataset_path)
        manifest.update({
            "model": {**getattr(backend, "model_info", {}), "identity": backend.identity,
                      "backend_settings": getattr(backend, "settings", {})},
            "renderer": renderer.info(),
            "methods": {m: store.get_meta(f"settings/{m}") for m in methods},
            "prompts_sha256": prompts.used,
            "judge": judge.identity if judge is not None else None,
            "self_judged": self_judged,
            "prompt_set": prompts.provenance(),
            "calls": _calls(cached, judge_cached),
            **(extra_manifest or {}),
        })
        history = store.get_meta("manifests", [])
        store.set_meta("manifests", history + [manifest])
        store.set_meta("manifest", manifest)
        (Path(run_dir) / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        store.close()
    summary["_calls"] = _calls(cached, judge_cached)
    return summary


def is_self_judged(methods: Sequence[str], backend: Backend, judge: Backend | None) -> bool | None:
    """None without judged methods; else whether the judge is the model under test."""
    if not any(m in JUDGED_METHODS for m in methods):
        return None
    return judge is None or judge is backend or judge.identity.get("weights_sha256") == \
        backend.identity.get("weights_sha256")


def _calls(cached: CachedBackend, judge: CachedBackend | None) -> dict[str, dict[str, int]]:
    """Model calls made and cache hits, per operation; the judge's under `judge_<op>`."""
    hits, misses = dict(cached.hits), dict(cached.misses)
    if judge is not None:
        hits.update({f"judge_{k}": v for k, v in judge.hits.items()})
        misses.update({f"judge_{k}": v for k, v in judge.misses.items()})
    return {"cache_hits": hits, "model_calls": misses}
