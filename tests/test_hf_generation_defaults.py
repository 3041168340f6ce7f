"""HF generation obeys the request alone (harness/backends/hf/backend.py `_neutral_defaults`):
a checkpoint's generation defaults are set aside and sampling is not cut to transformers' default
top 50 tokens, as on vLLM given SamplingParams; the generation cache keys say so."""

from __future__ import annotations

import json
import shutil

from harness.backends.base import GenerationRequest, SamplingParams
from harness.backends.cache import call_key
from harness.backends.hf.backend import HFBackend, _generate, _generation_config

PROMPT = (1, 504, 3365, 314, 253, 1234, 28)


def _with_defaults(src, dst, **defaults):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "generation_config.json").read_text()) if (dst / "generation_config.json").exists() else {}
    (dst / "generation_config.json").write_text(json.dumps({**cfg, **defaults}))
    return dst


def _tokens(b: HFBackend, params: list[SamplingParams]) -> list[tuple[int, ...]]:
    return [tuple(g.token_ids) for g in b.generate([GenerationRequest(PROMPT, p) for p in params])]


def test_a_checkpoints_generation_defaults_do_not_change_what_a_request_gets(tiny_model_dir, tmp_path):
    plain = HFBackend(str(tiny_model_dir), batch_size=1)
    odd = HFBackend(str(_with_defaults(tiny_model_dir, tmp_path / "odd", top_k=1, repetition_penalty=50.0,
                                       no_repeat_ngram_size=1, do_sample=True, temperature=0.3)), batch_size=1)
    try:
        greedy = [SamplingParams(max_tokens=12)]
        assert _tokens(odd, greedy) == _tokens(plain, greedy)  # the penalty and n-gram ban would change it
        sampled = [SamplingParams(max_tokens=6, temperature=1.0, seed=s) for s in range(6)]
        assert _tokens(odd, sampled) == _tokens(plain, sampled)  # top-k 1 would make every draw greedy
    finally:
        plain.close()
        odd.close()


def test_sampling_draws_from_the_whole_distribution(hf_tiny):
    """A random-init model's first-token distribution is nearly flat over 49k tokens: 200 draws
    at temperature 1 (the backend's own generation config and call) give far more than 50
    distinct tokens, which a top-50 cut cannot."""
    cfg = _generation_config(SamplingParams(max_tokens=1, temperature=1.0), hf_tiny.pad_id, hf_tiny.eos_ids)
    cfg.num_return_sequences = 200
    draws = _generate(hf_tiny.model, [PROMPT], hf_tiny.pad_id, cfg, seed=0)
    assert len(draws) == 200 and len({d[0] for d in draws}) > 60


def test_hf_generations_are_keyed_apart_from_those_made_before(hf_tiny):
    """The tag is in the identity, so in every call key and in the run's recorded model: a run
    or cache made before is neither resumed nor reused with these generations."""
    assert hf_tiny.identity["generation"] == HFBackend.generation_tag
    payload = {"prompt": list(PROMPT), "params": SamplingParams(temperature=1.0).to_dict()}
    before = {k: v for k, v in hf_tiny.identity.items() if k != "generation"}
    assert call_key(hf_tiny.identity, "generate", payload) != call_key(before, "generate", payload)
