"""Server URLs as the openai backend takes them: checked where options are read (the backend specs,
no HTTP client imported) and normalized where requests are sent."""

from __future__ import annotations

from typing import Sequence
from urllib.parse import urlsplit, urlunsplit

from harness.core.errors import EvalAwareError
from harness.core.redact import redact_url


def normalize_base_url(base_url: str) -> str:
    """`http://host:port` -> `http://host:port/v1`; a URL with a path is kept as given (a query
    stays after the path). Only http(s) URLs without user-info are taken: a key goes in the
    environment variable named by --api-key-env, never in the URL."""
    parts = urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{redact_url(base_url)!r} is not an http(s) server URL "
                         f"(e.g. http://127.0.0.1:8000/v1)")
    if "@" in parts.netloc:
        raise ValueError(f"{redact_url(base_url)}: credentials in the URL are not taken (they would "
                         f"be stored and sent as Basic auth); put the key in the environment "
                         f"variable named by --api-key-env")
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))



def check_base_urls(urls: str | Sequence[str] | None, flag: str) -> None:
    """Refuse no server URL, or one that is not a URL (`flag` names the option in messages)."""
    if not urls:
        raise EvalAwareError(f"the openai backend needs {flag} (the server's URL)")
    for url in [urls] if isinstance(urls, str) else urls:
        try:
            normalize_base_url(url)
        except ValueError as e:
            raise EvalAwareError(f"{flag}: {e}") from None
