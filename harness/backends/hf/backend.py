"""Hugging Face transformers backend: CPU or GPU, batched with padding, exact log-softmax.

This is the reference implementation for log-probabilities and activations.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

from harness.backends.declare import engine_identity
from harness.backends.hooks import add_to_residual, capture_pooled, num_layers, steerable_layers

from harness.models.assets import resolve_model
from harness.core.errors import BackendError
from harness.models.fingerprint import local_model_path, model_identity
from harness.backends.base import (Backend, DrawnAnswer, Generation, GenerationRequest, HiddenLayout,
                                   StructuredOutput, TokenIds)
from harness.backends.specs import HF
from harness.backends.hf.batches import left_pad
from harness.core.batching import by_length
from harness.backends.hf.teacher import PromptBatch, run_prompts, teacher_force

_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}

CONVENTION = ("hf: id i < L is the residual stream entering block i (0 = embeddings); "
              "id L is the last block's output after the final norm")


class HFBackend(Backend):
    """transformers `AutoModelForCausalLM`. `dtype="auto"`: float32 on CPU, bfloat16 on CUDA.
    `engine_args` go to ``from_pretrained`` as they are (e.g. ``attn_implementation``)."""

    kind = "hf"
    capabilities = HF.capabilities  # what it takes and can do: its spec (harness.backends.specs)
    generation_tag = "request-only/v2"  # in the identity: no run or cache mixes it with earlier generation

    def __init__(self, model: str, dtype: str = "auto", device: str | None = None,
                 batch_size: int = 8, trust_remote_code: bool = False,
                 tokenizer: str | None = None, revision: str | None = None,
                 keep_kv_bytes: int = 1 << 30, engine_args: Mapping[str, Any] | None = None) -> None:
        self.model_name = model
        path = local_model_path(model, revision)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if dtype == "auto":
            dtype = "bfloat16" if self.device.startswith("cuda") else "float32"
        if dtype not in _DTYPES:
            raise BackendError(f"unknown dtype {dtype!r}; use one of {', '.join(sorted(_DTYPES))}")
        self.dtype = _DTYPES[dtype]
        self.tokenizer, self.model = _load(model, path, resolve_model(tokenizer) if tokenizer else path,
                                           self.dtype, self.device, trust_remote_code, engine_args or {})
        self.batch_size = batch_size
        self.settings = {"batch_size": batch_size, **({"engine_args": dict(engine_args)}
                                                      if engine_args else {})}
        # The KV caches of the last first-token call, for the continuations asked right after
        # (tokenizer-aware scoring): at most `keep_kv_bytes`; 0 keeps none.
        self.keep_kv_bytes = keep_kv_bytes
        self._kept: dict[tuple[int, ...], tuple[PromptBatch, int]] = {}
        self._kept_under: Any = None  # the steering key the kept caches were computed under
        self._steer_key: Any = None
        self.pad_id, self.eos_ids = _pad_and_eos(self.tokenizer, self.model)
        self.model_info = model_identity(path)
        if revision:  # the snapshot's directory was loaded: name the model and revision asked for
            self.model_info.update(model=model, revision=revision)
        self._identity = {"backend": "hf", "weights_sha256": self.model_info["weights_sha256"],
                          "dtype": self.dtype, "generation": self.generation_tag, **engine_identity(engine_args)}

    @property
    def identity(self) -> dict[str, Any]:
        return self._identity

    @classmethod
    def trainable(cls, path: str) -> tuple[Any, Any]:
        return _trainable(path)

    @classmethod
    def trainable_answers(cls, tokenizer: Any, model: Any, prompts: Sequence[TokenIds], max_tokens: int,
                          samples: int = 0, seed: int = 0) -> list[list[DrawnAnswer]]:
        """The greedy answer or `samples` temperature-1 samples: :func:`_drawn_answers`."""
        return _drawn_answers(tokenizer, model, prompts, max_tokens, samples, seed)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    def left_pad(self, seqs: Sequence[TokenIds]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-padded (ids, attention mask, positions) on this model's device
        (:func:`harness.backends.hf.batches.left_pad`)."""
        return left_pad(seqs, self.pad_id, self.device)

    # --- contract -------------------------------------------------------------------------
    def next_token_logprobs(self, prompts: Sequence[TokenIds],
                            token_ids: Sequence[int] | None = None) -> np.ndarray:
        """One forward per batch of distinct prompts; their KV caches are kept (up to
        `keep_kv_bytes`) so that `loglikelihood` / `continuation_scores` on the same prompts right
        after do not run them again."""
        width = len(token_ids) if token_ids is not None else self.vocab_size
        out = np.zeros((len(prompts), width), dtype=np.float32)
        sel = torch.tensor(list(token_ids), device=self.device) if token_ids is not None else None
        where: dict[tuple[int, ...], list[int]] = {}
        for i, p in enumerate(prompts):
            where.setdefault(tuple(int(t) for t in p), []).append(i)
        self._kept, used = {}, 0
        for pb in run_prompts(self.model, list(where), self.batch_size, self.pad_id, self.device):
            lp = pb.first if sel is None else pb.first[:, sel]
            rows = lp.cpu().numpy()
            for r, p in enumerate(pb.prompts):
                out[where[p]] = rows[r]
            used += pb.nbytes()
            if used <= self.keep_kv_bytes:
                self._kept.update({p: (pb, r) for r, p in enumerate(pb.prompts)})
        self._kept_under = self._steer_key
        return out

    def loglikelihood(self, pairs: Sequence[tuple[TokenIds, TokenIds]]) -> list[float]:
        """Each distinct prompt runs once, then only its continuations
        (:mod:`harness.backends.hf.teacher`)."""
        return [ll for ll, _ in self._teacher_force(pairs, None)]

    def continuation_scores(self, pairs: Sequence[tuple[TokenIds, TokenIds]],
                            token_ids: Sequence[int]) -> list[tuple[float, float]]:
        """Same pass as `loglikelihood`, with the whole continuation fed so the distribution
        after its last token gives the mass of `token_ids` at no extra forward."""
        return self._teacher_force(pairs, list(token_ids))

    def _teacher_force(self, pairs: Sequence[tuple[TokenIds, TokenIds]],
                       mass_ids: list[int] | None) -> list[tuple[float, float]]:
        known = self._kept if self._kept_under == self._steer_key else {}
        return teacher_force(self.model, pairs, mass_ids, self.batch_size, self.pad_id, self.device,
                             known)

    def forget_prompts(self) -> None:
        """Drop the kept KV caches (see `next_token_logprobs`)."""
        self._kept = {}

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        from transformers import LogitsProcessorList  # heavy: ~2 s to import

        self.forget_prompts()
        out: list[Generation | None] = [None] * len(requests)
        groups: dict[Any, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(r.params, []).append(i)
        for params, idx in groups.items():
            greedy = params.temperature <= 0.0
            cfg = _generation_config(params, self.pad_id, self.eos_ids)
            for batch in by_length([requests[i].prompt_ids for i in idx], self.batch_size):
                batch = [idx[b] for b in batch]
                extra = {}
                if params.structured is not None:
                    extra["logits_processor"] = LogitsProcessorList(self._grammar(params.structured))
                new = _generate(self.model, [requests[i].prompt_ids for i in batch], self.pad_id, cfg,
                                None if greedy else params.seed, **extra)
                for row, i in enumerate(batch):
                    out[i] = self._decode_generation(*_until_eos(new[row], self.eos_ids))
        return [g for g in out if g is not None]

    def _grammar(self, structured: StructuredOutput) -> list[Any]:
        if not hasattr(self, "_grammars"):
            from harness.backends.hf.grammar import GrammarProcessors  # xgrammar takes ~5 s to import

            self._grammars = GrammarProcessors(self.tokenizer, self.vocab_size, self.eos_ids)
        return self._grammars.processors(structured)

    def hidden_states(self, prompts: Sequence[TokenIds], layers: Sequence[int]) -> list[np.ndarray]:
        """Residual stream per prompt, (len(layers), n_tokens, hidden); layer i is HF's
        ``hidden_states[i]`` (0 = embeddings). One prompt at a time (no padding)."""
        res: list[np.ndarray] = []
        with torch.inference_mode():
            for p in prompts:
                ids = torch.tensor([list(p)], device=self.device)
                hs = self.model(input_ids=ids, output_hidden_states=True).hidden_states
                res.append(np.stack([hs[l][0].float().cpu().numpy() for l in layers]))
        return res

    # --- steering (see harness.backends.steered) ------------------------------------------
    def check_steering(self, steering: Any) -> None:
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
        """Forward hooks add the vectors (harness.backends.hooks.add_to_residual). Positions `generated`:
        only forward passes that extend a non-empty KV cache are steered."""
        self.check_steering(steering)
        additions = {l: torch.from_numpy(v) for l, v in steering.arrays().items()}
        before, self._steer_key = self._steer_key, steering.key()
        state, handle = _gate(self.model, steering.positions == "generated")
        try:
            with add_to_residual(self.model, additions, gate=lambda: state["on"]):
                yield
        finally:
            self._steer_key = before
            if handle is not None:
                handle.remove()

    @property
    def context_length(self) -> int | None:
        cfg = self.model.config
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        n = getattr(cfg, "max_position_embeddings", None)
        return int(n) if n else None

    def hidden_layout(self) -> HiddenLayout:
        return HiddenLayout(num_layers(self.model), int(self.model.config.hidden_size), CONVENTION)

    def pooled_hidden_states(self, seqs: Sequence[TokenIds], layers: Sequence[int],
                             weights: Sequence[torch.Tensor]) -> torch.Tensor:
        """Forward hooks sum each layer's weighted tokens in place (one left-padded batch)."""
        ids, mask, pos = self.left_pad(seqs)
        width = ids.shape[1]
        w = torch.stack([torch.nn.functional.pad(wi, (width - wi.shape[-1], 0)) for wi in weights])
        return capture_pooled(self.model, ids, mask, pos, layers, w)

    def close(self) -> None:
        if not hasattr(self, "model"):  # closed already
            return
        self.forget_prompts()
        del self.model
        if self.device.startswith("cuda"):
            torch.cuda.empty_cache()


def _load(model: str, path: str, tokenizer: str, dtype: str, device: str, trust_remote_code: bool,
          engine_args: Mapping[str, Any]) -> tuple[Any, Any]:
    """(tokenizer, model in eval mode on `device`); `engine_args` go to ``from_pretrained``, and
    one transformers does not know is refused by name."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: ~2 s to import

    try:
        tok = AutoTokenizer.from_pretrained(tokenizer, trust_remote_code=trust_remote_code)
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype),
                                                  trust_remote_code=trust_remote_code, **engine_args)
    except OSError as e:
        raise BackendError(f"cannot load model {model!r}: {e}") from e
    except TypeError as e:  # transformers hands a keyword it does not know to the model's class
        bad = [k for k in engine_args if repr(k) in str(e)]
        if not bad:
            raise
        raise BackendError(f"-M {', '.join(bad)}: not an engine argument of "
                           f"{HF.engine_args_to} ({e})") from None
    return tok, lm.to(device).eval()


def _pad_and_eos(tokenizer: Any, model: Any) -> tuple[int, list[int]]:
    """The padding id (the tokenizer's, else its end of sequence, else 0) and the ids that end a
    generation (the model's and the tokenizer's)."""
    pad = tokenizer.pad_token_id
    if pad is None:
        pad = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    eos = model.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None:
        eos.append(tokenizer.eos_token_id)
    return pad, sorted(set(eos))


def _generation_config(params: Any, pad_id: int, eos_ids: list[int]) -> Any:
    """transformers' GenerationConfig of `params` (greedy at temperature 0). Sampling draws from
    the whole distribution, as vLLM does: top-k 0, since an unset top-k is filled with
    transformers' global default of 50."""
    from transformers import GenerationConfig  # heavy: ~2 s to import

    greedy = params.temperature <= 0.0
    return GenerationConfig(max_new_tokens=params.max_tokens, do_sample=not greedy,
                            temperature=None if greedy else params.temperature,
                            top_p=None if greedy else params.top_p, top_k=None if greedy else 0,
                            pad_token_id=pad_id, eos_token_id=eos_ids)


#: The special token ids a checkpoint's generation defaults keep (:func:`_neutral_defaults`).
_TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def _neutral_defaults(model: Any) -> None:
    """Decision: a checkpoint's ``generation_config.json`` defaults (sampling settings such as
    Qwen's top-k 20, a repetition penalty, forced or suppressed tokens) are not applied. transformers
    fills every setting a request leaves unset from them, vLLM ignores them when given
    ``SamplingParams``; so the request's own parameters alone decide, on every engine. Only the
    special token ids are kept."""
    from transformers import GenerationConfig  # heavy: ~2 s to import

    g = model.generation_config
    model.generation_config = GenerationConfig(**{k: v for k in _TOKEN_IDS if (v := getattr(g, k, None)) is not None})


def _generate(model: Any, prompts: Sequence[TokenIds], pad_id: int, config: Any, seed: int | None = None,
              **extra: Any) -> list[list[int]]:
    """The backend's one ``model.generate`` call: `prompts` as one left-padded batch with its
    attention mask (the positions follow it), seeded by `seed` (None: not seeded: greedy); the new
    ids of each returned sequence (``config.num_return_sequences`` per prompt, consecutive) as
    drawn, padding after an end id included."""
    ids, mask, _ = left_pad(prompts, pad_id, model.device)
    _neutral_defaults(model)
    if seed is not None:
        torch.manual_seed(seed)
    with torch.inference_mode():
        gen = model.generate(input_ids=ids, attention_mask=mask, generation_config=config, **extra)
    return gen[:, ids.shape[1]:].cpu().tolist()


def _trainable(path: str) -> tuple[Any, Any]:
    """(tokenizer, float32 model) of `path` for training (an organism build)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: ~2 s to import

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)  # before the model, as organisms were always built
        return tokenizer, AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except (OSError, ValueError) as e:  # no model there (transformers says so with either)
        raise BackendError(f"cannot load model {path!r}: {e}") from e


def _drawn_answers(tokenizer: Any, model: Any, prompts: Sequence[TokenIds], max_tokens: int,
                   samples: int, seed: int) -> list[list[DrawnAnswer]]:
    """Through the backend's one generation call (:func:`_generate`), with its padding and end
    ids: the greedy answer, or `samples` temperature-1 samples with no top-k or top-p
    truncation (``GenerationConfig``'s unset top-k would be filled with transformers' 50)."""
    from transformers import GenerationConfig  # heavy: ~2 s to import

    pad, eos = _pad_and_eos(tokenizer, model)
    how = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0) if samples else dict(do_sample=False)
    k = max(1, samples)
    cfg = GenerationConfig(max_new_tokens=max_tokens, num_return_sequences=k, pad_token_id=pad,
                           eos_token_id=eos, **how)
    devices = [model.device] if model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # the caller's random state is left as it was
        rows = _generate(model, prompts, pad, cfg, seed if samples else None)
    return [[_through_eos(r, eos) for r in rows[i * k:(i + 1) * k]] for i in range(len(prompts))]


def _through_eos(toks: list[int], eos_ids: Sequence[int]) -> DrawnAnswer:
    """The generated ids up to and including the first end-of-sequence id (all where none)."""
    for j, t in enumerate(toks):
        if t in eos_ids:
            return DrawnAnswer(tuple(toks[:j + 1]), True)
    return DrawnAnswer(tuple(toks), False)


def _until_eos(toks: list[int], eos_ids: Sequence[int]) -> tuple[list[int], str]:
    """The generated ids before the first end-of-sequence id, and why generation stopped."""
    for j, t in enumerate(toks):
        if t in eos_ids:
            return toks[:j], "stop"
    return toks, "length"


def _gate(model: Any, generated_only: bool) -> tuple[dict[str, bool], Any]:
    """The steering gate's state and, for `generated_only`, the pre-hook that turns it on only
    in forward passes that extend a non-empty KV cache (remove it after)."""
    state = {"on": True}
    if not generated_only:
        return state, None

    def pre(mod: Any, args: tuple, kwargs: dict) -> None:
        cache = kwargs.get("past_key_values")
        state["on"] = cache is not None and int(cache.get_seq_length()) > 0
    return state, model.register_forward_pre_hook(pre, with_kwargs=True)
