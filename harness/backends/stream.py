"""Continuous batching across callers: one thread owns a step-driven engine; any thread submits
requests and blocks until they finish, and a request joins the running batch at the engine's next
step. This is how the streaming run loop (:mod:`harness.run.stream`) keeps vLLM full: many
samples' workers call the backend at once and vLLM's own scheduler batches their requests
(``LLMEngine.add_request`` + ``LLMEngine.step``; no home-made engine).

Engine RPCs that must not interleave with a step (vLLM's ``collective_rpc``) go through
:meth:`EngineDriver.call`, which runs them on the driver thread between steps.

Failures stay with the callers they belong to: a submission the engine refuses (``add`` raises)
fails its own caller; a failed step fails the callers whose requests were in the engine then, and
their requests are aborted there, so nothing of theirs comes out later to meet a caller that came
after.

:class:`Callers` paces an engine whose steps take no real time (the simulated engine of
``scripts/bench_scheduling.py``): it steps only when every registered caller is waiting on it,
as if callers reacted instantly -- what a GPU step of tens of milliseconds allows in practice.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Protocol, Sequence


class StepEngine(Protocol):
    """What the driver needs of an engine."""

    #: Step only when every registered caller waits (an engine whose steps take no real time).
    paced: bool

    def add(self, prompts: Sequence[Any], params: Sequence[Any]) -> list[str]:
        """Queue requests; the ids `step` reports them under, in order. Where it raises, none of
        them stays queued."""

    def step(self) -> list[tuple[str, Any]]:
        """One engine step: (request id, output) of each request that finished in it."""

    def has_unfinished(self) -> bool:
        """Whether any queued or running request is not finished."""

    def abort(self, ids: Sequence[str]) -> None:
        """Drop these requests (ids `add` returned; finished or unknown ones are ignored)."""


class Callers:
    """Threads that may submit to an engine soon (the streaming loop's workers register here),
    and how many of them are waiting on one; shared by the drivers of the model and its judge."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.active = 0
        self._waits: dict[object, Future[Any] | None] = {}

    def enter(self) -> None:
        """One more caller (register a worker before its thread starts, so a paced engine never
        steps ahead of a worker that has not submitted yet)."""
        with self.cond:
            self.active += 1

    def leave(self) -> None:
        with self.cond:
            self.active -= 1
            self.cond.notify_all()

    @contextmanager
    def caller(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.leave()

    @contextmanager
    def wait(self, fut: Future[Any] | None = None) -> Iterator[None]:
        """The calling thread waits on `fut` (an engine's answer, or another thread's call)."""
        token = object()
        with self.cond:
            self._waits[token] = fut
            self.cond.notify_all()
        try:
            yield
        finally:
            with self.cond:
                del self._waits[token]

    @property
    def waiting(self) -> int:
        """Callers blocked on a future not yet done: one whose answer has come counts as busy at
        once, before its thread wakes (else a paced engine could run ahead of it)."""
        return sum(f is None or not f.done() for f in self._waits.values())

    def settled(self) -> bool:
        """Every active caller waits on an engine (call with `cond` held)."""
        return self.waiting >= self.active


class _Job:
    """One `run` submission: its outputs as they come."""

    def __init__(self, n: int, future: Future[list[Any]]) -> None:
        self.outputs: list[Any] = [None] * n
        self.left = n
        self.future = future


class EngineDriver:
    """Owns `engine` on one daemon thread, started on first use (see the module docstring)."""

    def __init__(self, engine: StepEngine, callers: Callers | None = None, name: str = "engine") -> None:
        self.engine = engine
        self.callers = callers if callers is not None else Callers()
        self.name = name
        self._inbox: deque[tuple[str, Any, Future[Any]]] = deque()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def run(self, prompts: Sequence[Any], params: Sequence[Any]) -> list[Any]:
        """Each request's output, in input order, once all of them have finished."""
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts for {len(params)} sampling params")
        if not prompts:
            return []
        return self._submit("run", (list(prompts), list(params)))

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the driver thread, between two engine steps."""
        if threading.current_thread() is self._thread:
            return fn(*args)
        return self._submit("call", (fn, args))

    def _submit(self, kind: str, payload: Any) -> Any:
        fut: Future[Any] = Future()
        with self.callers.cond:
            if self._closed:
                raise RuntimeError(f"the {self.name} driver is closed")
            self._inbox.append((kind, payload, fut))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=f"{self.name}-driver", daemon=True)
                self._thread.start()
            self.callers.cond.notify_all()
        with self.callers.wait(fut):
            return fut.result()

    def close(self) -> None:
        with self.callers.cond:
            self._closed = True
            self.callers.cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=60)

    def _take(self, routes: dict[str, tuple[_Job, int]]) -> tuple[list[tuple[str, Any, Future[Any]]], bool]:
        """Wait for something to do; returns the new submissions (always taken at once) and
        whether to step: there are unfinished requests and the engine is not paced or every
        caller waits (a paced engine's step would otherwise run ahead of busy callers)."""
        cb = self.callers
        with cb.cond:
            while True:
                if self._closed:
                    return [], False
                busy = bool(routes) or self.engine.has_unfinished()
                step = busy and (not self.engine.paced or cb.settled())
                if self._inbox or step:
                    break
                cb.cond.wait(timeout=1.0 if busy else None)
            taken = list(self._inbox)
            self._inbox.clear()
            if taken and self.engine.paced:
                step = False  # add them first, then look again whether everyone waits
            return taken, step

    def _loop(self) -> None:
        routes: dict[str, tuple[_Job, int]] = {}  # request id -> (its job, its index there)
        while True:
            taken, step = self._take(routes)
            if self._closed:
                closed = RuntimeError(f"the {self.name} driver is closed")
                _fail(taken, closed)
                self._fail_jobs(routes, closed)
                return
            for kind, payload, fut in taken:
                if kind == "call":
                    _settle(fut, *payload)
                else:
                    self._add(routes, fut, *payload)
            if not step:
                continue
            try:
                finished = self.engine.step()
            except BaseException as e:  # an engine failure fails the callers in it, not the thread
                self._fail_jobs(routes, e)
                continue
            for rid, out in finished:
                route = routes.pop(str(rid), None)
                if route is None:  # a request of a job failed earlier, finished before its abort
                    continue
                job, i = route
                job.outputs[i] = out
                job.left -= 1
                if job.left == 0:
                    job.future.set_result(job.outputs)

    def _add(self, routes: dict[str, tuple[_Job, int]], fut: Future[Any], prompts: list[Any],
             params: list[Any]) -> None:
        """Queue one submission's requests; a refusal fails that submission alone."""
        try:
            ids = self.engine.add(prompts, params)
        except BaseException as e:
            fut.set_exception(e)
            return
        job = _Job(len(prompts), fut)
        for i, rid in enumerate(ids):
            routes[str(rid)] = (job, i)

    def _fail_jobs(self, routes: dict[str, tuple[_Job, int]], e: BaseException) -> None:
        """Fail every job with a request in `routes` and abort what is left of their requests."""
        jobs = {id(job): job for job, _ in routes.values()}
        left = list(routes)
        routes.clear()
        try:
            self.engine.abort(left)
        except Exception:  # an engine that cannot abort has failed already: its callers hear `e`
            pass
        for job in jobs.values():
            if not job.future.done():
                job.future.set_exception(e)


def _settle(fut: Future[Any], fn: Callable[..., Any], args: Sequence[Any]) -> None:
    try:
        fut.set_result(fn(*args))
    except BaseException as e:
        fut.set_exception(e)


def _fail(taken: Sequence[tuple[str, Any, Future[Any]]], e: BaseException) -> None:
    for _, _, fut in taken:
        if not fut.done():
            fut.set_exception(e)
