"""Run methods over a dataset into a run directory, resumably.

Samples are processed in batches; each batch's records are committed in one transaction, and
every model call is committed to the call cache as soon as it returns. A re-run with the same
arguments skips finished (method, sample) pairs and gets every finished call from the cache.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Sequence

from harness.backends.base import Backend
from harness.backends.cache import CachedBackend
from harness.core.errors import EvalAwareError, StoreError
from harness.runlog.provenance import base_manifest, dataset_identity
from harness.methods import Method, MethodConfig, RunContext, available
from harness.methods.prompts import PromptLibrary
from harness.core.render import Renderer
from harness.runlog.lock import writes_run_dir
from harness.run.monitor import RunMonitor, default_say
from harness.run.progress import Progress
from harness.run.stream import Done, run_stream
from harness.core.sample import Sample, sample_view
from harness.runlog import LOG_NAME, RunLog


def check_methods(methods: Sequence[str]) -> list[str]:
    """The method names, checked without a model: unknown or repeated names are refused."""
    registry = available()
    unknown = [m for m in methods if m not in registry]
    if unknown:
        raise EvalAwareError(f"unknown method(s) {', '.join(unknown)}; available: "
                             f"{', '.join(sorted(registry))}")
    if not methods:
        raise EvalAwareError("no method given; available: " + ", ".join(sorted(registry)))
    repeated = sorted({m for m in methods if list(methods).count(m) > 1})
    if repeated:
        raise EvalAwareError(f"method(s) named twice: {', '.join(repeated)}")
    return list(methods)


def needs_judge(methods: Sequence[str]) -> bool:
    """Whether any of these methods asks a judge model (motivation, reasoning)."""
    registry = available()
    return any(m in registry and registry[m].needs_judge for m in methods)


def check_dataset(run_dir: str | Path, dataset_path: str | Path | None) -> None:
    """Refuse, before any model loads, a dataset other than the one `run_dir` already holds
    results on (see :meth:`RunLog.check_dataset`); `run_methods` checks and records it again."""
    if dataset_path is None or not (Path(run_dir) / LOG_NAME).is_file():
        return
    with RunLog(run_dir, readonly=True) as store:
        store.check_dataset(dataset_identity(dataset_path))


def _check_same(store: RunLog, key: str, value: Any, what: str) -> None:
    old = store.get_meta(key)
    if old is None:
        store.set_meta(key, value)
    elif json.loads(json.dumps(old)) != json.loads(json.dumps(value)):
        raise StoreError(f"{store.run_dir}: this run directory was made with a different {what} "
                         f"({json.dumps(old, sort_keys=True)}); use a new --out directory")


def chunks(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


@writes_run_dir("run_dir")
def run_methods(samples: list[Sample], methods: Sequence[str], backend: Backend, run_dir: str | Path,
                config: MethodConfig | None = None, prompts: PromptLibrary | None = None,
                template_kwargs: dict[str, Any] | None = None, judge: Backend | None = None,
                batch_size: int = 16, dataset_path: str | Path | None = None,
                progress: bool = True, extra_manifest: dict[str, Any] | None = None,
                say: Any = default_say, schedule: str = "auto",
                window: int | None = None) -> dict[str, Any]:
    """Run `methods` on `samples`, storing into `run_dir` (held for writing, see
    :mod:`harness.runlog.lock`); returns per-method counts.

    `schedule`: "batch" runs one method at a time, `batch_size` samples per committed batch, each
    stage one engine call; "stream" keeps up to `window` (method, sample) tasks in flight on a
    streaming backend (default window: the backend's capacity; :mod:`harness.run.stream`);
    "auto" streams where the backend (and judge) can. Both make the same calls (cache keys).
    `progress`: a bar of the (method, sample) tasks done, per method, with generated tokens/s;
    False logs the same line through `say` (:mod:`harness.run.progress`).

    Judge independence: when a judged method (motivation, reasoning) runs with the model under
    test as its judge (`judge` None, the same backend, or the same weights), the run says so
    through `say` and the manifest records ``self_judged: true`` (None without judged methods).
    """
    config = config or MethodConfig()
    prompts = prompts or PromptLibrary()
    registry = available()
    check_methods(methods)
    for b in (backend, judge) if config.constrain else ():
        if b is not None and not b.capabilities.structured_output:
            raise EvalAwareError(f"--constrain: the {b.kind} backend ({b.device}) cannot hold "
                                 f"answers to a grammar (no structured output)")
    store = RunLog(run_dir)
    cached = CachedBackend(backend, store)
    judge_cached = CachedBackend(judge, store) if judge is not None else None
    renderer = Renderer(backend.tokenizer, dict(template_kwargs or {}))
    ctx = RunContext(backend=cached, renderer=renderer, config=config, prompts=prompts,
                     judge=judge_cached,
                     judge_renderer=Renderer(judge.tokenizer, {}) if judge is not None and
                     judge.tokenizer is not None else None)
    check_context(samples, renderer, config, backend.context_length)
    dataset = dataset_identity(dataset_path) if dataset_path is not None else None
    if dataset is not None:
        store.claim_dataset(dataset)
    _check_same(store, "model_identity", backend.identity, "model")
    store.put_samples(samples)
    pin_prompts(store, prompts)
    self_judged = is_self_judged(methods, backend, judge)
    if self_judged:
        say("judge: the model under test judges its own answers (self-judged: its awareness is "
            "mixed with its judging skill); pass --judge-model for an independent judge")
    monitor = RunMonitor(say)
    summary: dict[str, Any] = {}
    try:
        instances = {}
        for name in methods:
            instances[name] = method = registry[name](ctx)
            _check_same(store, f"settings/{name}", method.settings(), f"setting for method {name}")
        todo = {name: [s for s in samples if s.id not in store.done_ids(name)] for name in methods}
        for name in methods:
            summary[name] = {"skipped": len(samples) - len(todo[name]), "computed": len(todo[name])}
        generated = [c for c in (cached, judge_cached) if c is not None]
        with Progress({m: len(samples) for m in methods}, {m: summary[m]["skipped"] for m in methods},
                      progress, say, lambda: sum(c.generated_tokens for c in generated)) as shown:
            if pick_schedule(schedule, backend, judge) == "stream":
                _stream(instances, todo, samples, ctx, store, monitor, backend, judge, window, shown)
            else:
                for name, method in instances.items():
                    for batch in chunks(todo[name], batch_size):
                        records = method.run_batch(batch)
                        store.put_results(name, records, ctx.log.take())
                        monitor.add(name, [r.to_dict() for r in records])
                        shown.add(name, len(batch))
    finally:
        manifest = base_manifest()
        manifest.update({
            **({"dataset": dataset} if dataset is not None else {}),
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
        try:
            store.write_manifest(manifest)
        finally:
            prompts.on_use = None
            store.close()
    summary["_calls"] = _calls(cached, judge_cached)
    return summary


def pin_prompts(store: RunLog, prompts: PromptLibrary) -> None:
    """Each prompt text's sha256 is recorded in the run directory when first used; a later
    invocation that reads another text under the same name (a changed or different ``--prompts``)
    is refused before any record is made with it, naming the prompt and both digests. The texts
    already recorded are checked at once, not only when read: an invocation with nothing left to
    compute (a resumed or copied run directory) reads none, yet reports the records as made with
    this library's texts."""
    lock = threading.Lock()
    checked: dict[str, str] = {}

    def on_use(name: str, sha: str, path: Path) -> None:
        if checked.get(name) == sha:
            return
        with lock:
            recorded = store.get_meta("prompt_texts") or {}
            if recorded.get(name, sha) != sha:
                raise StoreError(f"{store.run_dir}: prompt {name!r} ({path}) is not the text this run "
                                 f"directory's records were made with (sha256 {recorded[name][:12]}, "
                                 f"now {sha[:12]}); use the --prompts of the earlier runs, or a new --out")
            if name not in recorded:
                store.set_meta("prompt_texts", {**recorded, name: sha})
            checked[name] = sha

    prompts.on_use = on_use
    for name in store.get_meta("prompt_texts") or {}:
        if (found := prompts.find(name)) is not None:  # a text this library no longer has: unchecked
            on_use(name, found[0].sha256, found[1])


SCHEDULES = ("auto", "batch", "stream")


def pick_schedule(schedule: str, backend: Backend, judge: Backend | None) -> str:
    """"stream" or "batch" for this backend and judge; "stream" on a backend that cannot is refused."""
    if schedule not in SCHEDULES:
        raise EvalAwareError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    can = [b for b in (backend, judge) if b is not None and not b.capabilities.streaming]
    if schedule == "stream" and can:
        raise EvalAwareError(f"--schedule stream: the {can[0].kind} backend ({can[0].device}) runs "
                             f"one call at a time (not streaming); use --schedule batch")
    return "batch" if schedule == "batch" or can else "stream"


def _stream(instances: dict[str, Method], todo: dict[str, list[Sample]], samples: Sequence[Sample],
            ctx: RunContext, store: RunLog, monitor: RunMonitor, backend: Backend,
            judge: Backend | None, window: int | None, progress: Progress) -> None:
    """The tasks not done, sample-major, through :func:`harness.run.stream.run_stream`; each
    committed task counts on `progress`."""
    ids = {m: {s.id for s in todo[m]} for m in instances}
    tasks = [(instances[m], s) for s in samples for m in instances if s.id in ids[m]]
    callers = list({id(c): c for b in (backend, judge) if b is not None
                    for c in [b.callers] if c is not None}.values())
    if window is None:
        window = max(b.capabilities.capacity for b in (backend, judge) if b is not None)

    def commit(done: list[Done]) -> None:
        with store.transaction():
            for d in done:
                store.put_results(d.method, d.records, d.calls)
        for name in dict.fromkeys(d.method for d in done):
            monitor.add(name, [r.to_dict() for d in done if d.method == name for r in d.records])
            progress.add(name, sum(d.method == name for d in done))

    run_stream(tasks, ctx, callers, window, commit)


def check_context(samples: Sequence[Sample], renderer: Renderer, config: MethodConfig,
                  limit: int | None) -> None:
    """Refuse, before any model call, a sample whose rendered view and answer cannot fit the
    model's context (a 10 MB prompt would otherwise fill memory before failing)."""
    if not limit:
        return
    for s in samples:
        text = renderer.render_text(sample_view(s, config.view))
        if len(text) > 64 * limit:  # no tokenizer gives 64 characters a token: no need to count
            n = f"over {limit} tokens ({len(text)} characters)"
        elif len(ids := renderer.render(sample_view(s, config.view))) + config.answer_tokens > limit:
            n = f"{len(ids)} tokens"
        else:
            continue
        raise EvalAwareError(f"sample {s.id!r}: its prompt is {n}; with --answer-tokens "
                             f"{config.answer_tokens} it does not fit the model's context of {limit} "
                             f"tokens; shorten or drop it (e.g. --limit/--first), or lower --answer-tokens")


def is_self_judged(methods: Sequence[str], backend: Backend, judge: Backend | None) -> bool | None:
    """None without judged methods; else whether the judge is the model under test."""
    if not needs_judge(methods):
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
