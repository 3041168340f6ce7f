"""What an organism does on its paired evaluation set, measured with the backends the methods use:

- the **verbalization rate**: share of free answers (greedy) holding a planted sentence (exact
  match, :func:`harness.organisms.cues.verbalized`), on cue prompts and on no-cue prompts;
- the **first-token KL** to the base model on no-cue prompts: KL(base || organism) of the
  next-token distributions at the first position of the answer (the full vocabulary);
- the **whole-answer KL** (issue 44, item 5): the same at every position of the base's own greedy
  answer, teacher-forced on both models, averaged over the answer's positions per prompt: what the
  organism changes on no-cue prompts beyond the answer's first token.
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


def answer_kl(base: Backend, organism: Backend, samples: Sequence[Sample], answers: Sequence[str]) -> np.ndarray:
    """Per sample, the mean over the positions of `answers` (the base's greedy answers, teacher-forced
    after each sample's prompt; the first position included) of KL(base || organism) in nats."""
    out = []
    tok = base.tokenizer
    for p, a in zip(prompts(base, samples), answers):
        ids = list(tok(a, add_special_tokens=False)["input_ids"]) if a else []
        prefixes = [tuple(p) + tuple(ids[:t]) for t in range(len(ids) + 1)] if ids else [tuple(p)]
        pb = base.next_token_logprobs(prefixes)
        po = organism.next_token_logprobs(prefixes)
        out.append(float((np.exp(pb) * (pb - po)).sum(axis=1).mean()))
    return np.asarray(out, dtype=float)


def first_token_kl(base: Backend, organism: Backend, samples: Sequence[Sample]) -> np.ndarray:
    """KL(base || organism) in nats at the first answer position of each sample."""
    pb = base.next_token_logprobs(prompts(base, samples))
    po = organism.next_token_logprobs(prompts(organism, samples))
    return (np.exp(pb) * (pb - po)).sum(axis=1)
