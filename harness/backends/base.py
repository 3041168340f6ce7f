"""The backend contract: one interface, three implementations (vllm, hf, openai).

Every backend consumes prompts as token ids rendered once by :mod:`harness.core.render`, so all
backends see identical tokens. Methods never talk to a backend directly but through
:class:`harness.backends.cache.CachedBackend`, which makes every call content-addressed and resumable.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any, ContextManager, Sequence

import numpy as np

from harness.backends.declare import CAPABILITY_TEXT
from harness.core.errors import BackendError
from harness.core.reasoning import split_reasoning

TokenIds = Sequence[int]


@dataclass(frozen=True)
class StructuredOutput:
    """A constraint on what a generation may be: one grammar in xgrammar's EBNF dialect (the
    library vLLM itself uses for structured outputs), the single form every backend receives —
    vllm as ``StructuredOutputsParams(grammar=...)``, hf through xgrammar's transformers logits
    processor, openai (a vLLM server) as the ``structured_outputs`` request field. Build one with
    :meth:`from_regex` or :meth:`from_json_schema` so the three backends enforce the same language.
    `source` says what the grammar was made from (kept for records and error messages)."""

    grammar: str
    source: str = ""

    @classmethod
    def from_regex(cls, regex: str) -> "StructuredOutput":
        import xgrammar as xgr  # ~5 s to import (torch, transformers): only for --constrain

        return cls(str(xgr.Grammar.from_regex(regex)), f"regex:{regex}")

    @classmethod
    def from_json_schema(cls, schema: dict[str, Any]) -> "StructuredOutput":
        """JSON on one line (no free whitespace: a small model cannot pad the answer with
        blanks until the token limit)."""
        import xgrammar as xgr  # heavy (see from_regex)

        text = json.dumps(schema, sort_keys=True)
        g = xgr.Grammar.from_json_schema(text, any_whitespace=False, separators=(",", ":"))
        return cls(str(g), f"json_schema:{text}")


@dataclass(frozen=True)
class SamplingParams:
    """Generation settings; part of every cache key. `structured` (None: free text) is left out
    of the key when unset, so unconstrained calls keep the keys they always had."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    structured: StructuredOutput | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.structured is None:
            d.pop("structured")
        return d


@dataclass(frozen=True)
class GenerationRequest:
    prompt_ids: tuple[int, ...]
    params: SamplingParams = field(default_factory=SamplingParams)


@dataclass(frozen=True)
class Generation:
    """One completion. `text` is the answer with any reasoning removed; `reasoning` is the
    reasoning text (``<think>`` block or gpt-oss analysis channel), or None."""

    text: str
    reasoning: str | None
    raw_text: str
    token_ids: tuple[int, ...]
    finish_reason: str  # "stop" | "length"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["token_ids"] = list(self.token_ids)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Generation":
        return cls(text=d["text"], reasoning=d["reasoning"], raw_text=d["raw_text"],
                   token_ids=tuple(d["token_ids"]), finish_reason=d["finish_reason"])


@dataclass(frozen=True)
class DrawnAnswer:
    """One answer of :meth:`Backend.trainable_answers`: the token ids as drawn, ending with the end
    id where one was drawn (`ended`)."""

    ids: tuple[int, ...]
    ended: bool


@dataclass(frozen=True)
class NextTokenView:
    """What first-token scoring reads at one position, without the full distribution:
    `selected` (n, len(token_ids)) log-probs of the asked ids, and the `top_k` most likely tokens
    (`top_ids`, `top_logprobs`, (n, top_k), most likely first)."""

    selected: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray

    @classmethod
    def from_full(cls, full: np.ndarray, token_ids: Sequence[int], top_k: int) -> "NextTokenView":
        full = np.asarray(full, dtype=np.float32)
        k = min(top_k, full.shape[1])
        if k == 0:
            top = np.zeros((len(full), 0), np.int64)
        else:
            top = np.argpartition(-full, k - 1, axis=1)[:, :k] if k < full.shape[1] else \
                np.tile(np.arange(full.shape[1]), (len(full), 1))
            top = np.take_along_axis(top, np.argsort(-np.take_along_axis(full, top, axis=1), axis=1,
                                                     kind="stable"), axis=1)
        return cls(full[:, np.asarray(list(token_ids), dtype=np.int64)], top.astype(np.int64),
                   np.take_along_axis(full, top, axis=1))

    def to_dicts(self) -> list[dict[str, list[Any]]]:
        return [{"selected": s.tolist(), "top_ids": t.tolist(), "top_logprobs": lp.tolist()}
                for s, t, lp in zip(self.selected, self.top_ids, self.top_logprobs)]

    @classmethod
    def from_dicts(cls, rows: Sequence[dict[str, list[Any]]], n_ids: int, top_k: int) -> "NextTokenView":
        if not rows:
            return cls(np.zeros((0, n_ids), np.float32), np.zeros((0, top_k), np.int64),
                       np.zeros((0, top_k), np.float32))
        return cls(np.asarray([r["selected"] for r in rows], dtype=np.float32).reshape(len(rows), n_ids),
                   np.asarray([r["top_ids"] for r in rows], dtype=np.int64).reshape(len(rows), -1),
                   np.asarray([r["top_logprobs"] for r in rows], dtype=np.float32).reshape(len(rows), -1))


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond the contract's calls; callers ask these instead of testing
    ``backend.kind``. A class declares what its instances can do (an instance may narrow it: a
    server's `exact_logmass`, a running engine's `capacity`), so commands can ask before loading.

    - `prefix_scoring`: next-token requests on prompt + prefix reuse the prompt's cached KV, so
      teacher forcing through :func:`loglikelihood_by_prefix` is cheaper than
      :meth:`Backend.loglikelihood`. No backend declares it since issue 23 (vLLM's
      `loglikelihood` forces the continuation by decoding, reading the prompt from the prefix
      cache); kept for engines whose `loglikelihood` recomputes the prompt.
    - `hidden_states`: :meth:`Backend.pooled_hidden_states` returns pooled residual streams
      (:meth:`Backend.hidden_layout` says which layer ids exist); hf, and vLLM's capture engine
      (:class:`~harness.backends.vllm.capture.VLLMCaptureBackend`, vLLM's ``extract_hidden_states``).
    - `steering`: :meth:`Backend.steering` adds vectors inside the model (local weights).
    - `local_weights`: the weights are loaded on this machine from a path or the local hub cache
      (a model directory, e.g. an organism, can be opened).
    - `structured_output`: generation honours ``SamplingParams.structured`` (a grammar).
    - `exact_logmass`: :meth:`Backend.next_token_logmass` (and the mass in
      :meth:`Backend.continuation_scores`) sums the whole distribution. False where only the
      top-K is visible (a server's ``logprobs=K``): the mass is then a *lower bound*, and the
      logprob methods mark their word-boundary scores as bounds (record and report).
    - `training`: the weights can be fine-tuned through the engine's own model (gradients: hf);
      ``organism build`` asks for it (:meth:`~harness.backends.hf.backend.HFBackend.trainable`).
    - `streaming`: the backend's calls may come from many threads at once and share one running
      batch (vLLM's continuous batching through :mod:`harness.backends.stream`, a server's queue),
      so the run loop keeps many samples in flight (:mod:`harness.run.stream`); `capacity` is
      how many sequences it runs at once (the loop's default window).
    """

    prefix_scoring: bool = False
    hidden_states: bool = False
    steering: bool = False
    structured_output: bool = False
    exact_logmass: bool = True
    streaming: bool = False
    capacity: int = 1
    local_weights: bool = False
    training: bool = False

    def lacks(self, needs: Sequence[str]) -> list[str]:
        """The capabilities of `needs` these capabilities do not have."""
        return [n for n in needs if not getattr(self, n)]


@dataclass(frozen=True)
class HiddenLayout:
    """A backend's residual stream: layer ids 0..`n_layers` (0 = the embeddings), each
    `hidden_size` wide; `convention` says what the last id holds on this backend."""

    n_layers: int
    hidden_size: int
    convention: str


def top_k_rows(rows: Sequence[dict[int, float]], top_k: int, width: int | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """The `top_k` most likely of each {token id: logprob} row, most likely first, as arrays
    (ids, logprobs) of `width` columns (default `top_k`), padded with id 0 and -inf."""
    best = [sorted(r.items(), key=lambda kv: -kv[1])[:top_k] for r in rows]
    width = top_k if width is None else width
    ids = np.zeros((len(rows), width), dtype=np.int64)
    lps = np.full((len(rows), width), -np.inf, dtype=np.float32)
    for i, b in enumerate(best):
        ids[i, :len(b)] = [t for t, _ in b]
        lps[i, :len(b)] = [v for _, v in b]
    return ids, lps


def logsumexp_rows(lp: np.ndarray) -> np.ndarray:
    """log(sum(exp(row))) per row, in float64; -inf for rows without mass."""
    lp = np.asarray(lp, dtype=np.float64)
    m = np.max(lp, axis=1, initial=-np.inf)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return np.where(np.isfinite(m), safe + np.log(np.exp(lp - safe[:, None]).sum(axis=1)), -np.inf)


class Backend(ABC):
    """A model behind one of the engines. Subclasses set `kind`, `tokenizer`, `identity`, and
    are declared, with what they take and can do, by a light spec (:mod:`harness.backends.specs`)."""

    kind: str = "base"
    device: str = "-"  # where the model runs: cpu, cuda, or a server URL (for our start-up line)
    tokenizer: Any  # a transformers PreTrainedTokenizerBase (None for chat-only servers)
    capabilities: Capabilities = Capabilities()  # a registered class's: its spec's (harness.backends.specs)
    settings: dict[str, Any] = {}  # recorded in the run's manifest (backend_settings); set per instance
    model_info: dict[str, Any] = {}  # what the model is (path, weights hash): the manifest's model

    @property
    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """What identifies the model's outputs in cache keys (backend kind, weights hash, dtype)."""

    @property
    def vocab_size(self) -> int:
        """Size of the output distribution returned by :meth:`next_token_logprobs`."""
        return len(self.tokenizer)

    @property
    def callers(self) -> Any:
        """A streaming backend's :class:`~harness.backends.stream.Callers` (the run loop registers
        its workers there, so a paced engine knows when they all wait); None otherwise."""
        return None

    @abstractmethod
    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """Complete each prompt; returns the answer split from its reasoning."""

    @abstractmethod
    def next_token_logprobs(self, prompts: Sequence[TokenIds],
                            token_ids: Sequence[int] | None = None) -> np.ndarray:
        """Log-softmax of the next-token distribution after each prompt, shape
        (len(prompts), vocab) or (len(prompts), len(token_ids)) when `token_ids` is given."""

    def next_token_view(self, prompts: Sequence[TokenIds], token_ids: Sequence[int],
                        top_k: int) -> NextTokenView:
        """Log-probs of `token_ids` and the `top_k` most likely tokens after each prompt: what
        first-token scoring reads. Engines that can return selected ids (vLLM) override this to
        avoid shipping the full distribution; the default reads it (HF computes it anyway)."""
        return NextTokenView.from_full(self.next_token_logprobs(prompts), token_ids, top_k)

    def next_token_logmass(self, prompts: Sequence[TokenIds], token_ids: Sequence[int]) -> np.ndarray:
        """log of the total probability of the `token_ids` set (any size) after each prompt,
        shape (len(prompts),). Default: from the full distribution, in chunks of 64 prompts."""
        return Backend.next_token_logmasses(self, prompts, [token_ids])[:, 0]

    def next_token_logmasses(self, prompts: Sequence[TokenIds],
                             token_sets: Sequence[Sequence[int]]) -> np.ndarray:
        """Log masses of several token sets after each prompt, (len(prompts), len(token_sets)).
        Default (the reference): from the full distribution, in chunks of 64 prompts; engines
        that can sum where the logits are (vLLM) override it."""
        sets = [np.asarray(list(s), dtype=np.int64) for s in token_sets]
        out = []
        for i in range(0, len(prompts), 64):
            full = self.next_token_logprobs(prompts[i:i + 64])
            out.append(np.stack([logsumexp_rows(full[:, s]) for s in sets], axis=1) if sets
                       else np.zeros((len(full), 0)))
        return np.concatenate(out) if out else np.zeros((0, len(sets)))

    @abstractmethod
    def loglikelihood(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
        """Teacher-forced sum of log p(continuation tokens | prompt) for each (prompt, continuation)."""

    def continuation_scores(self, pairs: Sequence[tuple[TokenIds, TokenIds]],
                            token_ids: Sequence[int]) -> list[tuple[float, float]]:
        """(loglikelihood, log mass of `token_ids` right after the continuation) per pair: what
        word-boundary scoring needs. Default: two calls; HF overrides it with one pass."""
        ll = self.loglikelihood(pairs)
        lm = self.next_token_logmass([list(p) + list(c) for p, c in pairs], token_ids)
        return [(float(a), float(b)) for a, b in zip(ll, lm)]

    def score_continuations(self, prompt: TokenIds, continuations: Sequence[TokenIds]) -> list[float]:
        """Teacher-forced log-likelihood of each continuation after one prompt."""
        return self.loglikelihood([(prompt, c) for c in continuations])

    def check_steering(self, steering: Any) -> None:
        """Raise BackendError if this backend cannot apply `steering`
        (a :class:`harness.backends.steered.Steering`). Backends with the `steering` capability
        override this with their own limits (layers, sizes, positions)."""
        refuse_steering(self)

    def steering(self, steering: Any) -> ContextManager[None]:
        """Context in which every call of this backend is steered (see check_steering)."""
        self.check_steering(steering)
        raise NotImplementedError  # pragma: no cover

    @property
    def context_length(self) -> int | None:
        """Tokens a prompt and its generation may take together (None: unknown here; a server
        then refuses what does not fit)."""
        return None

    def hidden_layout(self) -> HiddenLayout:
        """The layer ids and width of :meth:`pooled_hidden_states` (backends with the
        `hidden_states` capability)."""
        refuse_lacking(self, ["hidden_states"])
        raise NotImplementedError  # pragma: no cover

    @classmethod
    def trainable(cls, path: str) -> tuple[Any, Any]:
        """(tokenizer, model in float32 with gradients, on the CPU) of the weights at `path`, for
        fine-tuning (the `training` capability: ``organism build``); refused without it."""
        refuse_lacking(cls, ["training"])
        raise NotImplementedError  # pragma: no cover

    @classmethod
    def trainable_answers(cls, tokenizer: Any, model: Any, prompts: Sequence[TokenIds], max_tokens: int,
                          samples: int = 0, seed: int = 0) -> list[list[DrawnAnswer]]:
        """The answers of a model :meth:`trainable` returned (``organism build``'s base) to `prompts`,
        in one batch: per prompt, its greedy answer (`samples` 0) or `samples` answers sampled at
        temperature 1 from the whole distribution, seeded by `seed` alone; each at most
        `max_tokens`. The caller's random state is left as it was. Refused without the `training`
        capability."""
        refuse_lacking(cls, ["training"])
        raise NotImplementedError  # pragma: no cover

    def pooled_hidden_states(self, seqs: Sequence[TokenIds], layers: Sequence[int],
                             weights: Sequence[Any]) -> Any:
        """Weighted token sums of the residual stream, computed where the activations are.

        `weights[i]` is a (n_poolings, len(seqs[i])) tensor over sequence i's tokens; returns a
        float32 torch tensor (len(seqs), n_poolings, len(layers), hidden_size), layers in the
        order given (ids as :meth:`hidden_layout` says)."""
        self.hidden_layout()  # refuses
        raise NotImplementedError  # pragma: no cover

    def close(self) -> None:
        """Free the engine (GPU memory, worker processes)."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- shared helpers -------------------------------------------------------------------
    def _decode_generation(self, token_ids: Sequence[int], finish_reason: str) -> Generation:
        """Decode with special tokens kept, split reasoning, then drop special-token strings."""
        raw = self.tokenizer.decode(list(token_ids), skip_special_tokens=False)
        reasoning, answer = split_reasoning(raw)
        specials = [t for t in getattr(self.tokenizer, "all_special_tokens", []) if t]
        strip = lambda s: _remove_all(s, specials).strip()  # noqa: E731
        return Generation(text=strip(answer), reasoning=strip(reasoning) if reasoning is not None else None,
                          raw_text=raw, token_ids=tuple(int(t) for t in token_ids),
                          finish_reason=finish_reason)


def loglikelihood_by_prefix(backend: Backend, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
    """The values of ``backend.loglikelihood(pairs)`` from one batched ``next_token_logprobs`` call
    on every distinct prompt + proper prefix of a continuation, asking only for the continuation
    tokens: log p(c | p) = sum_k lp(c[k] | p + c[:k]). On a prefix-caching engine each request
    computes only its last few tokens."""
    reqs = list(dict.fromkeys(tuple(p) + tuple(c[:k]) for p, c in pairs for k in range(len(c))))
    if not reqs:
        return [0.0 for _ in pairs]
    need = sorted({int(t) for _, c in pairs for t in c})
    arr = np.asarray(backend.next_token_logprobs([list(r) for r in reqs], need), dtype=np.float64)
    row = {r: i for i, r in enumerate(reqs)}
    col = {t: j for j, t in enumerate(need)}
    return [float(sum(arr[row[tuple(p) + tuple(c[:k])], col[int(c[k])]] for k in range(len(c))))
            for p, c in pairs]


class WrappedBackend(Backend):
    """A backend that passes every call to `inner` (the base of the call cache and of the
    counting/timing wrappers used by tests and benchmarks); override what you intercept."""

    def __init__(self, inner: Backend) -> None:
        self.inner, self.kind, self.tokenizer = inner, inner.kind, inner.tokenizer
        self.device = inner.device

    def __getattr__(self, name: str) -> Any:  # what a backend has beyond the contract (tests)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def identity(self) -> dict[str, Any]:
        return self.inner.identity

    @property  # type: ignore[override]
    def settings(self) -> dict[str, Any]:
        return self.inner.settings

    @property  # type: ignore[override]
    def model_info(self) -> dict[str, Any]:
        return self.inner.model_info

    @property
    def vocab_size(self) -> int:
        return self.inner.vocab_size

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        return self.inner.capabilities

    @property
    def callers(self) -> Any:
        return self.inner.callers

    def around_call(self) -> ContextManager[None]:
        """The context every passed-on model call runs in (a steered backend installs its hooks
        here); nothing by default."""
        return nullcontext()

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        with self.around_call():
            return self.inner.generate(requests)

    def next_token_logprobs(self, prompts: Sequence[TokenIds],
                            token_ids: Sequence[int] | None = None) -> np.ndarray:
        with self.around_call():
            return self.inner.next_token_logprobs(prompts, token_ids)

    def next_token_view(self, prompts: Sequence[TokenIds], token_ids: Sequence[int],
                        top_k: int) -> NextTokenView:
        with self.around_call():
            return self.inner.next_token_view(prompts, token_ids, top_k)

    def next_token_logmass(self, prompts: Sequence[TokenIds], token_ids: Sequence[int]) -> np.ndarray:
        with self.around_call():
            return self.inner.next_token_logmass(prompts, token_ids)

    def next_token_logmasses(self, prompts: Sequence[TokenIds],
                             token_sets: Sequence[Sequence[int]]) -> np.ndarray:
        with self.around_call():
            return self.inner.next_token_logmasses(prompts, token_sets)

    def loglikelihood(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
        with self.around_call():
            return self.inner.loglikelihood(pairs)

    def continuation_scores(self, pairs: Sequence[tuple[TokenIds, TokenIds]],
                            token_ids: Sequence[int]) -> list[tuple[float, float]]:
        with self.around_call():
            return self.inner.continuation_scores(pairs, token_ids)

    def check_steering(self, steering: Any) -> None:
        self.inner.check_steering(steering)

    def steering(self, steering: Any) -> ContextManager[None]:
        return self.inner.steering(steering)

    @property
    def context_length(self) -> int | None:
        return self.inner.context_length

    def hidden_layout(self) -> HiddenLayout:
        return self.inner.hidden_layout()

    def pooled_hidden_states(self, seqs: Sequence[TokenIds], layers: Sequence[int],
                             weights: Sequence[Any]) -> Any:
        with self.around_call():
            return self.inner.pooled_hidden_states(seqs, layers, weights)

    def close(self) -> None:
        self.inner.close()


def refuse_lacking(backend: Backend | type[Backend], needs: Sequence[str], others: str = "") -> None:
    """Raise the one-line error for a backend (instance or class) that lacks one of the
    capabilities `needs` (`others`: the backends that have them, for the message)."""
    lacking = backend.capabilities.lacks(needs)
    if lacking:
        what, why = CAPABILITY_TEXT.get(lacking[0], (f"do this ({lacking[0]})", ""))
        raise BackendError(f"the {backend.kind} backend cannot {what} (capability {lacking[0]})"
                           + (f": {why}" if why else "") + (f"; use --backend {others}" if others else ""))


def refuse_steering(backend: Backend | type[Backend]) -> None:
    """Raise the one-line error for a backend (instance or class) without the `steering`
    capability; nothing when it has it."""
    refuse_lacking(backend, ["steering"])


def _remove_all(text: str, tokens: Sequence[str]) -> str:
    for t in sorted(tokens, key=len, reverse=True):
        text = text.replace(t, "")
    return text
