"""Load a tokenizer by family name or path, offline.

Accepted: a family name (``qwen3``, ``deepseek-r1``, ``llama3``, ``gpt-oss``, ``gpt2``,
``mistral-v3``, ``mistral-tekken``, ``gemma3``, ``smollm2``; its asset must be prepared), a
prepared asset directory (with ``family.json``), an HF directory (``tokenizer.json`` plus
optional ``tokenizer_config.json`` / ``chat_template.jinja``), a ``tokenizer.json`` file, a
``.tiktoken`` file (pre-tokenizer regex chosen by the file's sha256 for o200k, cl100k, GPT-2, Qwen and Llama 3,
otherwise the cl100k/Llama-3 regex, or ``pattern=``), a Tekken ``.json`` or a SentencePiece
``.model*`` file (through mistral-common).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import tiktoken
from tokenizers import Tokenizer as TK

from tokenization import assets as _assets  # registers the tokenizer assets; their formats
from tokenization import families as fam
from tokenization.asset_store import require
from tokenization.errors import AssetError
from tokenization.quicktok import read_tiktoken
from tokenization.tokenizer import HFTokenizer, MistralTokenizer, TiktokenTokenizer, Tokenizer

# sha256 of known .tiktoken files -> (regex, special tokens)
_KNOWN_TIKTOKEN = {
    "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d": (fam.O200K_PAT, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018}),
    "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7": (fam.LLAMA3_PAT, {"<|endoftext|>": 100257}),
    "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930": (fam.GPT2_PAT, {"<|endoftext|>": 50256}),
    "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186": (fam.QWEN_PAT, {}),  # qwen3 ranks
    "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55": (fam.LLAMA3_PAT, {}),  # llama3 ranks
}


def load(name_or_path: str | Path, **kw: Any) -> Tokenizer:
    """A :class:`Tokenizer` for a family name or a path (see module docstring)."""
    s = str(name_or_path)
    if s in fam.FAMILIES:
        return load_dir(require(fam.FAMILIES[s].asset), name=s)
    p = Path(s).expanduser()
    if not p.exists():
        raise AssetError(f"unknown tokenizer {s!r}: not a family ({', '.join(fam.FAMILIES)}) nor an existing path")
    if p.is_dir():
        return load_dir(p, name=s)
    return load_file(p, name=s, **kw)


def load_dir(d: Path, name: str | None = None) -> Tokenizer:
    """An asset directory (``family.json``) or an HF tokenizer directory."""
    name = name or str(d)
    meta_path = d / "family.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        template = _template(d, meta.get("chat_template"))
        if meta["format"] == _assets.TOKENIZER_JSON:
            return _hf_file(d / meta["file"], name, template, meta.get("bos_token"), meta.get("eos_token"))
        if meta["format"] == "tiktoken":
            specials = json.loads((d / meta["special_tokens"]).read_text())
            return _tiktoken(d / meta["file"], name, meta["pattern"], specials, template,
                             meta.get("bos_token"), meta.get("eos_token"))
        if meta["format"] == "mistral":
            return MistralTokenizer(d / meta["file"], name)
        raise AssetError(f"{meta_path}: unknown format {meta['format']!r}")
    if not (d / "tokenizer.json").exists():
        raise AssetError(f"{d}: no tokenizer.json or family.json")
    cfg: dict[str, Any] = {}
    if (d / "tokenizer_config.json").exists():
        cfg = json.loads((d / "tokenizer_config.json").read_text())
    template = cfg.get("chat_template")
    if (d / "chat_template.jinja").exists():
        template = (d / "chat_template.jinja").read_text()
    tokname = lambda t: t.get("content") if isinstance(t, dict) else t  # noqa: E731
    return _hf_file(d / "tokenizer.json", name, template, tokname(cfg.get("bos_token")),
                    tokname(cfg.get("eos_token")))


def load_file(p: Path, name: str | None = None, pattern: str | None = None) -> Tokenizer:
    name = name or str(p)
    if p.suffix == ".tiktoken":
        sha = hashlib.sha256(p.read_bytes()).hexdigest()
        known_pat, specials = _KNOWN_TIKTOKEN.get(sha, (fam.LLAMA3_PAT, {}))
        return _tiktoken(p, name, pattern or known_pat, specials, None, None, None)
    if ".model" in p.name:
        return MistralTokenizer(p, name)
    if p.suffix == ".json":
        head = json.loads(p.read_text())
        if "config" in head and "vocab" in head and isinstance(head["vocab"], list):  # Tekken
            return MistralTokenizer(p, name)
        return _hf_file(p, name, None, None, None)
    raise AssetError(f"{p}: unrecognised tokenizer file (expected tokenizer.json, .tiktoken, tekken .json or .model)")


def _template(d: Path, ref: str | None) -> str | None:
    if not ref or ref == "mistral-common":
        return None
    return (d / ref).read_text()


def _hf_file(path: Path, name: str, template: str | None, bos: str | None, eos: str | None) -> HFTokenizer:
    return HFTokenizer(TK.from_file(str(path)), name, chat_template=template, bos_token=bos, eos_token=eos)


def _tiktoken(path: Path, name: str, pattern: str, specials: dict[str, int], template: str | None,
              bos: str | None, eos: str | None) -> TiktokenTokenizer:
    enc = tiktoken.Encoding(name=Path(path).stem, pat_str=pattern, mergeable_ranks=read_tiktoken(path),
                            special_tokens=specials)
    return TiktokenTokenizer(enc, name, chat_template=template, bos_token=bos, eos_token=eos)


def from_backend(backend: Any) -> Tokenizer:
    """The tokenizer of a harness backend (its transformers tokenizer, wrapped)."""
    tok = backend.tokenizer
    if isinstance(tok, Tokenizer):
        return tok
    return HFTokenizer.from_transformers(tok)
