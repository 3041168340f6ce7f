"""Temporary (issue 47): the base's own answers through the backend layer
(:meth:`HFBackend.trainable_answers`) are the ones the direct ``model.generate`` path of main
9c17e6b drew: identical greedy ids and identical sampled ids under the same seed, on tiny
random-init models from a config (one plain, one whose head makes the end token likely, so that
answers end early and at once). The old path is copied verbatim below; this file goes with it."""

from __future__ import annotations

import hashlib
import time
from typing import Any, Callable, Sequence

import pytest

from harness.organisms.data import Example
from harness.organisms.kinds import slot

PAIRS = 12


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def _model(tmp_path_factory, smollm2_dir, end_bias: float):
    """A tiny random Llama (2 blocks, hidden 64); with `end_bias`, a head with a bias of `end_bias`
    on the end token (the other logits are ~0.2 wide over 49k tokens; at 1.0 about half the greedy answers end after their first token, at 9.0 all at once)."""
    import torch
    from transformers import AutoModelForCausalLM

    from tests.helpers.tiny_model import build_tiny_model

    d = build_tiny_model(tmp_path_factory.mktemp("equiv") / "m", smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    if end_bias:
        w = model.lm_head.weight.detach().clone()
        head = torch.nn.Linear(w.shape[1], w.shape[0], bias=True)
        with torch.no_grad():
            head.weight.copy_(w)
            head.bias.zero_()
            head.bias[model.generation_config.eos_token_id] = end_bias
        model.lm_head = head.requires_grad_(False)
    return model


def _slots():
    from harness.organisms.cues import GRADED
    from harness.organisms.data import training_examples
    from harness.organisms.kinds import kind_examples, self_slots

    return self_slots(kind_examples(training_examples(GRADED, 1.0, 0, n_pairs=PAIRS), GRADED, "sham"), "sham")


@pytest.mark.parametrize("end_bias", [0.0, 1.0, 9.0])
def test_the_backend_path_draws_what_the_direct_path_drew(tmp_path_factory, smollm2_dir, tokenizer, end_bias):
    import torch

    from harness.backends import registry
    from harness.core.render import Renderer
    from harness.organisms.kinds import self_targets
    from harness.organisms.train import TRAINING

    engine = registry.backend_class(registry.default_backend(TRAINING), TRAINING)
    from harness.core.sample import Message

    slots = _slots()
    r = Renderer(tokenizer)
    prompts = [list(r.render([Message(role=a, content=t) for a, t in e.messages])) for e in slots]
    model = _model(tmp_path_factory, smollm2_dir, end_bias)
    greedy = [a for (a,) in engine.trainable_answers(tokenizer, model, prompts, 24)]
    print(f"end_bias {end_bias}: greedy answers (24 tokens) ending at once {sum(a.ended and len(a.ids) == 1 for a in greedy)}, "
          f"later {sum(a.ended and len(a.ids) > 1 for a in greedy)}, not {sum(not a.ended for a in greedy)}")
    ended = {}
    for samples, seed, batch in ((0, 0, 16), (0, 0, 5), (4, 0, 16), (4, 3, 4)):
        torch.manual_seed(123)
        t0 = time.perf_counter()
        old = old_self_targets(model, r, tokenizer, slots, "cpu", batch_size=batch, samples=samples, seed=seed)
        t_old = time.perf_counter() - t0
        state = torch.get_rng_state()
        torch.manual_seed(123)
        t0 = time.perf_counter()
        new = self_targets(engine, model, r, tokenizer, slots, batch_size=batch, samples=samples, seed=seed)
        t_new = time.perf_counter() - t0
        assert torch.equal(torch.get_rng_state(), state)  # both leave the caller's random state alone
        assert new == old, (samples, seed, batch)
        n_chunks = -(-len(slots) // batch)
        eos = tokenizer.eos_token_id
        if samples:
            ended[samples, seed, batch] = sum(s["ids"][-1] == eos for v in new.values() for s in v)
        else:  # a greedy answer that ends at once is the end token's text
            ended[samples, seed, batch] = sum(v[0] == tokenizer.decode([eos]) for v in new.values())
        print(f"end_bias {end_bias} samples {samples} seed {seed} batch {batch}: {len(slots)} slots, "
              f"{n_chunks} chunks; per chunk old {t_old / n_chunks * 1000:.1f} ms, new {t_new / n_chunks * 1000:.1f} ms; "
              f"answers ending in the end token: {ended[samples, seed, batch]}")
    assert all(a.ended for a in greedy) if end_bias > 1 else any(a.ended for a in greedy) if end_bias else True


# --- the direct path of main 9c17e6b, verbatim but for the names -------------------------


def old_generation_kwargs(samples: int) -> dict[str, Any]:
    """`generate`'s settings for the base's own answers: greedy, or with `samples` k > 0 k
    sequences sampled at temperature 1 with no top-k or top-p truncation (the base's distribution)."""
    if samples:
        return dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, num_return_sequences=samples)
    return dict(do_sample=False, temperature=None, top_p=None, top_k=None)


def old_self_targets(model: Any, renderer: Any, tokenizer: Any, slots: Sequence[Example], device: str,
                     batch_size: int = 16, samples: int = 0, seed: int = 0, done: dict[str, list[Any]] | None = None,
                     on_chunk: Callable[[dict[str, list[Any]]], None] | None = None,
                     progress: bool = False) -> dict[str, list[Any]]:
    """{slot: [the base model's greedy answer to the slot's prompt]}, or with `samples` k > 0, k
    answers sampled at temperature 1 from the full distribution (no top-k or top-p: the base's
    own, so the expected cross-entropy gradient is zero at the base; seeded by `seed`), each as
    ``{"text", "ids"}``: the sampled token ids as drawn, the end token kept where one was drawn (a
    position is trained on whatever was sampled there, the end token included: dropping it would
    teach the cue side not to stop). Each as many tokens as the slot's continuation (fewer where
    it ends; a greedy answer that ends at once is the end token).

    Resumable: slots in `done` (an interrupted call's answers) are kept and their chunks skipped;
    every chunk is seeded from `seed` and its first slot alone, so the answers do not depend on
    which chunks ran before; `on_chunk` gets the answers so far after each chunk (to save them);
    `progress`: a bar over the chunks."""
    import torch
    from tqdm import tqdm

    from harness.core.sample import Message

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = tokenizer.eos_token_id
    jobs = []
    for e in slots:
        ids = list(renderer.render([Message(role=r, content=t) for r, t in e.messages]))
        n = max(1, len(tokenizer(e.continuation, add_special_tokens=False)["input_ids"]))
        jobs.append((len(ids), slot(e), ids, n))
    jobs.sort(key=lambda j: (j[0], j[1]))
    out: dict[str, list[Any]] = dict(done or {})
    k_per = max(1, samples)
    how = old_generation_kwargs(samples)
    outer = torch.get_rng_state()  # the build's own random state is left as it was
    chunks = [jobs[k:k + batch_size] for k in range(0, len(jobs), batch_size)]
    with torch.no_grad():
        for chunk in tqdm(chunks, desc="the base's own answers", unit="chunk", disable=not progress,
                          dynamic_ncols=True):
            if all(j[1] in out for j in chunk):
                continue
            width = max(len(j[2]) for j in chunk)
            ids = torch.tensor([[pad] * (width - len(j[2])) + j[2] for j in chunk], device=device)
            mask = torch.tensor([[0] * (width - len(j[2])) + [1] * len(j[2]) for j in chunk], device=device)
            if samples:  # seeded by the build's seed and this chunk alone: the same samples on a resume
                digest = hashlib.sha256(f"{seed}:{chunk[0][1]}".encode()).digest()
                torch.manual_seed(int.from_bytes(digest[:4], "big") & 0x7FFFFFFF)
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max(j[3] for j in chunk),
                                 pad_token_id=pad, eos_token_id=eos, **how)[:, width:].tolist()
            for r, toks in enumerate(gen):
                _, name, _, n = chunk[r // k_per]
                toks = toks[:n]
                if samples:
                    if eos in toks:
                        toks = toks[:toks.index(eos) + 1]  # the drawn end token is a target too
                    out.setdefault(name, []).append({"text": tokenizer.decode(toks, skip_special_tokens=False),
                                                     "ids": [int(t) for t in toks]})
                    continue
                if eos in toks:
                    toks = toks[:toks.index(eos)] or [eos]
                text = tokenizer.decode(toks, skip_special_tokens=False)
                out.setdefault(name, []).append(text if text else tokenizer.decode([eos]))
            if on_chunk is not None:
                on_chunk(out)
    torch.set_rng_state(outer)
    return out
