"""Hugging Face transformers backend: CPU or GPU, batched with padding, exact log-softmax.

This is the reference implementation for log-probabilities and activations.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np

from ..assets import resolve_model
from ..errors import BackendError
from ..fingerprint import local_model_path, model_identity
from .base import Backend, Generation, GenerationRequest, StructuredOutput, TokenIds

_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}


def _batches(order: list[int], size: int) -> list[list[int]]:
    return [order[i:i + size] for i in range(0, len(order), size)]


class HFBackend(Backend):
    """transformers `AutoModelForCausalLM`. `dtype="auto"`: float32 on CPU, bfloat16 on CUDA."""

    kind = "hf"

    def __init__(self, model: str, dtype: str = "auto", device: str | None = None,
                 batch_size: int = 8, trust_remote_code: bool = False,
                 tokenizer: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.model_name = model
        path = local_model_path(model)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype == "auto":
            dtype = "bfloat16" if self.device.startswith("cuda") else "float32"
        if dtype not in _DTYPES:
            raise BackendError(f"unknown dtype {dtype!r}; use one of {', '.join(sorted(_DTYPES))}")
        self.dtype = _DTYPES[dtype]
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(resolve_model(tokenizer or model),
                                                           trust_remote_code=trust_remote_code)
            self.model = AutoModelForCausalLM.from_pretrained(
                path, dtype=getattr(torch, self.dtype), trust_remote_code=trust_remote_code
            ).to(self.device).eval()
        except OSError as e:
            raise BackendError(f"cannot load model {model!r}: {e}") from e
        self.batch_size = batch_size
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id if self.tokenizer.eos_token_id is not None else 0
        eos = self.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id is not None:
            eos.append(self.tokenizer.eos_token_id)
        self.eos_ids = sorted(set(eos))
        self.model_info = model_identity(path)
        self._identity = {"backend": "hf", "weights_sha256": self.model_info["weights_sha256"],
                          "dtype": self.dtype}

    @property
    def identity(self) -> dict[str, Any]:
        return self._identity

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    # --- padding helpers ------------------------------------------------------------------
    def _left_pad(self, seqs: Sequence[TokenIds]):
        torch = self.torch
        n = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), n), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), n), dtype=torch.long)
        for i, s in enumerate(seqs):
            if len(s) == 0:
                raise BackendError("empty prompt")
            ids[i, n - len(s):] = torch.tensor(list(s), dtype=torch.long)
            mask[i, n - len(s):] = 1
        # Positions must ignore left padding (a plain forward does not derive them from the mask).
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self.device), mask.to(self.device), pos.to(self.device)

    def _by_length(self, seqs: Sequence[TokenIds]) -> list[list[int]]:
        order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
        return _batches(order, self.batch_size)

    # --- contract -------------------------------------------------------------------------
    def next_token_logprobs(self, prompts: Sequence[TokenIds],
                            token_ids: Sequence[int] | None = None) -> np.ndarray:
        torch = self.torch
        width = len(token_ids) if token_ids is not None else self.vocab_size
        out = np.zeros((len(prompts), width), dtype=np.float32)
        sel = torch.tensor(list(token_ids), device=self.device) if token_ids is not None else None
        with torch.inference_mode():
            for batch in self._by_length(prompts):
                ids, mask, pos = self._left_pad([prompts[i] for i in batch])
                logits = self.model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                    logits_to_keep=1).logits[:, -1, :].float()
                lp = torch.log_softmax(logits, dim=-1)
                if sel is not None:
                    lp = lp[:, sel]
                out[batch] = lp.cpu().numpy()
        return out

    def loglikelihood(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
        """Each distinct prompt runs once, batched with other prompts (left padding, as in
        `next_token_logprobs`); its KV cache rows are then gathered for its continuations (in
        chunks of `batch_size`), so only continuation tokens are recomputed and log-softmax is
        taken only where a continuation token is predicted."""
        return [ll for ll, _ in self._teacher_force(pairs, None)]

    def continuation_scores(self, pairs: Sequence[tuple[TokenIds, TokenIds]],
                            token_ids: Sequence[int]) -> list[tuple[float, float]]:
        """Same pass as `loglikelihood`, with the whole continuation fed so the distribution
        after its last token gives the mass of `token_ids` at no extra forward."""
        return self._teacher_force(pairs, list(token_ids))

    def _teacher_force(self, pairs: Sequence[tuple[TokenIds, TokenIds]],
                       mass_ids: list[int] | None) -> list[tuple[float, float]]:
        import copy

        torch = self.torch
        for (p, c) in pairs:
            if len(p) == 0 or len(c) == 0:
                raise BackendError("loglikelihood needs a non-empty prompt and continuation")
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (p, _) in enumerate(pairs):
            groups.setdefault(tuple(int(t) for t in p), []).append(i)
        prompts = list(groups)
        out = [0.0] * len(pairs)
        mass = [0.0] * len(pairs)
        sel = torch.tensor(mass_ids, device=self.device) if mass_ids is not None else None
        fed = 0 if mass_ids is not None else 1  # continuation tokens not fed (the last one, unless mass)
        with torch.inference_mode():
            for batch in self._by_length(prompts):
                ids, mask, pos = self._left_pad([prompts[j] for j in batch])
                res = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                                 logits_to_keep=1)
                first = torch.log_softmax(res.logits[:, -1].float(), dim=-1)
                longer = []  # (pair index, row of its prompt in this batch)
                for r, j in enumerate(batch):
                    for i in groups[prompts[j]]:
                        out[i] = float(first[r, int(pairs[i][1][0])])
                        if len(pairs[i][1]) - fed > 0:
                            longer.append((i, r))
                for chunk in _batches(longer, self.batch_size):
                    rows = torch.tensor([r for _, r in chunk], device=self.device)
                    conts = [list(pairs[i][1]) for i, _ in chunk]
                    width = max(len(c) for c in conts) - fed
                    # Right padding: later pad tokens cannot affect earlier positions.
                    x = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
                    for k, c in enumerate(conts):
                        x[k, :len(c) - fed] = torch.tensor(c[:len(c) - fed])
                    cache = copy.deepcopy(res.past_key_values)
                    cache.reorder_cache(rows)  # gathers (and repeats) the prompts' rows
                    pmask = mask.index_select(0, rows)
                    start = pmask.sum(-1, keepdim=True)
                    cpos = start + torch.arange(width, device=self.device)
                    cmask = torch.cat([pmask, torch.ones((len(chunk), width), dtype=torch.long,
                                                         device=self.device)], dim=-1)
                    logits = self.model(input_ids=x.to(self.device), past_key_values=cache,
                                        attention_mask=cmask, position_ids=cpos, use_cache=True).logits
                    for k, ((i, _), c) in enumerate(zip(chunk, conts)):
                        lp = torch.log_softmax(logits[k, :len(c) - fed].float(), dim=-1)
                        tgt = torch.tensor(c[1:], device=self.device)
                        out[i] += float(lp[:len(c) - 1].gather(-1, tgt[:, None]).sum())
                        if sel is not None:
                            mass[i] = float(torch.logsumexp(lp[len(c) - 1, sel], 0))
        return list(zip(out, mass))

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        torch = self.torch
        from transformers import GenerationConfig

        out: list[Generation | None] = [None] * len(requests)
        groups: dict[Any, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(r.params, []).append(i)
        for params, idx in groups.items():
            greedy = params.temperature <= 0.0
            cfg = GenerationConfig(
                max_new_tokens=params.max_tokens, do_sample=not greedy,
                temperature=None if greedy else params.temperature,
                top_p=None if greedy else params.top_p, top_k=None,
                pad_token_id=self.pad_id, eos_token_id=self.eos_ids,
            )
            for batch in _batches(sorted(idx, key=lambda i: len(requests[i].prompt_ids)), self.batch_size):
                ids, mask, _ = self._left_pad([requests[i].prompt_ids for i in batch])
                if not greedy:
                    torch.manual_seed(params.seed)
                extra = {}
                if params.structured is not None:
                    extra["logits_processor"] = self._grammar_processor(params.structured)
                with torch.inference_mode():
                    gen = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg,
                                              **extra)
                new = gen[:, ids.shape[1]:].cpu().tolist()
                for row, i in enumerate(batch):
                    toks, finish = new[row], "length"
                    for j, t in enumerate(toks):
                        if t in self.eos_ids:
                            toks, finish = toks[:j], "stop"
                            break
                    out[i] = self._decode_generation(toks, finish)
        return [g for g in out if g is not None]

    def _grammar_processor(self, structured: StructuredOutput) -> Any:
        """xgrammar's transformers logits processor for one generate() call (it keeps per-row
        matcher state, so it is made anew each call; the compiled grammar is reused). The
        grammar's stop tokens are this backend's end-of-sequence ids."""
        import xgrammar as xgr
        from transformers import LogitsProcessorList
        from xgrammar.contrib.hf import LogitsProcessor

        if not hasattr(self, "_xgr_compiled"):
            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self.vocab_size,
                                                      stop_token_ids=self.eos_ids)
            self._xgr_compiler, self._xgr_compiled = xgr.GrammarCompiler(info), {}
        compiled = self._xgr_compiled.get(structured.grammar)
        if compiled is None:
            compiled = self._xgr_compiled[structured.grammar] = \
                self._xgr_compiler.compile_grammar(structured.grammar)
        return LogitsProcessorList([LogitsProcessor(compiled)])

    def hidden_states(self, prompts: Sequence[TokenIds], layers: Sequence[int]) -> list[np.ndarray]:
        torch = self.torch
        res: list[np.ndarray] = []
        with torch.inference_mode():
            for p in prompts:
                ids = torch.tensor([list(p)], device=self.device)
                hs = self.model(input_ids=ids, output_hidden_states=True).hidden_states
                res.append(np.stack([hs[l][0].float().cpu().numpy() for l in layers]))
        return res

    # --- steering (see harness.backends.steered) ------------------------------------------
    def check_steering(self, steering: Any) -> None:
        from probes.hooks import steerable_layers

        ok = steerable_layers(self.model)
        bad = sorted(l for l in steering.additions if l not in ok)
        if bad:
            raise BackendError(f"cannot steer at layer ids {bad}: {self.model_name} has steerable "
                               f"layers {ok.start}..{ok.stop - 1}")
        width = int(self.model.config.hidden_size)
        if any(np.asarray(v).shape != (width,) for v in steering.additions.values()):
            raise BackendError(f"steering vectors must have size {width} (hidden size of "
                               f"{self.model_name})")

    @contextmanager
    def steering(self, steering: Any) -> Iterator[None]:
        """Forward hooks add the vectors (probes.hooks.add_to_residual). Positions `generated`:
        only forward passes that extend a non-empty KV cache are steered."""
        from probes.hooks import add_to_residual

        self.check_steering(steering)
        torch = self.torch
        additions = {l: torch.from_numpy(v) for l, v in steering.arrays().items()}
        state = {"on": True}
        handle = None
        if steering.positions == "generated":
            def pre(mod: Any, args: tuple, kwargs: dict) -> None:
                cache = kwargs.get("past_key_values")
                state["on"] = cache is not None and int(cache.get_seq_length()) > 0
            handle = self.model.register_forward_pre_hook(pre, with_kwargs=True)
        try:
            with add_to_residual(self.model, additions, gate=lambda: state["on"]):
                yield
        finally:
            if handle is not None:
                handle.remove()

    def close(self) -> None:
        if not hasattr(self, "model"):  # closed already
            return
        del self.model
        if self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()
