"""Models by hub id: downloaded on first use, as transformers and vLLM would, unless offline.

A hub id (``org/name``) that is not in the local Hugging Face cache is fetched with
huggingface_hub's ``snapshot_download`` (its endpoint, cache and token settings:
``HF_ENDPOINT``, ``HF_HOME``, ``HF_TOKEN``), at a ``--revision`` if given; then its weights are
hashed as every model's are. Offline (``HF_HUB_OFFLINE=1``, which ``--offline``, ``make demo``
and the tests set) nothing is downloaded and a model missing from the cache is an error.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from harness.core import console
from harness.core.errors import BackendError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def offline() -> bool:
    """Downloads are off (``HF_HUB_OFFLINE`` set to a true value)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def is_hub_id(name: str) -> bool:
    """`name` has a hub id's form (``org/name``) and is no path on this machine."""
    return bool(_HUB_ID.match(name)) and not Path(name).expanduser().exists()


def cached_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The local cache's snapshot of `repo_id` at `revision` (default main), never downloading."""
    try:
        from huggingface_hub import snapshot_download  # heavy: only for hub ids, not paths

        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except Exception:
        return None


def download(repo_id: str, revision: str | None = None) -> Path:
    """The snapshot of `repo_id` at `revision`, downloaded unless already cached."""
    from huggingface_hub import snapshot_download  # heavy: only for hub ids, not paths

    where = repo_id + (f"@{revision}" if revision else "")
    console.status(f"model: downloading {where} from the hub (set HF_HUB_OFFLINE=1 or pass "
                   f"--offline to use the local cache only) ...")
    t0 = time.perf_counter()
    try:
        path = Path(snapshot_download(repo_id, revision=revision))
    except Exception as e:  # network, authentication, unknown repo or revision: one line
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise BackendError(f"model {where!r}: could not download it from the hub "
                           f"({type(e).__name__}: {first})") from None
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    console.status(f"model: {where} downloaded ({size / 1e6:.1f} MB) in "
                   f"{time.perf_counter() - t0:.1f} s")
    return path
