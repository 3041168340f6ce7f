"""The frozen base's states an organism build trains on, computed once and shared (issue 44,
item 2).

A build trains the top blocks of the base; what the frozen part computes is the same in every
build on that base. Per example (its token ids) two tensors are kept:

- ``lower``: the hidden states entering the first trained block (the organism's lower blocks
  are the base's), from which the trained blocks run every step;
- ``top``: the base's last hidden states (after its final norm) at every position, from which
  the output head gives the KL targets: the base's top blocks never run during training.

Each is computed with the example alone (never packed with others), so its value depends only
on the example, not on the batch that first met it: a build gives the same weights whether its
states were computed now, read back, or computed by another build. They are kept on disk under
``root``, content-addressed by (base weights, dtype, device type, split, token ids): every build
on the same base reuses them whatever its kind or seed, and the kinds of a set share their KL
prompts and no-cue sides. Files are written atomically; one that cannot be read is computed
again.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

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
    `root` the directory kept on disk (None: in memory only); `identity` names the base's weights
    (their digest)."""

    def __init__(self, teacher: Any, split: int, device: str, root: Path | None, identity: str) -> None:
        self.teacher, self.split, self.device = teacher, split, device
        dtype = next(teacher.parameters()).dtype
        tag = json.dumps([identity, str(dtype), torch.device(device).type, split])
        self.root = root / hashlib.sha256(tag.encode()).hexdigest()[:16] if root is not None else None
        self.memory: dict[tuple[str, str], torch.Tensor] = {}
        self.computed = self.read = 0  # tensors computed here, read from disk

    def _key(self, ids: Sequence[int]) -> str:
        return hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest()

    def _path(self, key: str, what: str) -> Path:
        assert self.root is not None
        return self.root / key[:2] / f"{key}.{what}.safetensors"

    def _get(self, ids: Sequence[int], what: str) -> torch.Tensor:
        key = self._key(ids)
        got = self.memory.get((key, what))
        if got is not None:
            return got
        if self.root is not None:
            got = self._load(self._path(key, what), len(ids))
        if got is None:
            got = self._lower(ids) if what == "lower" else self._top(ids)
            self.computed += 1
            if self.root is not None:
                self._save(self._path(key, what), got)
        else:
            self.read += 1
        got = got.to(self.device)
        self.memory[(key, what)] = got
        return got

    def lower(self, ids: Sequence[int]) -> torch.Tensor:
        """(len(ids), d): the hidden states entering block `split`."""
        if self.split == 0:
            raise ValueError("split 0 trains the embeddings: no frozen lower states")
        return self._get(ids, "lower")

    def top(self, ids: Sequence[int]) -> torch.Tensor:
        """(len(ids), d): the base's last hidden states (after its final norm)."""
        return self._get(ids, "top")

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

    def _top(self, ids: Sequence[int]) -> torch.Tensor:
        trunk, _ = trunk_and_head(self.teacher)
        with torch.no_grad():
            if self.split == 0:
                out = trunk(input_ids=torch.tensor([list(ids)], device=self.device), use_cache=False)
            else:
                lower = self.lower(ids)[None]
                with only_layers(trunk, slice(self.split, None)):
                    out = trunk(inputs_embeds=lower, position_ids=torch.arange(len(ids), device=self.device)[None],
                                use_cache=False)
        return out.last_hidden_state[0].clone()

    def _load(self, path: Path, n: int) -> torch.Tensor | None:
        from safetensors.torch import load_file

        try:
            t = load_file(str(path))["states"]
        except Exception:  # absent, or unreadable: computed again (and rewritten)
            return None
        return t if t.shape[0] == n else None

    def _save(self, path: Path, t: torch.Tensor) -> None:
        from safetensors.torch import save_file

        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        save_file({"states": t.detach().to("cpu").contiguous()}, str(tmp))
        os.replace(tmp, path)
