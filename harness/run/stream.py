"""The streaming run loop: many (method, sample) tasks in flight at once on a streaming backend.

The batch-synchronous loop (:func:`harness.run.loop.run_methods` with ``schedule="batch"``) runs
one method at a time over `batch_size` samples, each stage (answer -> votes -> judge) one engine
call that returns only when its longest generation ends: with long-tailed reasoning traces the
engine mostly waits on a few stragglers. Here each task (one method on one sample) runs on its own
worker thread, up to `window` at once, and calls the backend as it would alone; a streaming
backend (:attr:`~harness.backends.base.Capabilities.streaming`) feeds every caller's requests into
one running batch (vLLM's continuous batching via :mod:`harness.backends.stream`; a server's own
queue for the openai backend), so a slot freed by a finished sequence is refilled at the next step.

What stays as in the batch loop: every model call goes through the same
:class:`~harness.backends.cache.CachedBackend` with the same requests (same cache keys; a call
another task has in flight is waited for, not repeated) and is committed as soon as it returns; a
task's record and the calls behind it are committed together as soon as the task ends (the main
thread commits, in one transaction, every task that ended since its last commit). An interrupt
loses only tasks in flight, and their finished calls are in the cache.

Tasks go sample-major (every method of sample 1, then sample 2, ...), so the methods of one sample
run together and share its answer. Workers are daemon threads: Ctrl-C does not wait for them.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from harness.core.records import ModelCall, Record
from harness.core.sample import Sample
from harness.methods import Method, RunContext


@dataclass
class Done:
    """One finished task: its method, sample, records and model calls, or the error it raised."""

    method: str
    sample: Sample
    records: list[Record]
    calls: list[ModelCall]
    error: BaseException | None = None


def run_stream(tasks: Sequence[tuple[Method, Sample]], ctx: RunContext, callers: Sequence[Any],
               window: int, commit: Callable[[list[Done]], None]) -> None:
    """Run `tasks` on up to `window` daemon worker threads, each registered with every one of
    `callers` from before it starts until it runs out of tasks; `commit` gets, on this thread, the tasks that ended since its last
    call. The first task error stops new tasks from starting; the ones in flight finish and are
    committed, then the error is raised here."""
    todo: queue.Queue[tuple[Method, Sample]] = queue.Queue()
    for t in tasks:
        todo.put(t)
    out: queue.Queue[Done] = queue.Queue()
    stop = threading.Event()
    n_workers = max(1, min(window, len(tasks)))

    def work() -> None:
        try:
            while not stop.is_set():
                try:
                    method, sample = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    records = method.run_batch([sample])
                    out.put(Done(method.name, sample, records, ctx.log.take()))
                except BaseException as e:  # reported on the main thread
                    ctx.log.take()
                    stop.set()
                    out.put(Done(method.name, sample, [], [], e))
        finally:
            for c in callers:
                c.leave()

    threads = [threading.Thread(target=work, name=f"evalaware-task-{i}", daemon=True)
               for i in range(n_workers)]
    for _ in threads:  # a worker is a caller from before any starts until it runs out of tasks
        for c in callers:
            c.enter()
    for t in threads:
        t.start()
    remaining = len(tasks)
    first_error: BaseException | None = None
    try:
        while remaining:
            try:
                batch = [out.get(timeout=0.2)]
            except queue.Empty:
                if first_error is not None and not any(t.is_alive() for t in threads):
                    break
                continue
            while True:
                try:
                    batch.append(out.get_nowait())
                except queue.Empty:
                    break
            remaining -= len(batch)
            ok = [d for d in batch if d.error is None]
            if ok:
                commit(ok)
            first_error = first_error or next((d.error for d in batch if d.error is not None), None)
    finally:
        stop.set()  # also on Ctrl-C: no new task starts (the daemon workers die with the process)
    if first_error is not None:
        raise first_error
