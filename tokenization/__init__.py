"""Target words vs tokenizers: per-family token sets, naive and tokenizer-aware scoring.

Main entry points::

    from tokenization import load, variants, score_prompts, TargetWords
    tok = load("deepseek-r1")                  # family name or path, offline
    variants(tok, "evaluation")                # case x context variants, ids, first-token class
    score_prompts(backend, prompt_ids_list)    # -> list[LogprobScore] (naive, top-20, aware)

Submodules import lazily what they need (tokenizers, tiktoken, mistral-common, jinja2).
"""

from __future__ import annotations

from tokenization.load import from_backend, load
from tokenization.scoring import LogprobScore, ScoringPlan, WordScore, score_prompts
from tokenization.tokenizer import Tokenizer
from tokenization.variants import Variant, classify, variants
from tokenization.words import TargetWords

__all__ = ["load", "from_backend", "Tokenizer", "Variant", "variants", "classify", "TargetWords",
           "score_prompts", "ScoringPlan", "LogprobScore", "WordScore"]
