"""Content-addressed call cache: every model call goes through here, so an interrupted run
resumes without recomputing anything that finished (cf. lm-evaluation-harness's CachingLM).

The key of one call is sha256 over (backend identity, operation, token ids, parameters); the
backend identity holds the engine kind and the weights' sha256 (where known), plus the dtype
(local engines) or the served model name (openai), and the steering when steered. Only misses
reach the inner backend, in one batch, and their results are committed before returning.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from concurrent.futures import Future
from contextlib import nullcontext
from typing import Any, Callable, Sequence

import numpy as np

from harness.backends.base import (Backend, Generation, GenerationRequest, NextTokenView, TokenIds,
                            WrappedBackend)
from harness.runlog import RunLog


def call_key(identity: dict[str, Any], op: str, payload: dict[str, Any]) -> str:
    blob = json.dumps({"identity": identity, "op": op, **payload}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class CachedBackend(WrappedBackend):
    """Wraps a backend; same contract. `misses` counts items sent to the inner backend per op,
    `generated_tokens` the tokens it generated for them (a run's progress shows their rate).
    Activations (hidden_states) are not cached here: probes/ stores them in safetensors shards."""

    def __init__(self, inner: Backend, store: RunLog) -> None:
        super().__init__(inner)
        self.store = store
        self.misses: Counter[str] = Counter()
        self.hits: Counter[str] = Counter()
        self.generated_tokens = 0
        self._lock = threading.Lock()
        self._inflight: dict[str, Future[dict[str, Any]]] = {}

    def _cached(self, op: str, payloads: list[dict[str, Any]],
                compute: Callable[[list[int]], list[Any]]) -> list[Any]:
        """Thread-safe: a call another thread has in flight is waited for, not sent again (the
        streaming loop's methods share each sample's answer)."""
        keys = [call_key(self.identity, op, p) for p in payloads]
        with self._lock:
            found = self.store.get_calls(sorted(set(keys)))
            missing = [k for k in dict.fromkeys(keys) if k not in found]
            theirs = {k: self._inflight[k] for k in missing if k in self._inflight}
            mine = [k for k in missing if k not in theirs]
            fut: Future[dict[str, Any]] = Future()
            self._inflight.update((k, fut) for k in mine)
        if mine:
            try:
                first = {k: i for i, k in reversed(list(enumerate(keys)))}
                values = compute([first[k] for k in mine])
                self.store.put_calls(op, zip(mine, values))
                fut.set_result(dict(zip(mine, values)))
            except BaseException as e:
                fut.set_exception(e)
                raise
            finally:
                with self._lock:
                    for k in mine:
                        self._inflight.pop(k, None)
            found.update(zip(mine, values))
        if theirs:  # waiting for another thread's call counts as waiting on the engine (paced engines)
            callers = self.inner.callers
            for k, other in theirs.items():
                with callers.wait(other) if callers is not None else nullcontext():
                    found[k] = other.result()[k]
        with self._lock:  # a count is there only where something was counted (the manifest)
            if mine:
                self.misses[op] += len(mine)
            if len(keys) > len(mine):
                self.hits[op] += len(keys) - len(mine)
        return [found[k] for k in keys]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        payloads = [{"prompt": list(r.prompt_ids), "params": r.params.to_dict()} for r in requests]

        def compute(idx: list[int]) -> list[dict[str, Any]]:
            gens = self.inner.generate([requests[i] for i in idx])
            with self._lock:
                self.generated_tokens += sum(len(g.token_ids) for g in gens)
            return [g.to_dict() for g in gens]

        vals = self._cached("generate", payloads, compute)
        return [Generation.from_dict(v) for v in vals]

    def next_token_logprobs(self, prompts: Sequence[TokenIds],
                            token_ids: Sequence[int] | None = None) -> np.ndarray:
        ids = [int(t) for t in token_ids] if token_ids is not None else None
        payloads = [{"prompt": list(p), "token_ids": ids} for p in prompts]
        vals = self._cached("next_token_logprobs", payloads,
                            lambda idx: list(self.inner.next_token_logprobs([prompts[i] for i in idx], ids)))
        width = len(ids) if ids is not None else self.vocab_size
        return np.stack([np.asarray(v, dtype=np.float32) for v in vals]) if vals else \
            np.zeros((0, width), dtype=np.float32)

    def next_token_view(self, prompts: Sequence[TokenIds], token_ids: Sequence[int],
                        top_k: int) -> NextTokenView:
        ids = [int(t) for t in token_ids]
        payloads = [{"prompt": list(p), "token_ids": ids, "top_k": int(top_k)} for p in prompts]
        vals = self._cached("next_token_view", payloads, lambda idx: self.inner.next_token_view(
            [prompts[i] for i in idx], ids, top_k).to_dicts())
        return NextTokenView.from_dicts(vals, len(ids), top_k)

    def next_token_logmass(self, prompts: Sequence[TokenIds], token_ids: Sequence[int]) -> np.ndarray:
        """Cached per prompt under a digest of the (sorted) id set, not the ids themselves."""
        ids, digest = _id_set(token_ids)
        payloads = [{"prompt": list(p), "ids_sha256": digest} for p in prompts]
        vals = self._cached("next_token_logmass", payloads, lambda idx: [
            float(v) for v in self.inner.next_token_logmass([prompts[i] for i in idx], ids)])
        return np.asarray(vals, dtype=np.float64)

    def next_token_logmasses(self, prompts: Sequence[TokenIds],
                             token_sets: Sequence[Sequence[int]]) -> np.ndarray:
        """Cached per prompt under the digests of the (sorted) id sets."""
        sets = [_id_set(s) for s in token_sets]
        payloads = [{"prompt": list(p), "sets_sha256": [d for _, d in sets]} for p in prompts]
        vals = self._cached("next_token_logmasses", payloads, lambda idx: [
            [float(x) for x in row] for row in self.inner.next_token_logmasses(
                [prompts[i] for i in idx], [ids for ids, _ in sets])])
        return np.asarray(vals, dtype=np.float64).reshape(len(prompts), len(sets))

    def continuation_scores(self, pairs: Sequence[tuple[TokenIds, TokenIds]],
                            token_ids: Sequence[int]) -> list[tuple[float, float]]:
        ids, digest = _id_set(token_ids)
        payloads = [{"prompt": list(p), "continuation": list(c), "ids_sha256": digest} for p, c in pairs]
        vals = self._cached("continuation_scores", payloads, lambda idx: [
            [float(a), float(b)] for a, b in self.inner.continuation_scores([pairs[i] for i in idx], ids)])
        return [(float(a), float(b)) for a, b in vals]

    def loglikelihood(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
        payloads = [{"prompt": list(p), "continuation": list(c)} for p, c in pairs]
        return [float(v) for v in self._cached(
            "loglikelihood", payloads, lambda idx: self.inner.loglikelihood([pairs[i] for i in idx]))]


def _id_set(token_ids: Sequence[int]) -> tuple[list[int], str]:
    """A token-id set, sorted, and its digest (what keys a call on a large id set)."""
    ids = sorted({int(t) for t in token_ids})
    return ids, hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()
