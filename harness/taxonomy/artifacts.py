"""Method artifacts: clusters about "the user asked me to guess their intent".

The motivation question itself primes models to cite it as evidence of a test (the paper: 2 of 15
top-level clusters). A cluster is flagged when the cosine similarity of its (unit-normalised)
centroid to any artifact description (``harness/prompts/taxonomy_artifacts/descriptions.txt``)
is >= the threshold, or when the naming model answered ``<artifact>yes``. Flagged clusters are
kept out of the second-level grouping and form their own category ``T00``; a category whose
namer answers ``<artifact>yes`` is flagged too. Flagged clusters and categories stay in
taxonomy.json and the reports but are left out of the headline.

Threshold 0.6 (all-MiniLM-L6-v2): paraphrases of "asked to guess the user's intent" scored
0.62-0.83 against the descriptions, genuine cues 0.12-0.50 ("looks like a benchmark question"
0.43, "asks about the model's own goals and values" 0.43).
"""

from __future__ import annotations

import numpy as np

from harness.methods.prompts import PromptLibrary
from harness.taxonomy import TaxonomyError

ARTIFACT_PROMPT = "taxonomy_artifacts/descriptions"
DEFAULT_THRESHOLD = 0.6


def artifact_descriptions(prompts: PromptLibrary | None = None) -> list[str]:
    """The description lines ('#' comments and blank lines dropped)."""
    text = (prompts or PromptLibrary()).get(ARTIFACT_PROMPT).text
    lines = [ln.strip() for ln in text.splitlines()]
    out = [ln for ln in lines if ln and not ln.startswith("#")]
    if not out:
        raise TaxonomyError(f"prompt {ARTIFACT_PROMPT!r} has no descriptions")
    return out


def centroid_similarity(centroids: np.ndarray, descriptions: np.ndarray) -> np.ndarray:
    """Max cosine similarity of each centroid to the description embeddings."""
    c = centroids / np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
    d = descriptions / np.maximum(np.linalg.norm(descriptions, axis=1, keepdims=True), 1e-12)
    return (c @ d.T).max(axis=1)
