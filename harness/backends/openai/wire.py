"""The OpenAI / vLLM wire format for :mod:`harness.backends.openai.backend`: request fields built from
our sampling settings, and the parts of a response we read (choices, step logprobs, echoed prompt
logprobs, token names)."""

from __future__ import annotations

import json
from typing import Any, Sequence

from harness.core.errors import BackendError
from harness.backends.base import SamplingParams

MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's per-request cap on `logprob_token_ids`
TOKEN_ID_PREFIX = "token_id:"
# vLLM fields that neutralise server defaults taken from generation_config.json and return ids
VLLM_NEUTRAL = dict(top_k=0, min_p=0.0, repetition_penalty=1.0, skip_special_tokens=False,
                    return_token_ids=True)


def completion_fields(p: SamplingParams, vllm_extensions: bool, where: str) -> dict[str, Any]:
    """`/v1/completions` sampling fields; a grammar goes into vLLM's `structured_outputs`."""
    d: dict[str, Any] = {"max_tokens": p.max_tokens, "temperature": p.temperature,
                         "top_p": p.top_p, "seed": p.seed}
    if vllm_extensions:
        d.update(VLLM_NEUTRAL)
    if p.structured is not None:
        if not vllm_extensions:
            raise BackendError(f"{where}: constrained answers (--constrain) need a vLLM server "
                               f"(its `structured_outputs` request field); this server is not one")
        d["structured_outputs"] = {"grammar": p.structured.grammar}
    return d


def chat_fields(p: SamplingParams, vllm_extensions: bool) -> dict[str, Any]:
    """`/v1/chat/completions` sampling fields (hosted APIs take `max_completion_tokens`)."""
    body: dict[str, Any] = {"temperature": p.temperature, "top_p": p.top_p, "seed": p.seed}
    if vllm_extensions:
        body.update(max_tokens=p.max_tokens, **VLLM_NEUTRAL)
    else:
        body["max_completion_tokens"] = p.max_tokens
    return body


def first_choice(data: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        return data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise BackendError(f"{where} returned no choices: {json.dumps(data)[:300]}") from None


def chunks_of(ids: Sequence[int]) -> list[list[int]]:
    """`ids` in chunks vLLM accepts as one request's `logprob_token_ids`."""
    ids = [int(t) for t in ids]
    return [ids[i:i + MAX_LOGPROB_TOKEN_IDS] for i in range(0, len(ids), MAX_LOGPROB_TOKEN_IDS)]


class TokenNames:
    """Token ids from the names a server gives tokens: "token_id:123" (vLLM's
    `return_tokens_as_token_ids`), else the token's decoding when it is unique in the vocabulary."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._decoded_to_id: dict[str, int] | None = None

    def __call__(self, token: str) -> int | None:
        if token.startswith(TOKEN_ID_PREFIX):
            try:
                return int(token[len(TOKEN_ID_PREFIX):])
            except ValueError:
                return None
        if self._decoded_to_id is None:
            seen: dict[str, int] = {}
            dup: set[str] = set()
            for i in range(len(self.tokenizer)):
                s = self.tokenizer.decode([i])
                (dup.add(s) if s in seen else seen.__setitem__(s, i))
            self._decoded_to_id = {s: i for s, i in seen.items() if s not in dup}
        return self._decoded_to_id.get(token)

    def step_logprobs(self, choice: dict[str, Any]) -> dict[int, float]:
        """{token id: logprob} at the first generated position of a completion choice."""
        try:
            top = choice["logprobs"]["top_logprobs"][0] or {}
        except (KeyError, IndexError, TypeError):
            raise BackendError("the server returned no logprobs") from None
        out: dict[int, float] = {}
        for tok, lp in top.items():
            i = self(tok)
            if i is not None and lp is not None:
                out[i] = float(lp)
        return out

    def echoed_sum(self, choice: dict[str, Any], prompt: list[int], cont: list[int],
                   check_ids: bool) -> float:
        """Sum of the echoed logprobs of `cont` after `prompt` (`echo=true, max_tokens=0`);
        `check_ids`: the echoed tokens must be the continuation's (vLLM names them by id)."""
        try:
            lps = choice["logprobs"]["token_logprobs"]
            toks = choice["logprobs"]["tokens"]
        except (KeyError, TypeError):
            raise BackendError("the server returned no echoed prompt logprobs") from None
        p, c = len(prompt), len(cont)
        if len(lps) < p + c:
            raise BackendError(f"the server echoed {len(lps)} token logprobs for a "
                               f"{p + c}-token prompt")
        if check_ids:
            got = [self(t) for t in toks[p:p + c]]
            if got != cont:
                raise BackendError(f"echoed tokens {got[:8]} differ from the continuation {cont[:8]}")
        vals = lps[p:p + c]
        if any(v is None for v in vals):
            raise BackendError("the server returned no logprob for a continuation token")
        return float(sum(vals))
