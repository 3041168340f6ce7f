"""A text-in, text-out stand-in model for tests that drive the real runner, methods and judge:
its answers are computed from the decoded prompt, so a test states behaviour, not canned output."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from harness.backends.base import Backend, Generation, GenerationRequest


class ScriptedBackend(Backend):
    """Generation only: ``reply(prompt_text)`` answers each request; counts calls. Logprob
    requests raise (no scripted method needs them)."""

    kind = "scripted"

    def __init__(self, tokenizer: Any, reply: Callable[[str], str], name: str = "scripted") -> None:
        self.tokenizer, self.reply, self.name, self.calls = tokenizer, reply, name, 0

    @property
    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "weights_sha256": "none"}

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        out = []
        for r in requests:
            self.calls += 1
            text = self.reply(self.tokenizer.decode(list(r.prompt_ids)))
            out.append(Generation(text, None, text, (1,), "stop"))
        return out

    def next_token_logprobs(self, prompts, token_ids=None):
        raise NotImplementedError("scripted backend: generation only")

    def loglikelihood(self, pairs):
        raise NotImplementedError("scripted backend: generation only")
