"""What an OpenAI-compatible server serves, resolved once when the openai backend starts: the
served model name, a local tokenizer, the local weights (for the identity hash), the vocabulary
size and the end-of-sequence ids."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from harness.models.assets import resolve_model
from harness.core.errors import BackendError, EvalAwareError
from harness.models.fingerprint import local_model_dir, model_identity
from harness.backends.openai.http_client import RetryingClient


def asset_path(name: str | None) -> str | None:
    """The prepared directory of a registered model asset name, else None."""
    if name is None:
        return None
    try:
        path = resolve_model(name)
    except EvalAwareError:
        return None
    return path if path != name else None


@dataclass
class ServedModel:
    """`name` as the server lists it; `tokenizer` None only in chat mode; `model_dir` the local
    weights (None: identity by name only)."""

    name: str
    tokenizer: Any
    model_dir: str | None
    model_info: dict[str, str] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int | None:
        if self.model_dir:
            try:
                cfg = json.loads(open(os.path.join(self.model_dir, "config.json")).read())
                cfg = cfg.get("text_config", cfg)
                if isinstance(cfg.get("vocab_size"), int):
                    return int(cfg["vocab_size"])
            except (OSError, ValueError):
                pass
        return len(self.tokenizer) if self.tokenizer is not None else None

    def eos_ids(self) -> set[int]:
        ids: set[int] = set()
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        if self.model_dir:
            try:
                gen = json.loads(open(os.path.join(self.model_dir, "generation_config.json")).read())
                e = gen.get("eos_token_id")
                ids.update([e] if isinstance(e, int) else list(e or []))
            except (OSError, ValueError):
                pass
        return ids


def resolve_served_model(http: RetryingClient, model: str | None, tokenizer: str | None,
                         weights: str | None, chat_mode: bool) -> ServedModel:
    """`model` None: the only model the server lists; an asset name also matches a server
    started on the asset's path. `tokenizer` / `weights` default to the local model when there
    is one. Several servers must all list the model."""
    local_asset = asset_path(model)
    if model is None:
        model = _only_model(http)
    elif local_asset is not None:
        model = _served_name(http, model, local_asset)
    weights = weights or local_asset
    tok = _load_tokenizer(tokenizer or local_asset, model, chat_mode)
    weights_src = resolve_model(weights) if weights else model
    local = local_model_dir(weights_src) if (weights or os.path.isdir(weights_src)) else None
    if weights and local is None:
        raise BackendError(f"weights {weights!r} are not a local model directory")
    served = ServedModel(model, tok, str(local) if local else None, {"model": model})
    if local is not None:
        served.model_info = model_identity(str(local))
    if len(http.pool) > 1:
        _check_servers(http, model)
    return served


def _listed(http: RetryingClient, only: str | None = None) -> list[Any]:
    data = http.request("GET", "/models", only=only)
    return [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]


def _check_servers(http: RetryingClient, model: str) -> None:
    """Every server must serve the model (same name), else their answers may differ."""
    for url, shown in zip(http.base_urls, http.shown_urls):
        ids = _listed(http, only=url)
        if model not in ids:
            raise BackendError(f"{shown} does not serve {model!r} (it serves "
                               f"{', '.join(map(str, ids)) or 'nothing'}); every --base-url "
                               f"must serve the same model")


def _load_tokenizer(tokenizer: str | None, model: str, chat_mode: bool) -> Any:
    src = resolve_model(tokenizer) if tokenizer else None
    if src is None:  # the served name as a local directory or a locally cached hub id
        local = local_model_dir(model)
        src = str(local) if local is not None else None
    if src is None:
        if chat_mode:
            return None
        raise BackendError(f"the openai backend needs a local tokenizer for {model!r} to "
                           f"render prompts and decode ids: pass tokenizer=PATH_OR_ASSET")
    from transformers import AutoTokenizer  # heavy (~2 s): not at CLI start-up

    try:
        return AutoTokenizer.from_pretrained(src)
    except OSError as e:
        raise BackendError(f"cannot load tokenizer {src!r}: {e}") from e


def _served_name(http: RetryingClient, name: str, path: str) -> str:
    """An asset name is served either under that name or (plain `vllm serve PATH`) its path."""
    try:
        ids = [m.get("id") for m in http.request("GET", "/models").get("data", [])]
    except BackendError:
        return name
    return path if name not in ids and path in ids else name


def _only_model(http: RetryingClient) -> str:
    ids = _listed(http)
    if len(ids) != 1:
        raise BackendError(f"{http.shown_urls[0]} serves {len(ids)} models "
                           f"({', '.join(map(str, ids))}); pass model=")
    return str(ids[0])
