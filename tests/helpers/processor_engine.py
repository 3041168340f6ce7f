"""A small step engine whose sampler runs the real vLLM scoring processor
(:mod:`harness.backends.vllm.processor`) through vLLM's V1 or V2 runner interface, for testing
:class:`harness.backends.vllm.scoring.VLLMEngineScoring` and the engine driver without a vLLM
engine. Needs vLLM installed (its SamplingParams and interface types).

The "model" is deterministic: the logits after a sequence are a function of its tokens and of how
many of them the request decoded (rather than prefilled), as a real engine's float results differ
slightly between the two paths; so a request's numbers depend only on the request, never on the
batch it shares or the order requests arrive in. Prompts longer than `chunk` are prefilled in
chunks (the earlier chunks' rows reach the processor, as vLLM's do). Every request finishes after
`max_tokens` greedy steps."""

from __future__ import annotations

import hashlib
import itertools
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np
import torch

from harness.backends.stream import EngineDriver
from harness.backends.vllm.processor import ScoringLogitsProcessor
from harness.backends.vllm.reduce import ScoringWorkerExtension
from harness.backends.vllm.scoring import VLLMEngineScoring


def logits_after(tokens: Sequence[int], decoded: int, vocab: int) -> torch.Tensor:
    """The model: a pseudo-random row seeded by the tokens, scaled by the decoded count."""
    seed = int.from_bytes(hashlib.sha256(np.asarray(tokens, dtype=np.int64).tobytes()).digest()[:8], "little")
    row = torch.from_numpy(np.random.default_rng(seed).standard_normal(vocab).astype(np.float32) * 3)
    return row * (1.0 + 1e-3 * decoded)


class _Req:
    def __init__(self, rid: str, prompt: list[int], params: Any) -> None:
        self.rid, self.prompt, self.params = rid, prompt, params
        self.out: list[int] = []
        self.fed = 0  # prompt tokens prefilled so far
        self.slot = -1  # V1: batch index; V2: request slot


class ProcessorSteps:
    """A :class:`~harness.backends.stream.StepEngine` (not paced) over `interface`'s processor."""

    paced = False

    def __init__(self, interface: str, vocab: int = 64, chunk: int = 16, max_num_seqs: int = 6) -> None:
        self.interface, self.vocab, self.chunk, self.max_num_seqs = interface, vocab, chunk, max_num_seqs
        self.waiting: list[_Req] = []
        self.running: list[_Req] = []  # V1: in batch-index order
        self._ids = itertools.count(1)
        self.steps = 0
        if interface == "v1":
            self.proc = ScoringLogitsProcessor(None, torch.device("cpu"), False)
        else:
            self.prompt_len = np.zeros(max_num_seqs, dtype=np.int32)
            self.proc = ScoringLogitsProcessor(SimpleNamespace(speculative_config=None),
                                               SimpleNamespace(prompt_len=SimpleNamespace(np=self.prompt_len)))

    def add(self, prompts: Sequence[Any], params: Sequence[Any]) -> list[str]:
        for sp in params:
            ScoringLogitsProcessor.validate_params(sp)  # vLLM validates at admission
        reqs = [_Req(f"sim-{next(self._ids)}", [int(t) for t in p], sp) for p, sp in zip(prompts, params)]
        self.waiting.extend(reqs)
        return [r.rid for r in reqs]

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def abort(self, ids: Sequence[str]) -> None:
        gone = set(ids)
        self.waiting = [r for r in self.waiting if r.rid not in gone]
        self._remove([r for r in self.running if r.rid in gone])

    def step(self) -> list[tuple[str, Any]]:
        self.steps += 1
        self._admit()
        rows, steps = [], []
        for r in self.running:
            if r.fed < len(r.prompt):  # prefill a chunk
                r.fed = min(len(r.prompt), r.fed + self.chunk)
                seq, decoded = r.prompt[:r.fed], 0
            else:
                seq, decoded = r.prompt + r.out, len(r.out)
            rows.append(logits_after(seq, decoded, self.vocab))
            steps.append(len(seq))
        order = list(range(len(self.running)))
        if self.interface == "v2":  # the V2 runner orders rows its own way every step
            order = order[self.steps % 2::2] + order[1 - self.steps % 2::2]
            y = self.proc.apply(torch.stack([rows[i] for i in order]), self._ctx(order, steps))
        else:
            y = self.proc.apply(torch.stack(rows))
        done = []
        for j, i in enumerate(order):
            r = self.running[i]
            if r.fed == len(r.prompt) and steps[i] >= len(r.prompt):
                r.out.append(int(y[j].argmax()))
        for r in list(self.running):
            if len(r.out) >= r.params.max_tokens:
                done.append((r.rid, SimpleNamespace(request_id=r.rid, outputs=[SimpleNamespace(token_ids=r.out)])))
        self._remove([r for r in self.running if len(r.out) >= r.params.max_tokens])
        return done

    def _admit(self) -> None:
        added = []
        while self.waiting and len(self.running) < self.max_num_seqs:
            r = self.waiting.pop(0)
            if self.interface == "v1":
                r.slot = len(self.running)
                added.append((r.slot, r.params, r.prompt, r.out))
            else:
                r.slot = min(set(range(self.max_num_seqs)) - {q.slot for q in self.running})
                self.prompt_len[r.slot] = len(r.prompt)
                self.proc.add_request(r.slot, r.params)
            self.running.append(r)
        if added:
            from vllm.v1.sample.logits_processor import BatchUpdate

            self.proc.update_state(BatchUpdate(len(self.running), [], added, []))

    def _remove(self, gone: list[_Req]) -> None:
        """V1: removed indices, then the last requests moved into the holes (vLLM condenses)."""
        if not gone:
            return
        if self.interface == "v2":
            self.running = [r for r in self.running if r not in gone]
            return
        from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

        removed = sorted(r.slot for r in gone)
        keep = [r for r in self.running if r not in gone]
        holes = [i for i in removed if i < len(keep)]
        moved = []
        for r in sorted((r for r in keep if r.slot >= len(keep)), key=lambda r: -r.slot):
            hole = holes.pop(0)
            moved.append((r.slot, hole, MoveDirectionality.UNIDIRECTIONAL))
            r.slot = hole
        self.running = sorted(keep, key=lambda r: r.slot)
        self.proc.update_state(BatchUpdate(len(self.running), removed, [], moved))

    def _ctx(self, order: list[int], steps: list[int]) -> Any:
        from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

        idx = np.asarray([self.running[i].slot for i in order])
        seq = np.asarray([steps[i] for i in order], dtype=np.int32)
        return LogitsContext(expanded_idx_mapping=torch.from_numpy(idx), idx_mapping=torch.from_numpy(idx),
                             idx_mapping_np=idx, expanded_local_pos=torch.zeros(len(idx), dtype=torch.int32),
                             input_ids=torch.zeros(len(idx), dtype=torch.int32), pos=torch.from_numpy(seq - 1),
                             seq_lens_upper_bound_np=seq)


class ProcessorScoring(VLLMEngineScoring):
    """The vLLM backend's scoring calls over a :class:`ProcessorSteps` engine behind a driver;
    the worker extension runs in this process (``_rpc`` on the driver thread, as vLLM's
    ``collective_rpc`` runs between steps)."""

    def __init__(self, engine: ProcessorSteps) -> None:
        self.engine = engine
        self.driver = EngineDriver(engine, name="processor-sim")
        self._vocab = engine.vocab
        self._worker = ScoringWorkerExtension()

    def _run(self, prompts: Sequence[Any], params: Any) -> list[Any]:
        return self.driver.run(list(prompts), params if isinstance(params, list) else [params] * len(prompts))

    def _rpc(self, name: str, *args: Any) -> list[Any]:
        return [self.driver.call(getattr(self._worker, name), *args)]

    def close(self) -> None:
        self.driver.close()
