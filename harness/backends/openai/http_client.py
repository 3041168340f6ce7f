"""JSON over HTTP to a pool of OpenAI-compatible servers, for :mod:`harness.backends.openai.backend`.

Connection errors, timeouts, 408/409/425/429 and 5xx are retried with exponential backoff and
jitter (honouring `Retry-After`); other 4xx raise :class:`BackendError` at once with the server's
message. A request that fails on one server is retried at once on another that is up
(:class:`harness.backends.openai.servers.ServerPool`); only when none is left untried does the client
back off. :meth:`RetryingClient.map` runs one request per item on a thread pool of
`max_concurrency` per server, results in input order.
"""

from __future__ import annotations

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar
from urllib.parse import urlsplit, urlunsplit

from harness.core.errors import BackendError
from harness.backends.urls import normalize_base_url
from harness.core.redact import redact_echo, redact_text, redact_url
from harness.backends.openai.servers import ServerPool

RETRY_STATUSES = frozenset({408, 409, 425, 429})
T = TypeVar("T")
R = TypeVar("R")


def join_url(base: str, path: str) -> str:
    """`base` (a normalized server URL, maybe with a query) + an API path before the query."""
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, parts.path + path, parts.query, ""))


def error_message(body: bytes) -> str:
    """The server's error message from an OpenAI-style (or vLLM-style) error body."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body[:500].decode("utf-8", "replace").strip() or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if data.get("message"):
            return str(data["message"])
        if data.get("detail"):
            return str(data["detail"])
    return json.dumps(data)[:500]


class RetryingClient:
    """Requests to the servers at `base_urls` (normalized to ``.../v1``), with retries.
    `stats` counts requests, retries and failures (shared with the backend)."""

    def __init__(self, base_urls: Sequence[str], api_key: str | None = None,
                 headers: dict[str, str] | None = None, max_concurrency: int = 256,
                 timeout: float = 60.0, max_retries: int = 5, backoff_base: float = 0.5,
                 backoff_cap: float = 30.0) -> None:
        if max_concurrency < 1:
            raise BackendError("max_concurrency must be at least 1")
        try:
            self.pool = ServerPool([normalize_base_url(u) for u in base_urls], backoff_base,
                                   backoff_cap)
        except ValueError as e:
            raise BackendError(f"--base-url: {e}") from None
        self.base_urls = [s.url for s in self.pool.servers]  # for requests: never written
        self.shown_urls = [redact_url(u) for u in self.base_urls]  # for manifests and messages
        self.max_concurrency = max_concurrency
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff_base = float(backoff_base)
        self.backoff_cap = float(backoff_cap)
        import httpx  # pulls in rich and pygments (~60 ms): not at CLI start-up

        self._httpx = httpx
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            hdrs["Authorization"] = f"Bearer {api_key}"
        n = max_concurrency * len(self.pool)
        self._client = httpx.Client(headers=hdrs, timeout=httpx.Timeout(self.timeout),
                                    limits=httpx.Limits(max_connections=n,
                                                        max_keepalive_connections=n))
        self._lock = threading.Lock()
        # One bound on requests in flight for every caller together (the streaming run loop calls
        # from many threads; each call's own pool would otherwise multiply it).
        self._slots = threading.BoundedSemaphore(n)
        self.stats = {"requests": 0, "retries": 0, "failures": 0}

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_cap, self.backoff_base * (2 ** attempt))
        delay = delay / 2 + random.uniform(0, delay / 2)  # "equal jitter"
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_cap))
        return delay

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def request(self, method: str, path: str, payload: dict[str, Any] | None = None,
                only: str | None = None) -> dict[str, Any]:
        """One API call with retries, on the pool's servers (`only`: that server); returns the
        decoded JSON body. After a failure the retry goes at once to another server that is up;
        when none is left untried, it backs off first."""
        tried: set[str] = set()
        last = ""
        sleeps = 0
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._count("retries")
            self._count("requests")
            server = self.pool.acquire(avoid=tried, only=only)
            url = join_url(server.url, path)
            try:
                body, last, retry_after = self._attempt(method, url, payload)
            except BaseException:  # a non-retryable answer is not the server's failure
                self.pool.release(server, ok=True)
                raise
            self.pool.release(server, ok=body is not None)
            if body is not None:
                return body
            tried.add(server.url)
            if attempt < self.max_retries:
                if only is None and self.pool.has_other_up(tried):
                    continue
                tried.clear()
                time.sleep(self._backoff(sleeps, retry_after))
                sleeps += 1
        self._count("failures")
        where = self.shown_urls[0] if len(self.pool) == 1 or only else f"{len(self.pool)} servers"
        raise BackendError(f"{method} {path} on {where} failed after {self.max_retries + 1} "
                           f"attempt(s): {last}")

    def _attempt(self, method: str, url: str, payload: dict[str, Any] | None
                 ) -> tuple[dict[str, Any] | None, str, float | None]:
        """One HTTP request: (JSON body, "", None) on success, else (None, why, Retry-After);
        a non-retryable 4xx raises :class:`BackendError`."""
        httpx = self._httpx
        shown = redact_url(url)
        try:
            r = self._client.request(method, url, json=payload)
        except httpx.TimeoutException as e:
            return None, f"{shown}: timed out after {self.timeout:g} s ({type(e).__name__})", None
        except httpx.TransportError as e:
            return None, redact_text(f"{shown}: {type(e).__name__}: {e}"), None
        if r.status_code < 400:
            try:
                return r.json(), "", None
            except ValueError:
                return None, f"{shown}: HTTP {r.status_code} with a body that is not JSON", None
        msg = redact_echo(error_message(r.content), self.base_urls)  # a body may echo the URL's secret
        if r.status_code not in RETRY_STATUSES and r.status_code < 500:
            self._count("failures")
            raise BackendError(f"{method} {shown}: HTTP {r.status_code}: {msg}")
        try:
            retry_after: float | None = float(r.headers.get("retry-after", ""))
        except ValueError:
            retry_after = None
        return None, f"{shown}: HTTP {r.status_code}: {msg}", retry_after

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """`fn` over `items`, in input order, with at most `max_concurrency` requests per server in
        flight across all threads calling this client."""
        def slot(x: T) -> R:
            with self._slots:
                return fn(x)

        workers = min(self.max_concurrency * len(self.pool), len(items))
        if workers <= 1:
            return [slot(x) for x in items]
        pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai-backend")
        try:
            return list(pool.map(slot, items))
        finally:  # on the first error, drop queued requests instead of running them all
            pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        self._client.close()
