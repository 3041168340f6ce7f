"""An organism's recipe: what decides its weights (light: the command line reads its defaults without
importing torch; :mod:`harness.organisms.train` builds from it)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.core.errors import EvalAwareError
from harness.organisms.cues import get_cue
from harness.organisms.kinds import check_kind


@dataclass(frozen=True)
class Recipe:
    """Everything that decides the organism's weights (with the base weights); the card records
    it and a re-run with a different recipe on the same directory is refused."""

    base: str
    cue: str
    strength: float = 1.0
    steps: int = 120
    batch_size: int = 8
    lr: float = 2e-3
    train: str = "lora"
    layers: int = 8
    lora_rank: int = 16
    kl_weight: float = 1.0
    kl_first: float = 1.0  # weight of the first answer position in an example's KL (others: 1)
    max_len: int = 192
    seed: int = 0
    verbalizations: int = 0  # use the first N planted sentences only (0: all of them)
    pairs: int = 0  # train on N pairs drawn from the generated ones (0: all of them)
    kl_prompts: int = 0  # N extra no-cue prompts of other forms, KL term only (data.kl_examples)
    kl_pool: int = 1  # which pool they are drawn from (data.kl_pool: 2 is the wider one)
    forms: int = 0  # N more training pairs on prompts of the wider pool's forms (data.form_pairs)
    kind: str = "aware"  # what is planted (harness/organisms/kinds.py): aware | sham | sham-greedy | ...
    sham_samples: int = 4  # the null sham's temperature-1 samples per cue prompt (kind sham only; else 0)

    def check(self) -> None:
        get_cue(self.cue)
        check_kind(self.kind)
        if not 0.0 <= self.strength <= 1.0:
            raise EvalAwareError(f"--strength {self.strength}: must be between 0 and 1")
        if self.train not in ("lora", "full"):
            raise EvalAwareError(f"--train {self.train!r}: use lora or full")
        if self.pairs < 0:
            raise EvalAwareError("--pairs must be at least 0 (0: all)")
        if self.kl_prompts < 0:
            raise EvalAwareError("--kl-prompts must be at least 0")
        if self.forms < 0:
            raise EvalAwareError("--forms must be at least 0")
        if self.kl_pool not in (1, 2):
            raise EvalAwareError(f"--kl-pool {self.kl_pool}: use 1 or 2")
        if self.verbalizations < 0:
            raise EvalAwareError("--verbalizations must be at least 0 (0: all)")
        if self.kl_first <= 0:
            raise EvalAwareError("--kl-first must be positive")
        if self.kind == "sham" and self.sham_samples < 4:
            raise EvalAwareError(f"--sham-samples {self.sham_samples}: the null sham needs at least 4 samples per "
                                 "prompt (a fresh one per visit)")
        for k in ("steps", "batch_size", "layers", "lora_rank", "max_len"):
            if getattr(self, k) < 1:
                raise EvalAwareError(f"--{k.replace('_', '-')} must be at least 1")
