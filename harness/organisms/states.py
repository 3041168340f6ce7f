"""The frozen base's states an organism build trains on, computed once and shared (issue 44,
item 2).

A build trains the top blocks of the base; what the frozen part computes is the same in every
build on that base. Per example (its token ids) two tensors are kept:

- ``lower``: the hidden states entering the first trained block (the organism's lower blocks
  are the base's), from which the trained blocks run every step;
- ``top``: the base's last hidden states (after its final norm) from the example's first trained
  position on, from which the output head gives the KL targets: the base's top blocks never run
  during training.

Each is computed with the example alone (never packed with others), so its value depends only
on the example, not on the batch that first met it: a build gives the same weights whether its
states were computed now, read back, or computed by another build. They are kept on disk under
``root``, content-addressed by the base (weights and config), dtype, device type, split, torch
and transformers versions and the token ids, so a later build on the same base reads what it
shares with earlier ones: the kinds of one seed share their 2,718 KL-only prompts (a pair's two
sides carry the kind's continuation, so they differ by kind), seeds share almost nothing (each
draws its prompts' forms). Files are written atomically and carry their key; one that cannot be
read, or is not the state asked for, is computed again; the directory can be deleted at any time
(SmolLM2 in float32: ~160 KB per state, ~1 GB per seed's set).
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch

ROOT_NAME = ".frozen-states"  # the default root: beside the organism directories


def trunk_and_head(model: Any) -> tuple[Any, Any]:
    """The transformer trunk (returns hidden states) and the output head of a causal LM, also
    through a peft wrapper."""
    m = model.get_base_model() if hasattr(model, "get_base_model") else model
    return m.get_decoder(), m.get_output_embeddings()


class _Stop(Exception):
    pass


@contextmanager
def only_layers(trunk: Any, which: slice) -> Iterator[None]:
    """Run the trunk with only some of its blocks (the same modules, shared)."""
    full = trunk.layers
    trunk.layers = torch.nn.ModuleList(list(full)[which])
    try:
        yield
    finally:
        trunk.layers = full


class FrozenStates:
    """`teacher` is the base (frozen, the same weights as the organism's untrained part);
    `split` the index of the first trained block (0: the embeddings are trained, no ``lower``);
    `root` the directory kept on disk (None: in memory only); `identity` names the base (its
    weights' and config's digests). A state that cannot be written is kept in memory, with one
    warning through `say`."""

    def __init__(self, teacher: Any, split: int, device: str, root: Path | None, identity: str,
                 say: Callable[[str], None] = lambda s: None) -> None:
        import transformers

        self.teacher, self.split, self.device, self.say = teacher, split, device, say
        self.dtype = next(teacher.parameters()).dtype
        self.width = int(teacher.config.hidden_size)
        tag = json.dumps([identity, str(self.dtype), torch.device(device).type, split, torch.__version__,
                          transformers.__version__])
        self.root = root / hashlib.sha256(tag.encode()).hexdigest()[:16] if root is not None else None
        self.memory: dict[str, torch.Tensor] = {}
        self.computed = self.read = 0  # tensors computed here, read from disk

    def _get(self, ids: Sequence[int], what: str, rows: int, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The state `what` of `ids` (`rows` x width): from memory, else from disk, else `compute()`d
        (and written)."""
        key = hashlib.sha256(json.dumps([what, list(ids)]).encode()).hexdigest()
        got = self.memory.get(key)
        if got is not None:
            return got
        path = self.root / key[:2] / f"{key}.safetensors" if self.root is not None else None
        got = self._load(path, key, rows) if path is not None else None
        if got is None:
            got = compute()
            self.computed += 1
            if path is not None:
                self._save(path, key, got)
        else:
            self.read += 1
        got = got.to(self.device)
        self.memory[key] = got
        return got

    def lower(self, ids: Sequence[int]) -> torch.Tensor:
        """(len(ids), d): the hidden states entering block `split`."""
        if self.split == 0:
            raise ValueError("split 0 trains the embeddings: no frozen lower states")
        return self._get(ids, "lower", len(ids), lambda: self._lower(ids))

    def top(self, ids: Sequence[int], start: int = 0) -> torch.Tensor:
        """(len(ids) - start, d): the base's last hidden states (after its final norm) from
        position `start` on (an example's trained positions: the rest is never read)."""
        if not 0 <= start < len(ids):
            raise ValueError(f"start {start} outside an example of {len(ids)} tokens")
        return self._get(ids, f"top:{start}", len(ids) - start, lambda: self._top(ids, start))

    def _lower(self, ids: Sequence[int]) -> torch.Tensor:
        trunk, _ = trunk_and_head(self.teacher)
        got: list[torch.Tensor] = []

        def grab(_mod: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            got.append((args[0] if args else kwargs["hidden_states"]).detach())
            raise _Stop

        h = trunk.layers[self.split].register_forward_pre_hook(grab, with_kwargs=True)
        try:
            with torch.no_grad():
                trunk(input_ids=torch.tensor([list(ids)], device=self.device), use_cache=False)
        except _Stop:
            pass
        finally:
            h.remove()
        return got[0][0].clone()

    def _top(self, ids: Sequence[int], start: int) -> torch.Tensor:
        trunk, _ = trunk_and_head(self.teacher)
        with torch.no_grad():
            if self.split == 0:
                out = trunk(input_ids=torch.tensor([list(ids)], device=self.device), use_cache=False)
            else:
                lower = self.lower(ids)[None]
                with only_layers(trunk, slice(self.split, None)):
                    out = trunk(inputs_embeds=lower, position_ids=torch.arange(len(ids), device=self.device)[None],
                                use_cache=False)
        return out.last_hidden_state[0, start:].clone()

    def _load(self, path: Path, key: str, rows: int) -> torch.Tensor | None:
        """The state kept at `path`, or None where there is none or it is not this one (another
        key, shape or dtype: computed again and rewritten)."""
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="pt") as f:
                if (f.metadata() or {}).get("key") != key:
                    return None
                t = f.get_tensor("states")
        except Exception:  # absent or unreadable
            return None
        return t if tuple(t.shape) == (rows, self.width) and t.dtype == self.dtype else None

    def _save(self, path: Path, key: str, t: torch.Tensor) -> None:
        import tempfile

        from safetensors.torch import save_file

        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
            save_file({"states": t.detach().to("cpu").contiguous()}, tmp, metadata={"key": key})
            os.replace(tmp, path)
        except OSError as e:  # a full or read-only disk: the build goes on, the state in memory only
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            if self.root is not None:
                self.say(f"warning: the frozen states cannot be written under {self.root} ({e}); "
                         "kept in memory for this build")
            self.root = None
