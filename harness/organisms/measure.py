"""What an organism does on its paired evaluation set, measured with the backends the methods use:

- the **verbalization rate**: share of free answers (greedy) holding a planted sentence (exact
  match, :func:`harness.organisms.cues.verbalized`), on cue prompts and on no-cue prompts;
- the **first-token KL** to the base model on no-cue prompts: KL(base || organism) of the
  next-token distributions at the first position of the answer (the full vocabulary).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from harness.backends.base import Backend, GenerationRequest, SamplingParams
from harness.core.render import Renderer
from harness.core.sample import Sample
from harness.organisms.cues import Cue, verbalized


def prompts(backend: Backend, samples: Sequence[Sample]) -> list[tuple[int, ...]]:
    r = Renderer(backend.tokenizer)
    return [r.render(s.first_turn()) for s in samples]


def verbalizations(backend: Backend, samples: Sequence[Sample], cue: Cue,
                   max_tokens: int = 40) -> list[dict[str, Any]]:
    """One row per sample: id, pair, label, the greedy answer and whether it verbalizes."""
    gens = backend.generate([GenerationRequest(p, SamplingParams(max_tokens=max_tokens, temperature=0.0))
                             for p in prompts(backend, samples)])
    return [{"id": s.id, "pair": s.metadata.extra.get("pair"), "label": s.label,
             "category": s.metadata.category, "answer": g.text, "verbalized": verbalized(g.text, cue)}
            for s, g in zip(samples, gens)]


def first_token_kl(base: Backend, organism: Backend, samples: Sequence[Sample]) -> np.ndarray:
    """KL(base || organism) in nats at the first answer position of each sample."""
    pb = base.next_token_logprobs(prompts(base, samples))
    po = organism.next_token_logprobs(prompts(organism, samples))
    return (np.exp(pb) * (pb - po)).sum(axis=1)
