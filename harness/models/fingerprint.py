"""Identify model weights and tokenizers by content, for cache keys and run manifests."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from harness.models.assets import MARKER, home, resolve_model, sha256_file
from harness.core.errors import BackendError
from harness.models.card import manifest_card
from harness.models.hub import cached_snapshot, download, is_hub_id, offline

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def local_model_dir(name_or_path: str) -> Path | None:
    """The local directory holding a model: the path itself, or a hub id's snapshot in the
    local Hugging Face cache (never downloads). None if not found."""
    p = Path(name_or_path).expanduser()
    if p.is_dir():
        return p.resolve()
    if p.is_file():
        return p.resolve().parent
    return cached_snapshot(name_or_path)


MODEL_CONFIGS = ("config.json", "params.json")  # a Hugging Face model folder's; a Mistral-format one's


def check_model(model: str, revision: str | None = None) -> None:
    """Refuse, without loading or downloading anything, a model that cannot be had: neither a
    local path, a prepared asset, in the local cache (at `revision`), nor (online) a hub id."""
    path = resolve_model(model)
    here = cached_snapshot(path, revision) if revision and is_hub_id(path) else local_model_dir(path)
    folder = Path(path).expanduser()
    if folder.is_dir() and not any((folder / f).is_file() for f in MODEL_CONFIGS):
        raise BackendError(f"model {model!r}: the folder holds no {' or '.join(MODEL_CONFIGS)} (not a model "
                           f"folder)")
    if here is not None or (is_hub_id(path) and not offline()):
        return
    if is_hub_id(path):
        raise BackendError(f"model {model!r} is not in the local Hugging Face cache and downloads "
                           f"are off (HF_HUB_OFFLINE=1 or --offline)")
    raise BackendError(f"model {model!r} is neither a local directory nor a hub id (org/name)")


def local_model_path(model: str, revision: str | None = None) -> str:
    """What engines load for `model`: an asset's directory, a local path, or a hub id (cached, or
    downloaded now unless offline; with `revision`, that snapshot's directory)."""
    path = resolve_model(model)
    if Path(path).expanduser().exists():
        return path
    if revision is None and local_model_dir(path) is not None:
        return path
    check_model(model, revision)
    snap = cached_snapshot(path, revision) if offline() else download(path, revision)
    if snap is None:
        raise BackendError(f"model {model!r} at revision {revision!r} is not in the local Hugging "
                           f"Face cache and downloads are off (HF_HUB_OFFLINE=1 or --offline)")
    return str(snap) if revision else path


def _weights_hash_uncached(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(sha256_file(f).encode())
    return h.hexdigest()


def weights_hash(model_dir: str | Path) -> str:
    """sha256 over the model's weight files. Uses the asset marker's checksums when the directory
    is a prepared asset; otherwise hashes once and caches by (path, size, mtime)."""
    d = Path(model_dir)
    marker = d / MARKER
    if marker.exists():
        files = json.loads(marker.read_text())["files"]
        h = hashlib.sha256()
        for rel in sorted(files):
            if rel.endswith(WEIGHT_SUFFIXES):
                h.update(Path(rel).name.encode())
                h.update(files[rel]["sha256"].encode())
        return h.hexdigest()
    files = sorted(f for f in d.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))
    if not files:
        return "no-weights-found"
    stamp = [(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    key = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()
    cache_file = home() / "weights-hashes.json"
    try:
        cache = json.loads(cache_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        cache = {}
    if key not in cache:
        cache[key] = _weights_hash_uncached(files)
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, cache_file)
    return cache[key]


def tokenizer_fingerprint(tokenizer: Any) -> dict[str, str]:
    """Hashes of the tokenizer's vocabulary and chat template."""
    vocab = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):
        template = json.dumps(template, sort_keys=True)
    return {"vocab_sha256": hashlib.sha256(vocab.encode()).hexdigest(),
            "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest()}


def model_identity(name_or_path: str) -> dict[str, Any]:
    """{'model': name, 'weights_sha256': ...} for a local or locally cached model, with
    'organism' (its card, :mod:`harness.models.card`) when the directory holds an organism."""
    d = local_model_dir(name_or_path)
    out: dict[str, Any] = {"model": name_or_path, "weights_sha256": weights_hash(d) if d else "unknown"}
    card = manifest_card(d) if d else None
    if card is not None:
        out["organism"] = card
    return out


def text_config_shape(path: str, trust_remote_code: bool = False) -> tuple[int, int]:
    """(num_hidden_layers, hidden_size) of a model directory's (text) config."""
    from transformers import AutoConfig  # heavy: when an engine starts

    cfg = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    return int(cfg.num_hidden_layers), int(cfg.hidden_size)
