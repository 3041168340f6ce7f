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
- `loglikelihood`: `echo=true, max_tokens=0, logprobs=0` on prompt+continuation (vLLM 0.32 turns
  this into `prompt_logprobs`); the continuation's token logprobs are summed.
- `chat`: `/v1/chat/completions` with messages, for chat-only servers (`chat_mode=True` needs no
  tokenizer and disables the token-level methods).

Every call is one HTTP request per prompt, run on a thread pool of `max_concurrency` per server,
results in input order. Connection errors, timeouts, 408/409/425/429 and 5xx are retried with
exponential backoff and jitter (honouring `Retry-After`); other 4xx raise :class:`BackendError` at
once with the server's message.

Scale-out: `base_url` may list several servers serving the same weights (e.g. `vllm serve`
replicas). Requests are spread over them (:mod:`harness.backends.servers`); a request that fails
on one is retried at once on another, and the failing server rests for a while. The servers are
not part of the identity, so the call cache is shared and results equal a single server's.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar
from urllib.parse import urlsplit

import numpy as np

from ..assets import resolve_model
from ..errors import BackendError, EvalAwareError
from ..fingerprint import local_model_dir, model_identity
from ..reasoning import split_reasoning
from .base import Backend, Generation, GenerationRequest, NextTokenView, SamplingParams, TokenIds
from .servers import ServerPool

RETRY_STATUSES = frozenset({408, 409, 425, 429})
MAX_LOGPROB_TOKEN_IDS = 128  # vLLM's per-request cap on `logprob_token_ids`
_TOKEN_ID_PREFIX = "token_id:"
T = TypeVar("T")
R = TypeVar("R")


def normalize_base_url(base_url: str) -> str:
    """`http://host:port` -> `http://host:port/v1`; a URL with a path is kept as given."""
    url = base_url.rstrip("/")
    if urlsplit(url).path in ("", "/"):
        url += "/v1"
    return url


def _error_message(body: bytes) -> str:
    """The server's error message from an OpenAI-style (or vLLM-style) error body."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body[:500].decode("utf-8", "replace").strip() or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if data.get("message"):
            return str(data["message"])
        if data.get("detail"):
            return str(data["detail"])
    return json.dumps(data)[:500]


def _asset_path(name: str | None) -> str | None:
    """The prepared directory of a registered model asset name, else None."""
    if name is None:
        return None
    try:
        path = resolve_model(name)
    except EvalAwareError:
        return None
    return path if path != name else None


class OpenAIBackend(Backend):
    """Client for an OpenAI-compatible server.

    `model` is the served model name (None: the only model listed by `/v1/models`; an asset name
    such as "smollm2" also matches a server started on the asset's path). `tokenizer` (path or
    asset name; default: `model` when it is local) decodes generated ids and maps token strings.
    `weights` (path or asset name) names the local weights the server serves, for the identity
    hash (default: `model` when it is a local path or an asset).
    `vllm_extensions` (default: not `chat_mode`) sends vLLM-only request fields.
    `base_url` may be a list of servers serving the same model; `max_concurrency` is per server.
    """

    kind = "openai"

    def __init__(self, base_url: str | Sequence[str], model: str | None = None, api_key: str | None = None,
                 tokenizer: str | None = None, weights: str | None = None,
                 max_concurrency: int = 8, timeout: float = 60.0, max_retries: int = 5,
                 backoff_base: float = 0.5, backoff_cap: float = 30.0, top_logprobs: int = 20,
                 chat_mode: bool = False, vllm_extensions: bool | None = None,
                 headers: dict[str, str] | None = None) -> None:
        import httpx

        if max_concurrency < 1:
            raise BackendError("max_concurrency must be at least 1")
        if top_logprobs == 0 or top_logprobs < -1:
            raise BackendError("top_logprobs must be a positive K or -1 (full vocabulary)")
        self._httpx = httpx
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        try:
            self.pool = ServerPool([normalize_base_url(u) for u in urls], backoff_base, backoff_cap)
        except ValueError as e:
            raise BackendError(f"--base-url: {e}") from None
        self.base_urls = [s.url for s in self.pool.servers]
        self.base_url = self.base_urls[0]
        self.device = ", ".join(self.base_urls)
        self.max_concurrency = max_concurrency
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff_base = float(backoff_base)
        self.backoff_cap = float(backoff_cap)
        self.top_logprobs = int(top_logprobs)
        self.chat_mode = chat_mode
        self.vllm_extensions = (not chat_mode) if vllm_extensions is None else vllm_extensions
        api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if api_key:
            hdrs["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.Client(
            headers=hdrs, timeout=httpx.Timeout(self.timeout),
            limits=httpx.Limits(max_connections=max_concurrency * len(self.pool),
                                max_keepalive_connections=max_concurrency * len(self.pool)))
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "retries": 0, "failures": 0}
        self._decoded_to_id: dict[str, int] | None = None

        try:
            self._setup(model, tokenizer, weights)
        except BaseException:
            self._client.close()
            raise

    def _setup(self, model: str | None, tokenizer: str | None, weights: str | None) -> None:
        """Resolve the served model name, tokenizer, weights identity and vocabulary size."""
        asset_path = _asset_path(model)
        if model is None:
            model = self._discover_model()
        elif asset_path is not None:
            model = self._served_name(model, asset_path)
        self.model = model
        weights = weights or asset_path
        self.tokenizer = self._load_tokenizer(tokenizer or asset_path)
        weights_src = resolve_model(weights) if weights else self.model
        local = local_model_dir(weights_src) if (weights or os.path.isdir(weights_src)) else None
        if weights and local is None:
            raise BackendError(f"weights {weights!r} are not a local model directory")
        self.model_dir = str(local) if local else None
        self._identity: dict[str, Any] = {"backend": "openai", "model": self.model,
                                          "top_logprobs": self.top_logprobs}
        self.model_info: dict[str, str] = {"model": self.model}
        if local is not None:
            self.model_info = model_identity(str(local))
            self._identity["weights_sha256"] = self.model_info["weights_sha256"]
        self._vocab = self._read_vocab_size()
        self.settings = {"base_urls": self.base_urls, "max_concurrency": self.max_concurrency}
        if len(self.pool) > 1:
            self._check_servers()

    def _check_servers(self) -> None:
        """Every server must serve the model (same name), else their answers may differ."""
        for url in self.base_urls:
            data = self._request("GET", "/models", only=url)
            ids = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
            if self.model not in ids:
                raise BackendError(f"{url} does not serve {self.model!r} (it serves "
                                   f"{', '.join(map(str, ids)) or 'nothing'}); every --base-url "
                                   f"must serve the same model")

    # --- identity ---------------------------------------------------------------------------
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

    def _read_vocab_size(self) -> int | None:
        if self.model_dir:
            try:
                cfg = json.loads(open(os.path.join(self.model_dir, "config.json")).read())
                cfg = cfg.get("text_config", cfg)
                if isinstance(cfg.get("vocab_size"), int):
                    return int(cfg["vocab_size"])
            except (OSError, ValueError):
                pass
        return len(self.tokenizer) if self.tokenizer is not None else None

    def _load_tokenizer(self, tokenizer: str | None) -> Any:
        src = resolve_model(tokenizer) if tokenizer else None
        if src is None:  # the served name as a local directory or a locally cached hub id
            local = local_model_dir(self.model)
            src = str(local) if local is not None else None
        if src is None:
            if self.chat_mode:
                return None
            raise BackendError(f"the openai backend needs a local tokenizer for {self.model!r} to "
                               f"render prompts and decode ids: pass tokenizer=PATH_OR_ASSET")
        from transformers import AutoTokenizer

        try:
            return AutoTokenizer.from_pretrained(src)
        except OSError as e:
            raise BackendError(f"cannot load tokenizer {src!r}: {e}") from e

    def _served_name(self, name: str, path: str) -> str:
        """An asset name is served either under that name or (plain `vllm serve PATH`) its path."""
        try:
            ids = [m.get("id") for m in self._request("GET", "/models").get("data", [])]
        except BackendError:
            return name
        return path if name not in ids and path in ids else name

    def _discover_model(self) -> str:
        data = self._request("GET", "/models")
        ids = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
        if len(ids) != 1:
            raise BackendError(f"{self.base_url} serves {len(ids)} models ({', '.join(map(str, ids))}); "
                               f"pass model=")
        return str(ids[0])

    # --- HTTP with retries --------------------------------------------------------------------
    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = min(self.backoff_cap, self.backoff_base * (2 ** attempt))
        delay = delay / 2 + random.uniform(0, delay / 2)  # "equal jitter"
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_cap))
        return delay

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None,
                 only: str | None = None) -> dict[str, Any]:
        """One API call with retries, on the pool's servers (`only`: that server); returns the
        decoded JSON body. After a failure the retry goes at once to another server that is up;
        when none is left untried, it backs off first."""
        tried: set[str] = set()
        last = ""
        sleeps = 0
        for attempt in range(self.max_retries + 1):
            if attempt:
                self._count("retries")
            self._count("requests")
            server = self.pool.acquire(avoid=tried, only=only)
            url = server.url + path
            try:
                body, last, retry_after = self._attempt(method, url, payload)
            except BaseException:  # a non-retryable answer is not the server's failure
                self.pool.release(server, ok=True)
                raise
            self.pool.release(server, ok=body is not None)
            if body is not None:
                return body
            tried.add(server.url)
            if attempt < self.max_retries:
                if only is None and self.pool.has_other_up(tried):
                    continue
                tried.clear()
                time.sleep(self._backoff(sleeps, retry_after))
                sleeps += 1
        self._count("failures")
        where = self.base_url if len(self.pool) == 1 or only else f"{len(self.pool)} servers"
        raise BackendError(f"{method} {path} on {where} failed after {self.max_retries + 1} "
                           f"attempt(s): {last}")

    def _attempt(self, method: str, url: str, payload: dict[str, Any] | None
                 ) -> tuple[dict[str, Any] | None, str, float | None]:
        """One HTTP request: (JSON body, "", None) on success, else (None, why, Retry-After);
        a non-retryable 4xx raises :class:`BackendError`."""
        httpx = self._httpx
        try:
            r = self._client.request(method, url, json=payload)
        except httpx.TimeoutException as e:
            return None, f"{url}: timed out after {self.timeout:g} s ({type(e).__name__})", None
        except httpx.TransportError as e:
            return None, f"{url}: {type(e).__name__}: {e}", None
        if r.status_code < 400:
            try:
                return r.json(), "", None
            except ValueError:
                return None, f"{url}: HTTP {r.status_code} with a body that is not JSON", None
        msg = _error_message(r.content)
        if r.status_code not in RETRY_STATUSES and r.status_code < 500:
            self._count("failures")
            raise BackendError(f"{method} {url}: HTTP {r.status_code}: {msg}")
        try:
            retry_after: float | None = float(r.headers.get("retry-after", ""))
        except ValueError:
            retry_after = None
        return None, f"{url}: HTTP {r.status_code}: {msg}", retry_after

    def _map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """`fn` over `items` on at most `max_concurrency` threads per server, in input order."""
        workers = min(self.max_concurrency * len(self.pool), len(items))
        if workers <= 1:
            return [fn(x) for x in items]
        pool = ThreadPoolExecutor(max_workers=workers,
                                  thread_name_prefix="openai-backend")
        try:
            return list(pool.map(fn, items))
        finally:  # on the first error, drop queued requests instead of running them all
            pool.shutdown(wait=True, cancel_futures=True)

    def _completion(self, payload: dict[str, Any]) -> dict[str, Any]:
        data = self._request("POST", "/completions", {"model": self.model, **payload})
        try:
            return data["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"{self.base_url}/completions returned no choices: "
                               f"{json.dumps(data)[:300]}") from None

    def _need_tokens(self, what: str) -> None:
        if self.chat_mode or self.tokenizer is None:
            raise BackendError(f"{what} needs the completions endpoint and a tokenizer; this "
                               f"openai backend is in chat mode (use chat())")

    # --- token strings -> ids -----------------------------------------------------------------
    def _token_id(self, token: str) -> int | None:
        """Id of a token as a server names it: "token_id:123" (vLLM), else its unique decoding."""
        if token.startswith(_TOKEN_ID_PREFIX):
            try:
                return int(token[len(_TOKEN_ID_PREFIX):])
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

    # --- contract -----------------------------------------------------------------------------
    def _eos_ids(self) -> set[int]:
        if not hasattr(self, "_eos"):
            ids: set[int] = set()
            if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
                ids.add(int(self.tokenizer.eos_token_id))
            if self.model_dir:
                try:
                    gen = json.loads(open(os.path.join(self.model_dir, "generation_config.json")).read())
                    e = gen.get("eos_token_id")
                    ids.update([e] if isinstance(e, int) else list(e or []))
                except (OSError, ValueError):
                    pass
            self._eos = ids
        return self._eos

    def _sampling(self, p: SamplingParams) -> dict[str, Any]:
        d: dict[str, Any] = {"max_tokens": p.max_tokens, "temperature": p.temperature,
                             "top_p": p.top_p, "seed": p.seed}
        if self.vllm_extensions:  # neutralise server defaults taken from generation_config.json
            d.update(top_k=0, min_p=0.0, repetition_penalty=1.0, skip_special_tokens=False,
                     return_token_ids=True)
        if p.structured is not None:
            if not self.vllm_extensions:
                raise BackendError(f"{self.base_url}: constrained answers (--constrain) need a vLLM "
                                   f"server (its `structured_outputs` request field); this server "
                                   f"is not one")
            d["structured_outputs"] = {"grammar": p.structured.grammar}
        return d

    def _to_generation(self, token_ids: Sequence[int] | None, text: str, finish_reason: str | None,
                       stop_reason: Any = None, reasoning: str | None = None) -> Generation:
        finish = "length" if finish_reason == "length" else "stop"
        if token_ids is not None and self.tokenizer is not None:
            toks = [int(t) for t in token_ids]
            if finish == "stop" and toks and (toks[-1] in self._eos_ids() or toks[-1] == stop_reason):
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
            c = self._completion({"prompt": list(r.prompt_ids), **self._sampling(r.params)})
            return self._to_generation(c.get("token_ids"), c.get("text") or "",
                                       c.get("finish_reason"), c.get("stop_reason"))

        return self._map(one, list(requests))

    def _step_logprobs(self, prompt: TokenIds, extra: dict[str, Any]) -> dict[int, float]:
        """{token id: logprob} at the first generated position after `prompt`."""
        payload = {"prompt": list(prompt), "max_tokens": 1, "temperature": 0.0, **extra}
        if self.vllm_extensions:
            payload["return_tokens_as_token_ids"] = True
        c = self._completion(payload)
        try:
            top = c["logprobs"]["top_logprobs"][0] or {}
        except (KeyError, IndexError, TypeError):
            raise BackendError("the server returned no logprobs") from None
        out: dict[int, float] = {}
        for tok, lp in top.items():
            i = self._token_id(tok)
            if i is not None and lp is not None:
                out[i] = float(lp)
        return out

    def next_token_logprobs(self, prompts: Sequence[TokenIds],
                            token_ids: Sequence[int] | None = None) -> np.ndarray:
        """Top-K log-probabilities (K = `top_logprobs`), -inf elsewhere; with `token_ids` and
        vLLM extensions, exact values for those ids via `logprob_token_ids`."""
        self._need_tokens("next_token_logprobs")
        if token_ids is not None and self.vllm_extensions:
            ids = [int(t) for t in token_ids]
            chunks = [ids[i:i + MAX_LOGPROB_TOKEN_IDS] for i in range(0, len(ids), MAX_LOGPROB_TOKEN_IDS)]

            def exact(p: TokenIds) -> list[float]:
                got: dict[int, float] = {}
                for ch in chunks:
                    got.update(self._step_logprobs(p, {"logprobs": len(ch), "logprob_token_ids": ch}))
                missing = [t for t in ids if t not in got]
                if missing:
                    raise BackendError(f"the server ignored logprob_token_ids (no value for ids "
                                       f"{missing[:5]}); use vllm_extensions=False")
                return [got[t] for t in ids]

            return np.asarray(self._map(exact, list(prompts)), dtype=np.float32).reshape(len(prompts), len(ids))
        vocab = self.vocab_size
        out = np.full((len(prompts), vocab), -np.inf, dtype=np.float32)
        rows = self._map(lambda p: self._step_logprobs(p, {"logprobs": self.top_logprobs}), list(prompts))
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
        rows = self._map(lambda p: self._step_logprobs(p, {"logprobs": top_k}), list(prompts)) if top_k else \
            [{} for _ in prompts]
        best = [sorted(r.items(), key=lambda kv: -kv[1])[:top_k] for r in rows]
        k = max((len(b) for b in best), default=0)
        ids = np.zeros((len(prompts), k), dtype=np.int64)
        lps = np.full((len(prompts), k), -np.inf, dtype=np.float32)
        for i, b in enumerate(best):
            ids[i, :len(b)] = [t for t, _ in b]
            lps[i, :len(b)] = [v for _, v in b]
        return NextTokenView(sel, ids, lps)

    def loglikelihood(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
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
            ch = self._completion(payload)
            try:
                lps = ch["logprobs"]["token_logprobs"]
                toks = ch["logprobs"]["tokens"]
            except (KeyError, TypeError):
                raise BackendError("the server returned no echoed prompt logprobs") from None
            if len(lps) < len(p) + len(c):
                raise BackendError(f"the server echoed {len(lps)} token logprobs for a "
                                   f"{len(p) + len(c)}-token prompt")
            if self.vllm_extensions:
                got = [self._token_id(t) for t in toks[len(p):len(p) + len(c)]]
                if got != c:
                    raise BackendError(f"echoed tokens {got[:8]} differ from the continuation {c[:8]}")
            vals = lps[len(p):len(p) + len(c)]
            if any(v is None for v in vals):
                raise BackendError("the server returned no logprob for a continuation token")
            return float(sum(vals))

        return self._map(one, list(pairs))

    # --- chat -----------------------------------------------------------------------------------
    def chat(self, messages_list: Sequence[Sequence[dict[str, Any]]],
             params: SamplingParams | None = None, **extra: Any) -> list[Generation]:
        """`/v1/chat/completions` for each conversation (OpenAI message dicts); the server renders
        the chat template. `extra` fields go into every request body (e.g. `response_format`).
        Reasoning comes from the message's `reasoning`/`reasoning_content`, or from the decoded ids
        when the server returns them, or is split from the content."""
        p = params or SamplingParams()
        body: dict[str, Any] = {"temperature": p.temperature, "top_p": p.top_p, "seed": p.seed}
        if self.vllm_extensions:
            body.update(max_tokens=p.max_tokens, top_k=0, min_p=0.0, repetition_penalty=1.0,
                        skip_special_tokens=False, return_token_ids=True)
        else:
            body["max_completion_tokens"] = p.max_tokens
        body.update(extra)

        def one(messages: Sequence[dict[str, Any]]) -> Generation:
            data = self._request("POST", "/chat/completions",
                                 {"model": self.model, "messages": list(messages), **body})
            try:
                c = data["choices"][0]
                msg = c.get("message") or {}
            except (KeyError, IndexError, TypeError):
                raise BackendError(f"{self.base_url}/chat/completions returned no choices: "
                                   f"{json.dumps(data)[:300]}") from None
            content = msg.get("content") or ""
            reasoning = msg.get("reasoning") or msg.get("reasoning_content")
            ids = c.get("token_ids") if reasoning is None else None
            return self._to_generation(ids, content, c.get("finish_reason"), c.get("stop_reason"),
                                       reasoning=reasoning)

        return self._map(one, list(messages_list))

    def close(self) -> None:
        self._client.close()
