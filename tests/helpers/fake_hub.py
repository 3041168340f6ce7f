"""A stand-in for the Hugging Face hub on the loopback address: serves the files of local model
directories as repositories, through the same HTTP routes the real hub answers, so
huggingface_hub's real download code runs against it (``HF_ENDPOINT=http://127.0.0.1:PORT``).

Routes: ``GET /api/models/{repo}/revision/{rev}`` (commit sha and file list),
``GET /api/models/{repo}/tree/{rev}`` (the files with sizes) and
``HEAD|GET /{repo}/resolve/{rev}/{file}`` (the file, with ``X-Repo-Commit`` and ``ETag``). Each
repository has one commit per revision name (``main`` and any others given). Requests are
recorded; it stops with the context manager, or by itself after `lifetime` seconds.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


class FakeHub:
    def __init__(self, repos: dict[str, dict[str, Path]], lifetime: float = 300.0) -> None:
        """`repos`: repo id -> {revision name: local model directory}."""
        self.repos = repos
        self.requests: list[str] = []
        self.lifetime = lifetime
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def do_HEAD(self) -> None:  # noqa: N802
                hub._answer(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                hub._answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @staticmethod
    def sha(repo: str, rev: str) -> str:
        return hashlib.sha1(f"{repo}@{rev}".encode()).hexdigest()

    def _find(self, path: str) -> tuple[str, str, str] | None:
        """(repo, revision, rest) for /api/models/REPO/revision/REV or /REPO/resolve/REV/FILE."""
        for repo in self.repos:
            for prefix, kind in ((f"/api/models/{repo}/revision/", "\0api"),
                                 (f"/api/models/{repo}/tree/", "\0tree"), (f"/{repo}/resolve/", "")):
                if path.startswith(prefix):
                    rev, _, rest = path[len(prefix):].partition("/")
                    return repo, unquote(rev), kind or rest
        return None

    def _answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = urlsplit(h.path).path
        self.requests.append(f"{h.command} {path}")
        found = self._find(path)
        revs = self.repos.get(found[0], {}) if found else {}
        if not found or found[1] not in revs and found[1] not in {self.sha(found[0], r) for r in revs}:
            return self._send(h, 404, b'{"error": "Repository not found"}', body,
                              {"X-Error-Code": "RepoNotFound"})
        repo, rev, rest = found
        rev = next((r for r in revs if rev in (r, self.sha(repo, r))), rev)
        root, sha = revs[rev], self.sha(repo, rev)
        files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        if rest == "\0tree":
            data = json.dumps([{"type": "file", "path": f, "size": (root / f).stat().st_size,
                                "oid": hashlib.sha1((root / f).read_bytes()).hexdigest()} for f in files])
            return self._send(h, 200, data.encode(), body, {"Content-Type": "application/json"})
        if rest == "\0api":
            data = json.dumps({"id": repo, "sha": sha, "siblings": [{"rfilename": f} for f in files]})
            return self._send(h, 200, data.encode(), body, {"Content-Type": "application/json"})
        f = root / unquote(rest)
        if not f.is_file():
            return self._send(h, 404, b'{"error": "Entry not found"}', body, {"X-Error-Code": "EntryNotFound"})
        data = f.read_bytes()
        return self._send(h, 200, data, body, {"X-Repo-Commit": sha,
                                                "ETag": f'"{hashlib.sha256(data).hexdigest()}"'})

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, data: bytes, body: bool,
              headers: dict[str, str]) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)

    def __enter__(self) -> "FakeHub":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self._timer = threading.Timer(self.lifetime, self.server.shutdown)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        self.server.shutdown()
        self.server.server_close()
