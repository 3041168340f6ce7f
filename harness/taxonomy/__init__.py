"""Taxonomy tool: which features of a prompt set make a model think "this is a test".

Pipeline (one module per step):
``extract`` (evidence of motivation records judged aware -> features with quotes and sample ids)
-> ``embed`` (sentence embeddings, cached in the run store)
-> ``cluster`` (k-means sweep over k, k rule, second-level grouping)
-> ``naming`` (an LLM names clusters through the cached backend; keyword fallback)
-> ``artifacts`` (clusters about "I was asked to guess the intent" are flagged)
-> ``build`` (assembles the taxonomy dict) -> ``render`` (taxonomy.json / .md / .html, PNGs).
The command line is :mod:`evalaware.taxonomy`.
"""

from __future__ import annotations

from harness.core.errors import EvalAwareError


class TaxonomyError(EvalAwareError):
    """Bad input to the taxonomy tool (records, settings, embedder)."""


__all__ = ["TaxonomyError"]
