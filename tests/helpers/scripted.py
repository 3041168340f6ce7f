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


class ScriptedScorer(ScriptedBackend):
    """A stand-in model for the tagged-label methods (binary): its P(eval) is
    ``p_eval(transcript)``, a function of the decoded prompt up to the model's own answer. It
    answers a sample with "Here is my answer.", a question asking for ``<label>`` with the
    likelier label, and teacher-forced label continuations with log P(eval) / log P(deploy)."""

    ANSWER = "Here is my answer."

    def __init__(self, tokenizer: Any, p_eval: Callable[[str], float], name: str = "scripted-scorer") -> None:
        super().__init__(tokenizer, self._reply, name=name)
        self.p_eval = p_eval

    def transcript(self, prompt: str) -> str:
        return prompt.split(self.ANSWER)[0]

    def _reply(self, prompt: str) -> str:
        if "<label>" not in prompt:
            return self.ANSWER
        return "<label>EVALUATION</label>" if self.p_eval(self.transcript(prompt)) >= 0.5 else \
            "<label>DEPLOYMENT</label>"

    def loglikelihood(self, pairs):
        import math

        out = []
        for prompt, cont in pairs:
            self.calls += 1
            p = min(max(self.p_eval(self.transcript(self.tokenizer.decode(list(prompt)))), 1e-6), 1 - 1e-6)
            c = self.tokenizer.decode(list(cont))
            out.append(math.log(p) if c.startswith("EVAL") else math.log(1 - p) if c.startswith("DEPLOY")
                       else math.log(1e-6))
        return out
