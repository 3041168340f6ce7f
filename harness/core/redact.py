"""Secrets out of what is written or printed: URL credentials and query values.

A server URL may carry a password (``http://user:SECRET@host``) or a key in its query
(``?api_key=SECRET``); the command line holds it as typed. Whatever evalaware writes (manifests,
the run lock, settings) or prints (errors, status lines) goes through :func:`redact_text` or
:func:`redact_url`: the user-info becomes ``***@`` and each query value ``***``.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redact_url(url: str) -> str:
    """`url` with its user-info and query values masked (unchanged when it has neither)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _URL.sub(MASK, url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(f"{kv.split('=', 1)[0]}={MASK}" if "=" in kv else kv
                     for kv in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str) -> str:
    """Every URL in `text` redacted (see :func:`redact_url`)."""
    return _URL.sub(lambda m: redact_url(m.group(0)), text)
