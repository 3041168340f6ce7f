"""Secrets out of what is written or printed: URL credentials, path parameters, query values
and fragments.

A server URL may carry a password (``http://user:SECRET@host``), a key in a path parameter
(``/v1;SECRET``), in its query (``?api_key=SECRET``, or bare: ``?SECRET``) or in its fragment
(``#SECRET``); the command line holds it as typed. Whatever evalaware writes (manifests, the run
lock, settings) or prints (errors, status lines) goes through :func:`redact_text` or
:func:`redact_url`: the user-info becomes ``***@``, the path from its first ``;`` on ``;***``,
each query value (a bare query item whole) ``***`` and the fragment ``***``. A server's error
body may echo the secret back in its own words: :func:`redact_echo` also masks every secret of
the URLs sent (:func:`url_secrets`) and whatever follows ``;``, ``?`` or ``#`` in a path.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
MIN_SECRET = 4  # shorter parts of a URL (a query value "1") are not masked where they appear alone
# one slash: a URL a path normalization changed; a trailing ".,:;)" is the sentence's, not the URL's
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:/{1,2}[^\s'\"<>]*[^\s'\"<>.,:;)]")


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
    path = parts.path.split(";", 1)[0] + f";{MASK}" if ";" in parts.path else parts.path
    query = "&".join(f"{kv.split('=', 1)[0]}={MASK}" if "=" in kv else MASK if kv else kv
                     for kv in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, path, query, MASK if parts.fragment else ""))


def url_secrets(url: str) -> list[str]:
    """The parts of `url` that :func:`redact_url` masks, as they appear in it (longest first; those
    of :data:`MIN_SECRET` characters or more)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    found = [parts.netloc.rsplit("@", 1)[0]] if "@" in parts.netloc else []
    if ";" in parts.path:
        found.append(parts.path.split(";", 1)[1])
    found += [kv.split("=", 1)[-1] for kv in parts.query.split("&") if kv.split("=", 1)[-1]]
    found += [parts.fragment] if parts.fragment else []
    return sorted({p for s in found for p in (s, *s.split(":")) if len(p) >= MIN_SECRET}, key=len, reverse=True)


_AFTER_PATH = re.compile(r"(/[^\s'\"<>?;#]*)([?;#])[^\s'\"<>]+")


def redact_echo(text: str, urls: list[str] | tuple[str, ...] = ()) -> str:
    """A server's own words (an error body) made safe to show: :func:`redact_text`, every secret
    of `urls` masked wherever it appears, and anything after ``;``, ``?`` or ``#`` in a path."""
    text = redact_text(text)
    for secret in (s for u in urls for s in url_secrets(u)):
        text = text.replace(secret, MASK)
    return _AFTER_PATH.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", text)


def redact_text(text: str) -> str:
    """Every URL in `text` redacted (see :func:`redact_url`), also one whose ``//`` a path
    normalization made ``/`` (``http:/user:SECRET@host``, as ``Path(url)`` prints it)."""
    return _URL.sub(lambda m: _redact_any(m.group(0)), text)


def _redact_any(url: str) -> str:
    scheme, rest = url.split(":", 1)
    if rest.startswith("//"):
        return redact_url(url)
    out = redact_url(f"{scheme}:/{rest}")
    return f"{scheme}:{out.split(':', 1)[1][1:]}" if MASK in out else url
