"""Real tokenizers (prepared assets): ids of the paper's words, classes, SentencePiece quirk, CLI."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from harness.models import assets  # noqa: E402
from tokenization import families as fam  # noqa: E402
from tokenization.load import load  # noqa: E402
from tokenization.variants import AMBIGUOUS, MISSING, WHOLE, classify, variants  # noqa: E402

# ids of "evaluation", " evaluation", "Evaluation", "deployment" per family, pinned here (SmolLM2,
# Tekken and Gemma 3 taken from their real tokenizers).
EXPECTED = {
    "qwen3": ([74014], [16460], [82363], [82213]),
    "deepseek-r1": ([71, 44066], [10520], [78880], [928, 11673]),
    "llama3": ([75114], [16865], [83463], [83313]),
    "gpt-oss": ([190831], [21407], [70492], [195280]),
    "gpt2": ([18206, 2288], [12660], [36, 2100, 2288], [2934, 1420, 434]),
    "mistral-v3": ([15965], [29473, 15965], [24991, 10991], [23807]),
    "mistral-tekken": ([1101, 26584], [13664], [104446], [1558, 34170]),
    "smollm2": ([31320], [6523], [44726], [41953]),
}
VOCAB = {"qwen3": 151669, "deepseek-r1": 128815, "llama3": 128256, "gpt-oss": 201088, "gpt2": 50257,
         "mistral-v3": 32768, "mistral-tekken": 131072, "smollm2": 49152, "gemma3": 262144}


def _tok(family: str):
    asset = fam.FAMILIES[family].asset
    if not assets.is_prepared(asset):
        if fam.FAMILIES[family].optional:
            pytest.skip(f"optional asset {asset} not prepared (evalaware assets prepare {asset})")
        assets.prepare(asset)
    return load(family)


_CACHE: dict[str, object] = {}


def tok(family: str):
    if family not in _CACHE:
        _CACHE[family] = _tok(family)
    return _CACHE[family]


@pytest.mark.parametrize("family", sorted(EXPECTED))
def test_paper_word_ids_match_real_tokenizer(family: str) -> None:
    t = tok(family)
    got = tuple(t.encode(s) for s in ("evaluation", " evaluation", "Evaluation", "deployment"))
    assert got == EXPECTED[family]
    assert t.vocab_size == VOCAB[family]


def test_gemma3_if_prepared() -> None:
    t = tok("gemma3")
    assert t.vocab_size == VOCAB["gemma3"]
    ids = t.encode("evaluation")
    assert t.decode(ids) == "evaluation"
    assert [v.first_class for v in variants(t, "evaluation", ["lower"], ["space"])] == [WHOLE]


@pytest.mark.parametrize("family", ["qwen3", "llama3", "gpt2"])
def test_hf_conversion_agrees_with_tiktoken(family: str) -> None:
    """The tokenizer.json built from the quicktok ranks encodes like tiktoken on the same ranks."""
    import tiktoken

    from tokenization.quicktok import read_tiktoken
    d = assets.asset_dir(fam.FAMILIES[family].asset)
    meta = json.loads((d / "family.json").read_text())
    enc = tiktoken.Encoding("x", pat_str=meta["pattern"], mergeable_ranks=read_tiktoken(d / meta["tiktoken"]),
                            special_tokens={})
    text = ("Is this an evaluation or a real deployment?\n  Answer: EVALUATION, tests' 12345 "
            "déploiement — naïve 🙂 <|im_start|> x\t\ty  ")
    assert tok(family).encode(text) == enc.encode_ordinary(text)


def test_deepseek_and_gpt2_prefixes_are_ambiguous_qwen_whole() -> None:
    ds = {(v.case, v.context): v for v in variants(tok("deepseek-r1"), "evaluation")}
    assert ds[("lower", "bare")].first_id == 71 and ds[("lower", "bare")].first_token == "e"
    assert ds[("lower", "bare")].first_class == AMBIGUOUS
    # 'e' starts a thousand vocabulary tokens and hundreds of common words
    assert ds[("lower", "bare")].n_vocab_sharing > 500 and ds[("lower", "bare")].n_words_sharing > 500
    g = {(v.case, v.context): v for v in variants(tok("gpt2"), "evaluation")}
    assert g[("title", "bare")].first_token == "E" and g[("title", "bare")].first_class == AMBIGUOUS
    assert g[("title", "bare")].n_words_sharing > 500
    assert g[("lower", "space")].first_class == WHOLE
    q = {(v.case, v.context): v for v in variants(tok("qwen3"), "evaluation")}
    assert q[("lower", "bare")].ids == (74014,) and q[("lower", "bare")].first_class == WHOLE
    assert q[("lower", "assistant")].ids == (74014,)  # after '<|im_start|>assistant\n'


def test_assistant_variants_follow_chat_templates() -> None:
    # DeepSeek-R1's template ends with '<｜Assistant｜>': the answer starts unspaced, with 'e'
    assert [v.ids for v in variants(tok("deepseek-r1"), "evaluation", ["lower"], ["assistant"])] == [(71, 44066)]
    # mistral-common encodes the answer with SentencePiece's dummy prefix: '▁evaluation'
    assert [v.ids for v in variants(tok("mistral-v3"), "evaluation", ["lower"], ["assistant"])] == [(15965,)]
    # GPT-2 has no chat template: no assistant variant
    assert not variants(tok("gpt2"), "evaluation", ["lower"], ["assistant"])


@pytest.mark.parametrize("family", ["mistral-v3", "gemma3"])
def test_sentencepiece_leading_space_quirk(family: str) -> None:
    t = tok(family)
    if family == "mistral-v3":  # the quirk exists: encoding " evaluation" alone gives a lone '▁'
        raw = t.encode(" evaluation")
        assert t.token_text(raw[0]) == " " and classify(t, raw, " evaluation") == MISSING
    for w in ("evaluation", "test", "real", "deployment"):
        for v in variants(t, w):
            assert all(tt is not None and tt.strip() for tt in v.tokens), (v.text, v.tokens)
            assert v.first_class != MISSING
            assert v.text.strip() == v.text.strip().lstrip() and v.text.strip().lower() == w
    sp = variants(t, "evaluation", ["lower"], ["space"])[0]
    assert sp.text == " evaluation" and len(sp.ids) == 1


@pytest.mark.parametrize("family", sorted(EXPECTED))
def test_variants_spell_their_text(family: str) -> None:
    t = tok(family)
    for v in variants(t, "Deployment"):
        assert t.decode(v.ids) == v.text
        assert v.text.strip() in ("deployment", "Deployment", "DEPLOYMENT")
        assert (v.context == "space") == v.text.startswith(" ") or v.context == "assistant"


def test_cli_inspect_json_and_table() -> None:
    from click.testing import CliRunner

    from evalaware.tokens import tokens
    r = CliRunner().invoke(tokens, ["inspect", "--tokenizer", "deepseek-r1", "--tokenizer", "qwen3",
                                    "--words", "evaluation", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    first = {(v["case"], v["context"]): v for v in data["deepseek-r1"]["evaluation"]}
    assert first[("lower", "bare")]["first_id"] == 71 and first[("lower", "bare")]["first_class"] == AMBIGUOUS
    assert data["qwen3"]["evaluation"][0]["ids"] == [74014]
    r = CliRunner().invoke(tokens, ["inspect", "--tokenizer", "gpt2", "--tokenizer", "qwen3", "--words", "evaluation"])
    assert r.exit_code == 0 and "E|val|uation [ambig" in r.output and "gpt2" in r.output.splitlines()[0]


def test_load_by_path_kinds(tmp_path) -> None:
    d = assets.asset_dir("tok-gpt2")
    assert load(d / "tokenizer.json").encode("evaluation") == [18206, 2288]
    t = load(d / "gpt2.tiktoken")  # sha256 = tiktoken's r50k/gpt2 ranks -> GPT-2's regex
    assert t.encode(" evaluation") == [12660]
    assert t.encode(" 12345") == load("gpt2").encode(" 12345")  # digits: GPT-2 groups them, cl100k by 3
    assert load(assets.asset_dir("smollm2")).has_chat_template
    with pytest.raises(Exception, match="unknown tokenizer"):
        load("no-such-family")
