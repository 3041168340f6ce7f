"""Tiny random-initialised causal LMs for fast, real (not mocked) tests and benchmarks."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


def build_tiny_model(out_dir: str | Path, tokenizer_dir: str | Path, layers: int = 2,
                     hidden: int = 64, seed: int = 0) -> Path:
    """A Llama-architecture model with random weights and a real tokenizer, saved as a
    safetensors model directory that both transformers and vLLM load."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = Path(out_dir)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, tie_word_embeddings=True,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


@contextmanager
def tiny4_backend(tmp_path_factory: Any, tokenizer_dir: str | Path, batch_size: int) -> Iterator[Any]:
    """A 4-block tiny random Llama (seed 3; steerable layers 1..3) opened as an HFBackend with
    `batch_size`, closed on exit: the steering tests' model."""
    from harness.backends.hf.backend import HFBackend

    d = build_tiny_model(tmp_path_factory.mktemp("tiny4") / "m", tokenizer_dir, layers=4, seed=3)
    b = HFBackend(str(d), batch_size=batch_size)
    try:
        yield b
    finally:
        b.close()
