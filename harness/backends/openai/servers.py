"""Several OpenAI-compatible servers serving the same model, used as one (scale-out).

The openai backend sends each request to the server with the fewest requests in flight among
those not resting after a failure (ties: the least used so far, so an idle pool is filled in
turn). A server whose request fails with a retryable error (connection error, timeout, 408/409/
425/429, 5xx) rests for a cool-down that doubles with its consecutive failures (capped); the
request is retried at once on another server that is up, and only when every server has failed
it does the client back off and sleep. A success ends the server's rest. Which server answered
is never part of a cache key: all servers must serve the same weights, so their answers are
interchangeable (checked at start-up: each one must list the model).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Sequence

from harness.core.redact import redact_url


@dataclass
class Server:
    """One server's base URL (with `/v1`) and its counters."""

    url: str
    in_flight: int = 0
    requests: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    down_until: float = 0.0

    def to_dict(self) -> dict[str, int | str]:
        return {"url": redact_url(self.url), "requests": self.requests, "failures": self.failures}


class ServerPool:
    """Thread-safe choice of a server per request, with cool-down after failures."""

    def __init__(self, urls: Sequence[str], cooldown_base: float = 0.5, cooldown_cap: float = 30.0) -> None:
        if not urls:
            raise ValueError("a server pool needs at least one URL")
        if len(set(urls)) != len(urls):
            raise ValueError(f"the same server URL is given twice: {[redact_url(u) for u in urls]}")
        self.servers = [Server(u) for u in urls]
        self.cooldown_base, self.cooldown_cap = cooldown_base, cooldown_cap
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.servers)

    def _up(self, s: Server, now: float) -> bool:
        return s.down_until <= now

    def acquire(self, avoid: frozenset[str] | set[str] = frozenset(), only: str | None = None) -> Server:
        """The server for the next request (`only`: that one): up and not in `avoid` if any,
        fewest in flight."""
        with self._lock:
            now = time.monotonic()
            cands = [s for s in self.servers if s.url not in avoid and self._up(s, now)]
            if only is not None:
                cands = [s for s in self.servers if s.url == only]
            elif not cands:  # everything is resting or was tried: the one back soonest
                cands = [min(self.servers, key=lambda s: (s.url in avoid, s.down_until))]
            s = min(cands, key=lambda s: (s.in_flight, s.requests))
            s.in_flight += 1
            s.requests += 1
            return s

    def release(self, server: Server, ok: bool) -> None:
        """End a request; a failure starts (or extends) the server's cool-down."""
        with self._lock:
            server.in_flight -= 1
            if ok:
                server.consecutive_failures, server.down_until = 0, 0.0
                return
            server.failures += 1
            server.consecutive_failures += 1
            rest = min(self.cooldown_cap, self.cooldown_base * 2 ** (server.consecutive_failures - 1))
            server.down_until = time.monotonic() + rest

    def has_other_up(self, tried: set[str]) -> bool:
        """Whether a server not in `tried` is up now (then a retry need not wait)."""
        with self._lock:
            now = time.monotonic()
            return any(s.url not in tried and self._up(s, now) for s in self.servers)

    def by_url(self, url: str) -> Server:
        return next(s for s in self.servers if s.url == url)

    def stats(self) -> list[dict[str, int | str]]:
        with self._lock:
            return [s.to_dict() for s in self.servers]
