"""Secrets out of what is written or printed: URL credentials, query values and fragments.

A server URL may carry a password (``http://user:SECRET@host``), a key in its query
(``?api_key=SECRET``, or bare: ``?SECRET``) or in its fragment (``#SECRET``); the command line
holds it as typed. Whatever evalaware writes (manifests, the run lock, settings) or prints
(errors, status lines) goes through :func:`redact_text` or :func:`redact_url`: the user-info
becomes ``***@``, each query value (a bare query item whole) ``***`` and the fragment ``***``.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


def redact_url(url: str) -> str:
    """`url` with its user-info, query values (a query item without ``=`` whole) and fragment
    masked (unchanged when it has none of them)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _URL.sub(MASK, url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{MASK}@{netloc.rsplit('@', 1)[1]}"
    query = "&".join(f"{kv.split('=', 1)[0]}={MASK}" if "=" in kv else MASK if kv else kv
                     for kv in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, MASK if parts.fragment else ""))


def redact_text(text: str) -> str:
    """Every URL in `text` redacted (see :func:`redact_url`)."""
    return _URL.sub(lambda m: redact_url(m.group(0)), text)
