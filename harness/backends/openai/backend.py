"""OpenAI-compatible HTTP backend: any server that speaks `/v1/completions` (e.g. `vllm serve`),
and `/v1/chat/completions` for hosted chat-only APIs (judges).

Prompts travel as token ids (`prompt: [ids]`, which vLLM accepts), so the server sees exactly the
tokens every other backend sees. What the server gives, and what this client does with it:

- `generate`: `/v1/completions`; with vLLM extensions on, `return_token_ids` gives the generated
  ids, decoded here with the local tokenizer so reasoning is split as in the other backends.
  Without them the text is used and `token_ids` are re-encoded from it (not exact).
- `next_token_logprobs`: a server returns only the **top-K** next tokens (`logprobs=K`; vLLM
  caps K with `--max-logprobs`, OpenAI at 20; `K=-1` is the full vocabulary when the server
  allows it). The returned array is -inf outside the top-K; `top_logprobs` (also in `identity`)
  says which K was used, and `full_vocab_logprobs` whether the distribution is complete. Ids are
  read from vLLM's `return_tokens_as_token_ids` ("token_id:123"). With explicit `token_ids`
  and vLLM extensions, `logprob_token_ids` returns exact values for those ids (128 per request).
- `next_token_logmass` / `continuation_scores` (the word-boundary term of tokenizer-aware
  scoring): the base class's sum over `next_token_logprobs`, i.e. over the server's top-K: a
  **lower bound** of the mass unless `top_logprobs=-1` (capability `exact_logmass`); the logprob
  methods record ``aware_bound`` and the report says so. Exact reductions over HTTP would need a
  server-side plugin (the offline engine's :mod:`harness.backends.vllm.reduce` keeps its results in
  the worker, which a client cannot read back).
- `loglikelihood`: `echo=true, max_tokens=0, logprobs=0` on prompt+continuation (vLLM 0.32 turns
  this into `prompt_logprobs`); the continuation's token logprobs are summed.
- `chat`: `/v1/chat/completions` with messages, for chat-only servers (`chat_mode=True` needs no
  tokenizer and disables the token-level methods).

Every call is one HTTP request per prompt, at most `max_concurrency` per server in flight over
all threads (the streaming run loop's tasks call at once: capability `streaming`), results in
input order, with retries and backoff on 429/5xx (:mod:`harness.backends.openai.http_client`). Request fields and
response parsing: :mod:`harness.backends.openai.wire`; what the server serves (model name,
tokenizer, weights): :mod:`harness.backends.openai.model`.

Scale-out: `base_url` may list several servers serving the same weights (e.g. `vllm serve`
replicas). Requests are spread over them (:mod:`harness.backends.openai.servers`); a request that fails
on one is retried at once on another, and the failing server rests for a while. The servers are
not part of the identity, so the call cache is shared and results equal a single server's.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from harness.backends.specs import OPENAI
from harness.core.errors import BackendError
from harness.core.reasoning import split_reasoning
from harness.backends.base import (Backend, Capabilities, Generation, GenerationRequest, NextTokenView,
                   SamplingParams, TokenIds, top_k_rows)
from harness.backends.openai.http_client import RetryingClient
from harness.backends.urls import normalize_base_url  # noqa: F401  (re-exported)
from harness.backends.openai.model import resolve_served_model
from harness.backends.openai.wire import TokenNames, chat_fields, chunks_of, completion_fields, first_choice

__all__ = ["OpenAIBackend", "normalize_base_url"]


class OpenAIBackend(Backend):
    """Client for an OpenAI-compatible server. `model`: the served model's name (None: the only
    one `/v1/models` lists; an asset name such as "smollm2" matches a server started on its path).
    `tokenizer` and `weights` (paths or asset names; default `model` when local): the decoder of
    ids and token strings, and the weights the identity hashes. `vllm_extensions` (default: not
    `chat_mode`): vLLM-only request fields (structured output needs them). `base_url`: one or
    several servers of the same model; `max_concurrency` is per server."""

    kind = "openai"
    capabilities = OPENAI.capabilities  # narrowed per instance; its spec: harness.backends.specs

    def __init__(self, base_url: str | Sequence[str], model: str | None = None, api_key: str | None = None,
                 tokenizer: str | None = None, weights: str | None = None,
                 max_concurrency: int = 256, timeout: float = 60.0, max_retries: int = 5,
                 backoff_base: float = 0.5, backoff_cap: float = 30.0, top_logprobs: int = 20,
                 chat_mode: bool = False, vllm_extensions: bool | None = None,
                 headers: dict[str, str] | None = None) -> None:
        if top_logprobs == 0 or top_logprobs < -1:
            raise BackendError("top_logprobs must be a positive K or -1 (full vocabulary)")
        self.http = RetryingClient([base_url] if isinstance(base_url, str) else list(base_url),
                                   api_key if api_key is not None else os.environ.get("OPENAI_API_KEY"),
                                   headers, max_concurrency, timeout, max_retries, backoff_base,
                                   backoff_cap)
        self.pool, self.stats = self.http.pool, self.http.stats
        self.base_urls = self.http.shown_urls  # redacted: settings, manifests, messages
        self.base_url, self.device = self.base_urls[0], ", ".join(self.base_urls)
        self.max_concurrency = max_concurrency
        self.top_logprobs = int(top_logprobs)
        self.chat_mode = chat_mode
        self.vllm_extensions = (not chat_mode) if vllm_extensions is None else vllm_extensions
        # Token-set masses come from the server's top-K (-1: the whole vocabulary): a lower
        # bound unless K = -1 (issue 23; the methods mark such scores as bounds).
        self.capabilities = Capabilities(structured_output=self.vllm_extensions,
                                         exact_logmass=self.top_logprobs == -1, streaming=True,
                                         capacity=max_concurrency * len(self.base_urls))
        try:
            served = resolve_served_model(self.http, model, tokenizer, weights, chat_mode)
        except BaseException:
            self.http.close()
            raise
        self.model, self.tokenizer, self.model_dir = served.name, served.tokenizer, served.model_dir
        self.model_info = served.model_info
        self._identity: dict[str, Any] = {"backend": "openai", "model": self.model,
                                          "top_logprobs": self.top_logprobs}
        if "weights_sha256" in served.model_info:
            self._identity["weights_sha256"] = served.model_info["weights_sha256"]
        self._vocab = served.vocab_size
        self._eos = served.eos_ids()
        self._names = TokenNames(self.tokenizer)
        self.settings = {"base_urls": self.base_urls, "max_concurrency": self.max_concurrency}

    @property
    def identity(self) -> dict[str, Any]:
        return self._identity

    @property
    def vocab_size(self) -> int:
        if self._vocab is None:
            raise BackendError("vocabulary size unknown: pass tokenizer= to OpenAIBackend")
        return self._vocab

    @property
    def full_vocab_logprobs(self) -> bool:
        """Whether :meth:`next_token_logprobs` returns the whole distribution (K = -1)."""
        return self.top_logprobs == -1

    def _completion(self, payload: dict[str, Any]) -> dict[str, Any]:
        data = self.http.request("POST", "/completions", {"model": self.model, **payload})
        return first_choice(data, f"{self.base_url}/completions")

    def _need_tokens(self, what: str) -> None:
        if self.chat_mode or self.tokenizer is None:
            raise BackendError(f"{what} needs the completions endpoint and a tokenizer; this "
                               f"openai backend is in chat mode (use chat())")

    def _to_generation(self, token_ids: Sequence[int] | None, text: str, finish_reason: str | None,
                       stop_reason: Any = None, reasoning: str | None = None) -> Generation:
        finish = "length" if finish_reason == "length" else "stop"
        if token_ids is not None and self.tokenizer is not None:
            toks = [int(t) for t in token_ids]
            if finish == "stop" and toks and (toks[-1] in self._eos or toks[-1] == stop_reason):
                toks = toks[:-1]
            return self._decode_generation(toks, finish)
        if reasoning is None:
            reasoning, answer = split_reasoning(text)
        else:
            answer = text.strip()
        ids = tuple(self.tokenizer.encode(text, add_special_tokens=False)) if self.tokenizer else ()
        return Generation(text=answer, reasoning=reasoning, raw_text=text, token_ids=ids,
                          finish_reason=finish)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        self._need_tokens("generate")

        def one(r: GenerationRequest) -> Generation:
            c = self._completion({"prompt": list(r.prompt_ids),
                                  **completion_fields(r.params, self.vllm_extensions, self.base_url)})
            return self._to_generation(c.get("token_ids"), c.get("text") or "",
                                       c.get("finish_reason"), c.get("stop_reason"))

        return self.http.map(one, list(requests))

    def _step_logprobs(self, prompt: TokenIds, extra: dict[str, Any]) -> dict[int, float]:
        """{token id: logprob} at the first generated position after `prompt`."""
        payload = {"prompt": list(prompt), "max_tokens": 1, "temperature": 0.0, **extra}
        if self.vllm_extensions:
            payload["return_tokens_as_token_ids"] = True
        return self._names.step_logprobs(self._completion(payload))

    def next_token_logprobs(self, prompts: Sequence[TokenIds],
                            token_ids: Sequence[int] | None = None) -> np.ndarray:
        """Top-K log-probabilities (K = `top_logprobs`), -inf elsewhere; with `token_ids` and
        vLLM extensions, exact values for those ids via `logprob_token_ids`."""
        self._need_tokens("next_token_logprobs")
        if token_ids is not None and self.vllm_extensions:
            ids = [int(t) for t in token_ids]

            def exact(p: TokenIds) -> list[float]:
                got: dict[int, float] = {}
                for ch in chunks_of(ids):
                    got.update(self._step_logprobs(p, {"logprobs": len(ch), "logprob_token_ids": ch}))
                missing = [t for t in ids if t not in got]
                if missing:
                    raise BackendError(f"the server ignored logprob_token_ids (no value for ids "
                                       f"{missing[:5]}); use vllm_extensions=False")
                return [got[t] for t in ids]

            return np.asarray(self.http.map(exact, list(prompts)),
                              dtype=np.float32).reshape(len(prompts), len(ids))
        vocab = self.vocab_size
        out = np.full((len(prompts), vocab), -np.inf, dtype=np.float32)
        rows = self.http.map(lambda p: self._step_logprobs(p, {"logprobs": self.top_logprobs}),
                             list(prompts))
        for i, row in enumerate(rows):
            for t, lp in row.items():
                if 0 <= t < vocab:
                    out[i, t] = lp
        if token_ids is not None:
            out = out[:, np.asarray(list(token_ids), dtype=np.int64)]
        return out

    def next_token_view(self, prompts: Sequence[TokenIds], token_ids: Sequence[int],
                        top_k: int) -> NextTokenView:
        """With vLLM extensions: exact values of `token_ids` (`logprob_token_ids`) plus one
        `logprobs=top_k` request per prompt; otherwise both read from the server's top-K."""
        if not self.vllm_extensions:
            return super().next_token_view(prompts, token_ids, top_k)
        sel = self.next_token_logprobs(prompts, token_ids)
        rows = self.http.map(lambda p: self._step_logprobs(p, {"logprobs": top_k}), list(prompts)) \
            if top_k else [{} for _ in prompts]
        width = max((min(len(r), top_k) for r in rows), default=0)  # what the server gave
        return NextTokenView(sel, *top_k_rows(rows, top_k, width))

    def loglikelihood(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
        """`echo=true, max_tokens=0, logprobs=0` on prompt+continuation; the continuation's
        echoed token logprobs are summed."""
        self._need_tokens("loglikelihood")
        for p, c in pairs:
            if len(p) == 0 or len(c) == 0:
                raise BackendError("loglikelihood needs a non-empty prompt and continuation")

        def one(pair: tuple[TokenIds, TokenIds]) -> float:
            p, c = list(pair[0]), list(pair[1])
            payload: dict[str, Any] = {"prompt": p + c, "max_tokens": 0, "echo": True,
                                       "logprobs": 0, "temperature": 0.0}
            if self.vllm_extensions:
                payload["return_tokens_as_token_ids"] = True
            return self._names.echoed_sum(self._completion(payload), p, c, self.vllm_extensions)

        return self.http.map(one, list(pairs))

    def chat(self, messages_list: Sequence[Sequence[dict[str, Any]]],
             params: SamplingParams | None = None, **extra: Any) -> list[Generation]:
        """`/v1/chat/completions` for each conversation (OpenAI message dicts); the server renders
        the chat template. `extra` fields go into every request body (e.g. `response_format`).
        Reasoning comes from the message's `reasoning`/`reasoning_content`, or from the decoded ids
        when the server returns them, or is split from the content."""
        body = {**chat_fields(params or SamplingParams(), self.vllm_extensions), **extra}

        def one(messages: Sequence[dict[str, Any]]) -> Generation:
            data = self.http.request("POST", "/chat/completions",
                                     {"model": self.model, "messages": list(messages), **body})
            c = first_choice(data, f"{self.base_url}/chat/completions")
            msg = c.get("message") or {}
            content = msg.get("content") or ""
            reasoning = msg.get("reasoning") or msg.get("reasoning_content")
            ids = c.get("token_ids") if reasoning is None else None
            return self._to_generation(ids, content, c.get("finish_reason"), c.get("stop_reason"),
                                       reasoning=reasoning)

        return self.http.map(one, list(messages_list))

    def close(self) -> None:
        self.http.close()
