"""Scoring inside the vLLM engine (issue 23): the backend's side of
:mod:`harness.backends.vllm.reduce`, mixed into :class:`harness.backends.vllm.backend.VLLMBackend`.

A logits processor started with the engine reduces each flagged request's next-token
distribution to the numbers asked for (selected ids, top k, log masses of registered token sets)
and forces teacher-forced continuations by decoding, so they read the prompt from the prefix
cache; :class:`VLLMEngineScoring` sends those requests and reads the numbers back with
``collective_rpc``.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import numpy as np

from harness.backends.base import NextTokenView, TokenIds
from harness.core.errors import BackendError


class VLLMEngineScoring:
    """The contract's scoring calls through the engine's scoring processor. Needs ``_run``,
    ``_rpc`` and ``_vocab`` (the backend's) and ``_steer_wanted`` (its steering)."""

    _vocab: int
    _run: Callable[..., list[Any]]
    _rpc: Callable[..., list[Any]]

    def _reduce(self, prompts: Sequence[TokenIds], specs: Sequence[dict[str, Any]],
                with_vllm_logprobs: bool = False) -> list[dict[str, Any]]:
        """One request per (prompt, spec), all in one `generate` call; each spec may hold `force`
        (continuation ids, teacher-forced by decoding), `ids` (log-probs wanted at the end
        position), `sets` (names of registered token sets: their log masses there) and `top_k`.
        Returns what the worker recorded per request: ``{"force": [lp...], "ids": [...],
        "sets": {name: lm}, "top_ids": [...], "top_logprobs": [...]}``; `with_vllm_logprobs`
        (tests) adds ``"sampled"``: vLLM's own raw logprob of each decoded (forced) token."""
        from vllm import SamplingParams  # optional, heavy

        seq = self.__dict__.setdefault("_reduce_seq", itertools.count(1))  # next() is atomic
        keys, params = [], []
        for spec in specs:
            key = f"r{next(seq)}"
            force = [int(t) for t in spec.get("force", ())]
            end = bool(spec.get("ids") or spec.get("sets") or spec.get("top_k"))
            if not force and not end:
                raise BackendError("an engine scoring request needs a continuation or something to read")
            keys.append(key)
            params.append(SamplingParams(
                max_tokens=len(force) + int(end), temperature=0.0, detokenize=False, ignore_eos=True,
                logprobs=0 if with_vllm_logprobs else None, flat_logprobs=True,
                extra_args={"evalaware": {"key": key, "force": force,
                                          "ids": [int(t) for t in spec.get("ids", ())],
                                          "sets": list(spec.get("sets", ())),
                                          "top_k": int(spec.get("top_k", 0))}}))
        if not keys:
            return []
        outs = self._run(prompts, params)
        got: dict[str, dict[str, Any]] = {}
        for part in self._rpc("evalaware_take", keys):
            if part and not got:
                got = part  # tensor-parallel ranks record the same values: take the first
        out = []
        for k, spec, o in zip(keys, specs, outs):
            if k not in got:
                raise BackendError(f"the engine recorded nothing for scoring request {k}")
            r = got[k]
            n = len(spec.get("force", ()))
            f = r.get("force", {})
            r["force"] = [float(f[j]) for j in range(n)]
            if with_vllm_logprobs:
                lp = o.outputs[0].logprobs
                r["sampled"] = [dict(zip(lp.token_ids[lp.start_indices[j]:lp.end_indices[j]],
                                         lp.logprobs[lp.start_indices[j]:lp.end_indices[j]]))
                                for j in range(len(lp.start_indices))]
            out.append(r)
        return out

    def _set_name(self, token_ids: Sequence[int]) -> str:
        """Register a token set in the workers once; its name is a digest of its ids."""
        import hashlib

        ids = sorted({int(t) for t in token_ids})
        name = hashlib.sha256(np.asarray(ids, dtype=np.int64).tobytes()).hexdigest()[:16]
        reg = self.__dict__.setdefault("_sets", set())
        if name not in reg:
            self._rpc("evalaware_register_set", name, ids)
            reg.add(name)
        return name

    def next_token_view(self, prompts: Sequence[TokenIds], token_ids: Sequence[int],
                        top_k: int) -> NextTokenView:
        """One request per prompt: the worker reads the asked ids (any number) and the top k.
        The asked ids' log-probs are kept (this call's prompts only) for `continuation_scores`."""
        ids = [int(t) for t in token_ids]
        recs = self._reduce(prompts, [{"ids": ids, "top_k": top_k}] * len(prompts))
        sel = np.asarray([r.get("ids", []) for r in recs], dtype=np.float32).reshape(len(prompts), len(ids))
        k = min(top_k, self._vocab) if top_k > 0 else 0
        top_ids = np.asarray([r.get("top_ids", []) for r in recs], dtype=np.int64).reshape(len(prompts), k)
        top_lps = np.asarray([r.get("top_logprobs", []) for r in recs],
                             dtype=np.float32).reshape(len(prompts), k)
        self._first = {tuple(int(t) for t in p): dict(zip(ids, (float(v) for v in r.get("ids", []))))
                       for p, r in zip(prompts, recs)}
        self._first_under = self._steer_key()
        return NextTokenView(sel, top_ids, top_lps)

    def forget_prompts(self) -> None:
        """Drop the first-token values kept by `next_token_view`."""
        self._first = {}

    def _steer_key(self) -> str | None:
        want = getattr(self, "_steer_wanted", None)
        return want.digest() if want is not None and not want.is_null else None

    def _known_first(self, prompt: TokenIds, token: int) -> float | None:
        """log p(`token` | `prompt`) as the last `next_token_view` read it (same steering), or None."""
        if getattr(self, "_first_under", None) != self._steer_key():
            return None
        return getattr(self, "_first", {}).get(tuple(int(t) for t in prompt), {}).get(int(token))

    def next_token_logmasses(self, prompts: Sequence[TokenIds],
                             token_sets: Sequence[Sequence[int]]) -> np.ndarray:
        """One request per prompt; each set's log mass is summed in the worker."""
        names = [self._set_name(s) for s in token_sets]
        recs = self._reduce(prompts, [{"sets": names}] * len(prompts))
        return np.asarray([[r["sets"][n] for n in names] for r in recs],
                          dtype=np.float64).reshape(len(prompts), len(names))

    def next_token_logmass(self, prompts: Sequence[TokenIds], token_ids: Sequence[int]) -> np.ndarray:
        return self.next_token_logmasses(prompts, [token_ids])[:, 0]

    def loglikelihood(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
        """One forced-decoding request per pair: the prompt is read from the prefix cache and
        each continuation token costs one decoding step."""
        check_pairs(pairs)
        recs = self._reduce([p for p, _ in pairs], [{"force": list(c)} for _, c in pairs])
        return [float(np.sum(np.asarray(r["force"], dtype=np.float64))) for r in recs]

    def continuation_scores(self, pairs: Sequence[tuple[TokenIds, TokenIds]],
                            token_ids: Sequence[int]) -> list[tuple[float, float]]:
        """One forced-decoding request per pair, reading the mass of `token_ids` one step after
        the continuation. Where the last `next_token_view` read the continuation's first token
        after the prompt (tokenizer-aware scoring asks it first), that value is used and the
        request starts at prompt + first token: one logits row less per pair, and a one-token
        continuation is one prefill row (no decoding step)."""
        check_pairs(pairs)
        name = self._set_name(token_ids)
        firsts = [self._known_first(p, c[0]) for p, c in pairs]
        prompts = [list(p) + [int(c[0])] if f is not None else list(p) for (p, c), f in zip(pairs, firsts)]
        specs = [{"force": list(c[1:]) if f is not None else list(c), "sets": [name]}
                 for (_, c), f in zip(pairs, firsts)]
        recs = self._reduce(prompts, specs)
        return [((f or 0.0) + float(np.sum(np.asarray(r["force"], dtype=np.float64))), float(r["sets"][name]))
                for r, f in zip(recs, firsts)]


def check_pairs(pairs: Sequence[tuple[TokenIds, TokenIds]]) -> None:
    for p, c in pairs:
        if len(p) == 0 or len(c) == 0:
            raise BackendError("loglikelihood needs a non-empty prompt and continuation")


def first_logprobs(out: Any) -> dict[int, float]:
    """{token id: logprob} at the first generated position of a flat-logprobs request output."""
    lp = out.outputs[0].logprobs
    s, e = lp.start_indices[0], lp.end_indices[0]
    return dict(zip(lp.token_ids[s:e], lp.logprobs[s:e]))
