"""vLLM's offline engine as a step engine for :class:`harness.backends.stream.EngineDriver`:
requests go in with ``LLM.enqueue`` (vLLM renders and validates them as ``LLM.generate`` does)
and come out of ``LLMEngine.step`` as they finish, so requests from many callers share vLLM's
continuous batch."""

from __future__ import annotations

from typing import Any, Sequence


class VLLMSteps:
    """The step engine over one ``vllm.LLM``."""

    paced = False  # real steps take real time: callers catch up between them

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def add(self, prompts: Sequence[Any], params: Sequence[Any]) -> list[str]:
        from vllm.inputs import TokensPrompt  # optional, heavy

        inputs = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        ids = self.llm.enqueue(inputs, list(params), use_tqdm=False)
        # enqueue returns vLLM's internal ids (the LLM's counter + "-" + a random suffix); a
        # finished output carries the counter's id, digits only: route by that
        return [str(r).split("-", 1)[0] for r in ids]

    def step(self) -> list[tuple[str, Any]]:
        return [(str(o.request_id), o) for o in self.llm.llm_engine.step() if o.finished]

    def has_unfinished(self) -> bool:
        return bool(self.llm.llm_engine.has_unfinished_requests())
