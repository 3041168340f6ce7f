"""A small fault-injecting HTTP proxy on 127.0.0.1, for testing client retries against a real server.

Requests are numbered in arrival order (0, 1, 2, ...). `schedule` maps a request number to a fault:

- ``"drop"``: close the connection without any response;
- ``"503"`` (or any 3-digit status): answer with that status and a JSON error, never forwarded;
- ``"delay"``: hold the connection for `delay` seconds (beyond the client's timeout), then close it;

every other request is forwarded to `upstream` unchanged. The proxy is bounded: after
`max_requests` requests it answers 503 and stops, and it stops by itself after `lifetime` seconds.
Counters (`stats`) record what happened. Use it as a context manager.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Mapping
from urllib.parse import urlsplit

Schedule = Mapping[int, str] | Callable[[int], str | None]


class LoopbackProxy:
    """Fault-injecting proxy from ``http://127.0.0.1:<port>`` to `upstream` (an http:// URL)."""

    def __init__(self, upstream: str, schedule: Schedule | None = None, delay: float = 5.0,
                 max_requests: int = 500, lifetime: float = 600.0,
                 upstream_timeout: float = 300.0) -> None:
        u = urlsplit(upstream)
        if u.scheme != "http" or u.hostname not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the loopback proxy only forwards to an http:// loopback address")
        self.upstream_host, self.upstream_port = u.hostname, u.port or 80
        self.schedule = schedule or {}
        self.delay = delay
        self.max_requests = max_requests
        self.lifetime = lifetime
        self.upstream_timeout = upstream_timeout
        self.stats: dict[str, int] = {"requests": 0, "forwarded": 0, "drop": 0, "delay": 0,
                                      "status": 0, "refused": 0, "upstream_errors": 0}
        self.log: list[tuple[int, str, str]] = []  # (request number, path, action)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread: threading.Thread | None = None
        self._timer: threading.Timer | None = None

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> "LoopbackProxy":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        daemon=True, name="loopback-proxy")
        self._thread.start()
        self._timer = threading.Timer(self.lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        """Stop serving (idempotent); safe to call from any thread, including a handler."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._timer is not None:
            self._timer.cancel()

        def _shutdown() -> None:
            self._server.shutdown()
            self._server.server_close()

        t = threading.Thread(target=_shutdown, daemon=True)
        t.start()
        if threading.current_thread() is not self._thread:
            t.join(timeout=10)

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def __enter__(self) -> "LoopbackProxy":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- behaviour ------------------------------------------------------------------------
    def _action(self, n: int) -> str | None:
        if callable(self.schedule):
            return self.schedule(n)
        return self.schedule.get(n)

    def _next(self, path: str) -> tuple[int, str]:
        with self._lock:
            n = self.stats["requests"]
            self.stats["requests"] += 1
            if n >= self.max_requests:
                action = "refuse"
            else:
                action = self._action(n) or "forward"
            self.log.append((n, path, action))
            return n, action

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def _reply(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
                self.send_response(status)
                for k, v in (headers or {}).items():
                    if k.lower() not in ("content-length", "transfer-encoding", "date", "server"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _drop(self) -> None:
                self.close_connection = True
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if proxy.stopped:  # a kept-alive connection outliving the proxy
                    self._drop()
                    return
                n, action = proxy._next(self.path)
                if action == "refuse":
                    proxy._count("refused")
                    self.close_connection = True
                    self._reply(503, json.dumps({"error": {"message": "loopback proxy: request "
                                                           "budget exhausted"}}).encode(),
                                {"Content-Type": "application/json", "Connection": "close"})
                    proxy.stop()
                    return
                if action == "drop":
                    proxy._count("drop")
                    self._drop()
                    return
                if action == "delay":
                    proxy._count("delay")
                    proxy._stopped.wait(proxy.delay)
                    self._drop()
                    return
                if action.isdigit():
                    proxy._count("status")
                    msg = {"error": {"message": f"loopback proxy: injected HTTP {action}",
                                     "code": int(action)}}
                    self._reply(int(action), json.dumps(msg).encode(),
                                {"Content-Type": "application/json"})
                    return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection", "keep-alive", "content-length")}
                conn = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port,
                                                  timeout=proxy.upstream_timeout)
                try:
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    proxy._count("forwarded")
                    self._reply(resp.status, data, {k: v for k, v in resp.getheaders()
                                                    if k.lower() not in ("connection", "keep-alive")})
                except (OSError, http.client.HTTPException) as e:
                    proxy._count("upstream_errors")
                    self._reply(502, json.dumps({"error": {"message": f"upstream: {e}"}}).encode())
                finally:
                    conn.close()

            do_GET = do_POST = _handle

        return Handler


def cycle_schedule(faults: list[str], first: int = 0, every: int = 1) -> Callable[[int], str | None]:
    """Faults[k] for request number `first + k*every`, then pass everything (deterministic)."""
    def schedule(n: int) -> str | None:
        k, r = divmod(n - first, every)
        return faults[k] if n >= first and r == 0 and k < len(faults) else None
    return schedule


__all__ = ["LoopbackProxy", "cycle_schedule"]
