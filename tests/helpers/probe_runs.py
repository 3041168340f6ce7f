"""Small runs for tests and benchmarks: a run directory holding samples and the model's cached
answers (exactly the shared answer call every method makes), without running a method.

The answer settings are recorded as ``settings/answers`` so capture finds them as it finds a
method's settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.backends.base import Backend
from harness.backends.cache import CachedBackend
from harness.methods.base import MethodConfig, RunContext, answer_samples
from harness.methods.prompts import PromptLibrary
from harness.core.render import Renderer
from harness.core.sample import Message, Sample, SampleMeta
from harness.runlog import RunLog


def answer_run(run_dir: str | Path, samples: Sequence[Sample], backend: Backend,
               config: MethodConfig | None = None, template_kwargs: dict[str, Any] | None = None,
               answers: bool = True, batch_size: int = 16) -> RunLog:
    """Create (or extend) a run directory with `samples` and, if `answers`, cached answers."""
    config = config or MethodConfig()
    store = RunLog(run_dir)
    store.put_samples(list(samples))
    store.set_meta("model_identity", backend.identity)
    renderer = Renderer(backend.tokenizer, dict(template_kwargs or {}))
    store.set_meta("manifest", {"model": {**getattr(backend, "model_info", {}),
                                          "identity": backend.identity},
                                "renderer": renderer.info()})
    if answers:
        store.set_meta("settings/answers", {"config": config.to_dict()})
        ctx = RunContext(backend=CachedBackend(backend, store), renderer=renderer, config=config,
                         prompts=PromptLibrary())
        for i in range(0, len(samples), batch_size):
            answer_samples(ctx, samples[i:i + batch_size])
    return store


def random_samples(n_groups: int = 12, per_group: int = 5, seed: int = 0,
                   vocab: Sequence[str] | None = None) -> list[Sample]:
    """Label-pure groups (half eval, half deploy) of random-word prompts: the text carries no
    label information, so any signal must be planted."""
    rng = np.random.default_rng(seed)
    words = list(vocab or ("apple river stone cloud paper glass tiger music orange window "
                           "silver garden rocket pencil forest candle bridge planet").split())
    out = []
    for g in range(n_groups):
        label = "eval" if g % 2 == 0 else "deploy"
        for k in range(per_group):
            text = " ".join(rng.choice(words, size=int(rng.integers(4, 16))))
            human = float(np.clip((0.7 if label == "eval" else 0.3) + rng.normal(0, 0.2), 0, 1))
            out.append(Sample(id=f"g{g:02d}:{k}", messages=(Message("user", text),), label=label,
                              metadata=SampleMeta(category=f"g{g:02d}",
                                                  human_eval_probability=human,
                                                  human_eval_source="simulated annotator (synthetic data)")))
    return out
