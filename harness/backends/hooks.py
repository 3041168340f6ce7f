"""Residual-stream capture with forward hooks on a transformers decoder.

Layer convention (same as HF ``output_hidden_states=True``): layer ``i`` for ``0 <= i < L`` is the
input of decoder layer ``i`` (``0`` = the embeddings, scaled where the model scales them), i.e.
the residual stream after ``i`` blocks; layer ``L`` (= ``num_hidden_layers``) is the output of
the last block *after the final norm*. vLLM's ``extract_hidden_states`` uses the same ids except
``L``, which it takes *before* the final norm (see :mod:`harness.backends.vllm.hidden`).

Decoder layers may return a tuple (older transformers, most remote code, vLLM's
``(hidden_states, residual)``) or a bare tensor (transformers >= 5 for Llama/Qwen/...); both are
handled. Layers above the highest one asked for are not run: the forward pass is stopped by an
exception once every hook has fired.

The same hook points also *write*: :func:`add_to_residual` adds a vector to the residual stream at
layer ids ``1..L-1`` (the output of block ``i-1``), for steering (:mod:`probes.steering.direction`). On a
tuple output the vector is added to the first element; for vLLM's fused-residual layers the
stream is ``hidden_states + residual``, so that is the same addition.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn

Reducer = Callable[[int, torch.Tensor], None]
"""Called as ``reducer(layer, hidden)`` with ``hidden`` of shape (batch, tokens, hidden_size)."""

_LAYER_ATTRS = ("layers", "h", "blocks", "block")
_NORM_ATTRS = ("norm", "ln_f", "final_layernorm", "final_layer_norm", "norm_f")


class _StopForward(Exception):
    """Raised by the last hook needed, to skip the remaining layers."""


def decoder_parts(model: nn.Module) -> tuple[nn.Module, nn.ModuleList, nn.Module | None]:
    """(decoder body, its list of blocks, its final norm or None) of a causal LM."""
    candidates: list[nn.Module] = []
    if hasattr(model, "get_decoder"):
        try:
            dec = model.get_decoder()
            if dec is not None:
                candidates.append(dec)
        except Exception:  # some models raise instead of returning None
            pass
    for attr in ("model", "transformer", "gpt_neox", "decoder"):
        sub = getattr(model, attr, None)
        if isinstance(sub, nn.Module):
            candidates.append(sub)
    candidates.append(model)
    n_cfg = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for dec in candidates:
        for name in _LAYER_ATTRS:
            layers = getattr(dec, name, None)
            if isinstance(layers, nn.ModuleList) and len(layers) > 0 and \
                    (n_cfg is None or len(layers) == n_cfg):
                norm = next((getattr(dec, a) for a in _NORM_ATTRS
                             if isinstance(getattr(dec, a, None), nn.Module)), None)
                return dec, layers, norm
    raise ValueError(f"cannot find the decoder layers of {type(model).__name__}; "
                     f"looked for {'/'.join(_LAYER_ATTRS)} on the decoder")


def num_layers(model: nn.Module) -> int:
    """Number of decoder blocks L; valid layer ids are 0..L."""
    return len(decoder_parts(model)[1])


def _tensor(out: Any) -> torch.Tensor:
    """The hidden states from a module output: a bare tensor, a tuple/list, or a ModelOutput."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    hs = getattr(out, "hidden_states", None) if not isinstance(out, (tuple, list)) else None
    if isinstance(hs, torch.Tensor):
        return hs
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    raise TypeError(f"unexpected decoder-layer output type {type(out).__name__}")


def _hook_point(blocks: nn.ModuleList, norm: nn.Module | None, layer: int) -> tuple[str, nn.Module]:
    """Where layer id `layer` is read: ("pre", block 0), ("post", block i-1) or ("post", norm)."""
    n = len(blocks)
    if layer == 0:
        return "pre", blocks[0]
    if layer < n or norm is None:
        return "post", blocks[layer - 1]
    return "post", norm


@contextmanager
def layer_hooks(model: nn.Module, layers: Sequence[int], reducer: Reducer,
                stop_early: bool = True) -> Iterator[None]:
    """Install hooks that call ``reducer(layer, hidden)`` for each requested layer id.

    Layer 0 is taken from the input of block 0, layer i (1..L-1) from the output of block i-1,
    layer L from the final norm's output (from block L-1's output if the model has no norm).
    """
    _, blocks, norm = decoder_parts(model)
    n = len(blocks)
    wanted = sorted(set(int(l) for l in layers))
    bad = [l for l in wanted if l < 0 or l > n]
    if bad:
        raise ValueError(f"layer ids {bad} out of range: this model has layers 0..{n}")
    if not wanted:
        raise ValueError("no layers requested")
    last = wanted[-1]
    handles = []

    def fire(layer: int, hidden: torch.Tensor) -> None:
        reducer(layer, hidden)
        if stop_early and layer == last and last < n:
            raise _StopForward

    for layer in wanted:
        kind, module = _hook_point(blocks, norm, layer)
        if kind == "pre":
            def pre(mod: nn.Module, args: tuple, kwargs: dict, _l: int = layer) -> None:
                hs = args[0] if args else kwargs.get("hidden_states")
                fire(_l, hs)
            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        else:
            def post(mod: nn.Module, args: tuple, out: Any, _l: int = layer) -> None:
                fire(_l, _tensor(out))
            handles.append(module.register_forward_hook(post))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


Gate = Callable[[], bool]
"""Called once per hooked forward: False leaves that forward pass unsteered."""


def steerable_layers(model: nn.Module) -> range:
    """Layer ids a vector can be added at: 1..L-1 (the residual stream between two blocks)."""
    return range(1, num_layers(model))


def _with_added(out: Any, delta: torch.Tensor) -> Any:
    """`out` (bare tensor, or tuple/list whose first element is the hidden states) plus `delta`."""
    if isinstance(out, torch.Tensor):
        return out + delta.to(out.dtype)
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        first = out[0] + delta.to(out[0].dtype)
        return type(out)([first, *out[1:]]) if isinstance(out, list) else (first, *out[1:])
    raise TypeError(f"cannot steer a decoder layer returning {type(out).__name__}")


def add_steering_hooks(model: nn.Module, additions: dict[int, torch.Tensor],
                       gate: Gate | None = None) -> list[Any]:
    """Install hooks adding `additions[layer]` (shape (hidden,)) to every position of the
    residual stream at each layer id (1..L-1); returns the handles (``.remove()`` them).

    `gate`, when given, is asked before each addition; vectors are moved to each block's device
    and dtype once, here."""
    _, blocks, norm = decoder_parts(model)
    ok = range(1, len(blocks))
    bad = sorted(l for l in additions if l not in ok)
    if bad:
        raise ValueError(f"cannot steer at layer ids {bad}: this model has steerable layers "
                         f"1..{len(blocks) - 1} (the residual stream between two blocks)")
    handles = []
    for layer, vec in sorted(additions.items()):
        _, module = _hook_point(blocks, norm, layer)
        param = next(module.parameters(), None)
        delta = vec.detach().to(device=param.device if param is not None else vec.device,
                                dtype=param.dtype if param is not None else vec.dtype)

        def post(mod: nn.Module, args: tuple, out: Any, _d: torch.Tensor = delta) -> Any:
            if gate is not None and not gate():
                return None
            return _with_added(out, _d)
        # prepend: run before transformers' own output-recording hook, so that
        # output_hidden_states reports the steered stream
        handles.append(module.register_forward_hook(post, prepend=True))
    return handles


@contextmanager
def add_to_residual(model: nn.Module, additions: dict[int, torch.Tensor],
                    gate: Gate | None = None) -> Iterator[None]:
    """Context manager form of :func:`add_steering_hooks`."""
    handles = add_steering_hooks(model, additions, gate)
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def run_body(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             position_ids: torch.Tensor) -> None:
    """Forward pass through the decoder body only (no LM head), tolerating an early stop."""
    body, _, _ = decoder_parts(model)
    try:
        body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
             use_cache=False)
    except _StopForward:
        pass


@torch.inference_mode()
def capture_hidden(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   position_ids: torch.Tensor, layers: Sequence[int]) -> dict[int, torch.Tensor]:
    """Full per-token hidden states {layer: (batch, tokens, hidden)} (float32, on CPU)."""
    got: dict[int, torch.Tensor] = {}

    def keep(layer: int, hidden: torch.Tensor) -> None:
        got[layer] = hidden.detach().float().cpu().clone()

    with layer_hooks(model, layers, keep):
        run_body(model, input_ids, attention_mask, position_ids)
    return got


@torch.inference_mode()
def capture_pooled(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   position_ids: torch.Tensor, layers: Sequence[int],
                   weights: torch.Tensor) -> torch.Tensor:
    """Weighted token sums computed inside the hooks (no per-token tensors are kept).

    `weights` has shape (batch, n_poolings, tokens); returns (batch, n_poolings, n_layers, hidden)
    float32 with layers in the order given.
    """
    order = {l: k for k, l in enumerate(layers)}
    b, p, t = weights.shape
    out: torch.Tensor | None = None
    w = weights.to(torch.float32)

    def reduce(layer: int, hidden: torch.Tensor) -> None:
        nonlocal out
        if out is None:
            out = torch.zeros((b, p, len(layers), hidden.shape[-1]), dtype=torch.float32)
        pooled = torch.einsum("bpt,bth->bph", w.to(hidden.device), hidden.float())
        out[:, :, order[layer], :] = pooled.cpu()

    with layer_hooks(model, layers, reduce):
        run_body(model, input_ids, attention_mask, position_ids)
    assert out is not None
    return out
