"""vLLM's offline engine as a step engine for :class:`harness.backends.stream.EngineDriver`:
requests go in as ``LLM.enqueue`` puts them (rendered by the LLM, only the final output asked
for) but under request ids of our own, and come out of ``LLMEngine.step`` as they finish, so
requests from many callers share vLLM's continuous batch. A finished output carries the id it was
added under (vLLM keeps its own, suffixed id inside), so outputs are routed by our id as given,
and a failed caller's requests are aborted by it."""

from __future__ import annotations

import itertools
from typing import Any, Sequence


class VLLMSteps:
    """The step engine over one ``vllm.LLM``."""

    paced = False  # real steps take real time: callers catch up between them

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self._ids = itertools.count(1)

    def add(self, prompts: Sequence[Any], params: Sequence[Any]) -> list[str]:
        from vllm.inputs import TokensPrompt  # optional, heavy
        from vllm.sampling_params import RequestOutputKind  # optional, heavy

        engine = self.llm.llm_engine
        # LLM.enqueue's own rendering (a private method in vLLM 0.32); without it vLLM renders a raw prompt
        render = getattr(self.llm, "_preprocess_cmpl_one", lambda prompt: prompt)
        ids: list[str] = []
        try:
            for p, sp in zip(prompts, params):
                rid = f"evalaware-{next(self._ids)}"
                sp.output_kind = RequestOutputKind.FINAL_ONLY  # as LLM.enqueue sets it
                engine.add_request(rid, render(TokensPrompt(prompt_token_ids=list(p))), sp)
                ids.append(rid)
        except BaseException:
            if ids:  # none of a refused call's requests stays queued
                engine.abort_request(ids)
            raise
        return ids

    def step(self) -> list[tuple[str, Any]]:
        return [(str(o.request_id), o) for o in self.llm.llm_engine.step() if o.finished]

    def has_unfinished(self) -> bool:
        return bool(self.llm.llm_engine.has_unfinished_requests())

    def abort(self, ids: Sequence[str]) -> None:
        if ids:
            self.llm.llm_engine.abort_request(list(ids))
