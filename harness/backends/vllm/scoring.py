"""Scoring inside the vLLM engine (issue 23): the backend's side of
:mod:`harness.backends.vllm.reduce`, mixed into :class:`harness.backends.vllm.backend.VLLMBackend`.

A logits processor started with the engine reduces each flagged request's next-token
distribution to the numbers asked for (selected ids, top k, log masses of registered token sets)
and forces teacher-forced continuations by decoding, so they read the prompt from the prefix
cache; :class:`VLLMEngineScoring` sends those requests and reads the numbers back with
``collective_rpc``. Every call is complete in itself: nothing one call reads is kept for another,
so calls from many threads at once (the streaming loop) give what one thread's calls give.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import numpy as np

from harness.backends.base import NextTokenView, TokenIds
from harness.core.errors import BackendError

_KEYS = itertools.count(1)  # scoring request keys, unique in the process (next() is atomic)


class VLLMEngineScoring:
    """The contract's scoring calls through the engine's scoring processor. Needs ``_run``,
    ``_rpc`` and ``_vocab`` (the backend's)."""

    _vocab: int
    _run: Callable[..., list[Any]]
    _rpc: Callable[..., list[Any]]
    #: `continuation_scores` starts all but one request per prompt at prompt + first token (False:
    #: every request at the prompt, one logits row more each; the benchmarks' and tests' reference)
    start_after_first: bool = True

    def _reduce(self, prompts: Sequence[TokenIds], specs: Sequence[dict[str, Any]],
                with_vllm_logprobs: bool = False) -> list[dict[str, Any]]:
        """One request per (prompt, spec), all in one `generate` call; each spec may hold `force`
        (continuation ids, teacher-forced by decoding), `first` (ids whose log-probs are read at
        the prompt's end), `ids` (log-probs wanted at the end position), `sets` (names of
        registered token sets: their log masses there) and `top_k`. Returns what the worker
        recorded per request: ``{"force": [lp...], "first": [...], "ids": [...], "sets": {name:
        lm}, "top_ids": [...], "top_logprobs": [...]}``; `with_vllm_logprobs` (tests) adds
        ``"sampled"``: vLLM's own raw logprob of each decoded (forced) token."""
        from vllm import SamplingParams  # optional, heavy

        keys, params = [], []
        for spec in specs:
            key = f"r{next(_KEYS)}"
            force = [int(t) for t in spec.get("force", ())]
            first = [int(t) for t in spec.get("first", ())]
            end = bool(spec.get("ids") or spec.get("sets") or spec.get("top_k") or (first and not force))
            if not force and not end:
                raise BackendError("an engine scoring request needs a continuation or something to read")
            keys.append(key)
            params.append(SamplingParams(
                max_tokens=len(force) + int(end), temperature=0.0, detokenize=False, ignore_eos=True,
                logprobs=0 if with_vllm_logprobs else None, flat_logprobs=True,
                extra_args={"evalaware": {"key": key, "force": force, "first": first,
                                          "ids": [int(t) for t in spec.get("ids", ())],
                                          "sets": list(spec.get("sets", ())),
                                          "top_k": int(spec.get("top_k", 0))}}))
        if not keys:
            return []
        try:
            outs = self._run(prompts, params)
        except Exception:
            try:  # drop whatever the workers recorded for these requests before they failed
                self._rpc("evalaware_take", keys)
            except Exception:  # the engine is down: the caller hears the first error
                pass
            raise
        got: dict[str, dict[str, Any]] = {}
        for part in self._rpc("evalaware_take", keys):
            # ranks that sample the whole batch record the same values; a sampler sharded over
            # tensor-parallel ranks records each request on one of them
            for k, v in (part or {}).items():
                got.setdefault(k, v)
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
        """One request per prompt: the worker reads the asked ids (any number) and the top k."""
        ids = [int(t) for t in token_ids]
        recs = self._reduce(prompts, [{"ids": ids, "top_k": top_k}] * len(prompts))
        sel = np.asarray([r.get("ids", []) for r in recs], dtype=np.float32).reshape(len(prompts), len(ids))
        k = min(top_k, self._vocab) if top_k > 0 else 0
        top_ids = np.asarray([r.get("top_ids", []) for r in recs], dtype=np.int64).reshape(len(prompts), k)
        top_lps = np.asarray([r.get("top_logprobs", []) for r in recs],
                             dtype=np.float32).reshape(len(prompts), k)
        return NextTokenView(sel, top_ids, top_lps)

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
        the continuation. Per distinct prompt, its first pair's request starts at the prompt and
        also reads there the first token of every continuation of that prompt in the call; the
        other pairs' requests start at prompt + first token and use that value: one logits row
        less each, and a one-token continuation is one prefill row (no decoding step). The
        values depend on this call's pairs only (in their order), not on any call before."""
        check_pairs(pairs)
        name = self._set_name(token_ids)
        keys = [tuple(int(t) for t in p) for p, _ in pairs]
        lead: dict[tuple[int, ...], int] = {}  # prompt -> the pair whose request starts there
        firsts: dict[tuple[int, ...], list[int]] = {}
        for i, (k, (_, c)) in enumerate(zip(keys, pairs)):
            lead.setdefault(k, i)
            firsts.setdefault(k, []).append(int(c[0]))
        at_prompt = [not self.start_after_first or lead[k] == i for i, k in enumerate(keys)]
        prompts, specs = [], []
        for (p, c), k, whole in zip(pairs, keys, at_prompt):
            if whole:
                prompts.append(list(p))
                first = sorted(set(firsts[k])) if self.start_after_first else []
                specs.append({"force": list(c), "sets": [name], "first": first})
            else:
                prompts.append(list(p) + [int(c[0])])
                specs.append({"force": list(c[1:]), "sets": [name]})
        recs = self._reduce(prompts, specs)
        read = {keys[i]: dict(zip(specs[i]["first"], recs[i].get("first", []))) for i in lead.values()}
        return [((0.0 if whole else read[k][int(c[0])]) + float(np.sum(np.asarray(r["force"], dtype=np.float64))),
                 float(r["sets"][name]))
                for (_, c), k, whole, r in zip(pairs, keys, at_prompt, recs)]


def check_pairs(pairs: Sequence[tuple[TokenIds, TokenIds]]) -> None:
    for p, c in pairs:
        if len(p) == 0 or len(c) == 0:
            raise BackendError("loglikelihood needs a non-empty prompt and continuation")


def first_logprobs(out: Any) -> dict[int, float]:
    """{token id: logprob} at the first generated position of a flat-logprobs request output."""
    lp = out.outputs[0].logprobs
    s, e = lp.start_indices[0], lp.end_indices[0]
    return dict(zip(lp.token_ids[s:e], lp.logprobs[s:e]))
