"""Which model call served which sample, and in which role.

Methods send their generations through :meth:`CallLog.generate` with a tag per request
(sample id, role, k); the runner stores the logged calls with the batch's records in one
transaction (``model_calls`` in the run log), so later stages (activation capture, taxonomy)
look up the exact token ids a method used instead of re-deriving its prompts. Roles: see
:class:`harness.core.records.ModelCall`. Calls without a tag (tools, tests) are not logged.
"""

from __future__ import annotations

import threading
from typing import Sequence

from harness.backends.base import Backend, Generation, GenerationRequest
from harness.core.records import ModelCall


class CallLog:
    """The model calls of the batch in progress, per thread (each streaming worker takes its own)."""

    def __init__(self) -> None:
        self._local = threading.local()

    @property
    def calls(self) -> list[ModelCall]:
        if not hasattr(self._local, "calls"):
            self._local.calls = []
        return self._local.calls

    def generate(self, backend: Backend, requests: Sequence[GenerationRequest],
                 tags: Sequence[tuple[str, str, int]]) -> list[Generation]:
        """`backend.generate(requests)`, logging request i under ``tags[i]`` = (sample id, role, k)."""
        if len(tags) != len(requests):
            raise ValueError(f"{len(tags)} tags for {len(requests)} requests")
        gens = backend.generate(requests) if requests else []
        self.calls.extend(ModelCall(sid, role, k, tuple(r.prompt_ids), tuple(g.token_ids), g.text,
                                    g.reasoning) for (sid, role, k), r, g in zip(tags, requests, gens))
        return gens

    def take(self) -> list[ModelCall]:
        """The calls logged so far (and forget them)."""
        out, self._local.calls = self.calls, []
        return out
