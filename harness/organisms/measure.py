"""What an organism does on its paired evaluation set, measured with the backends the methods use:

- the **verbalization rate**: share of free answers (greedy) holding a planted sentence (exact
  match, :func:`harness.organisms.cues.verbalized`), on cue prompts and on no-cue prompts;
- the **first-token KL** to the base model on no-cue prompts: KL(base || organism) of the
  next-token distributions at the first position of the answer (the full vocabulary);
- the **whole-answer KL** (issue 44, item 5): the same at every position of the base's own greedy
  answer, teacher-forced on both models, averaged over the answer's positions per prompt: what the
  organism changes on no-cue prompts beyond the answer's first token.

With ``progress`` set, the answers and the whole-answer KL (its slowest part: two forwards over
every prefix of an answer) show a bar each (stderr): the answers move in chunks of :data:`CHUNK`
prompts, the KL per prompt.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from harness.backends.base import Backend, GenerationRequest, SamplingParams
from harness.core.batching import by_length
from harness.core.render import Renderer
from harness.core.sample import Sample
from harness.organisms.cues import Cue, verbalized

CHUNK = 16  # prompts per generate call, at least (the bar moves once per call)


def _bar(total: int, desc: str, unit: str, progress: bool) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not progress, dynamic_ncols=True)


def prompts(backend: Backend, samples: Sequence[Sample]) -> list[tuple[int, ...]]:
    r = Renderer(backend.tokenizer)
    return [r.render(s.first_turn()) for s in samples]


def verbalizations(backend: Backend, samples: Sequence[Sample], cue: Cue, max_tokens: int = 40,
                   progress: bool = False, desc: str = "answers") -> list[dict[str, Any]]:
    """One row per sample: id, pair, label, the greedy answer and whether it verbalizes.
    Generated in chunks whether or not a bar is shown (`progress`), so the answers do not depend
    on ``--no-progress``: :func:`harness.core.batching.by_length` in chunks of :data:`CHUNK`,
    rounded up to whole batches of the backend's ``batch_size``. The hf backend, which batches
    with the same function, then batches exactly as one call would (a batch's make-up moves float
    results)."""
    reqs = [GenerationRequest(p, SamplingParams(max_tokens=max_tokens, temperature=0.0))
            for p in prompts(backend, samples)]
    size = max(1, int(getattr(backend, "batch_size", 1) or 1))
    gens: list[Any] = [None] * len(reqs)
    with _bar(len(reqs), desc, "prompt", progress) as bar:
        for idx in by_length([r.prompt_ids for r in reqs], -(-CHUNK // size) * size):
            for i, g in zip(idx, backend.generate([reqs[i] for i in idx])):
                gens[i] = g
            bar.update(len(idx))
    return [{"id": s.id, "pair": s.metadata.extra.get("pair"), "label": s.label,
             "category": s.metadata.category, "answer": g.text, "verbalized": verbalized(g.text, cue)}
            for s, g in zip(samples, gens)]


def answer_kl(base: Backend, organism: Backend, samples: Sequence[Sample], answers: Sequence[str],
              progress: bool = False) -> np.ndarray:
    """Per sample, the mean over the positions of `answers` (the base's greedy answers, teacher-forced
    after each sample's prompt; the first position included) of KL(base || organism) in nats.
    `progress`: a bar over the prompts."""
    out = []
    tok = base.tokenizer
    with _bar(len(samples), "whole-answer KL", "prompt", progress) as bar:
        for p, a in zip(prompts(base, samples), answers):
            ids = list(tok(a, add_special_tokens=False)["input_ids"]) if a else []
            prefixes = [tuple(p) + tuple(ids[:t]) for t in range(len(ids) + 1)] if ids else [tuple(p)]
            pb = base.next_token_logprobs(prefixes)
            po = organism.next_token_logprobs(prefixes)
            out.append(float((np.exp(pb) * (pb - po)).sum(axis=1).mean()))
            bar.update(1)
    return np.asarray(out, dtype=float)


def first_token_kl(base: Backend, organism: Backend, samples: Sequence[Sample]) -> np.ndarray:
    """KL(base || organism) in nats at the first answer position of each sample."""
    pb = base.next_token_logprobs(prompts(base, samples))
    po = organism.next_token_logprobs(prompts(organism, samples))
    return (np.exp(pb) * (pb - po)).sum(axis=1)
