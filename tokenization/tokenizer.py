"""One tokenizer interface over HF ``tokenizers``, tiktoken encodings and mistral-common.

Everything the target-word analysis needs: encode text without adding special tokens, the exact
bytes of a single token (leading space kept, unlike ``decode([id])`` on SentencePiece models),
vocabulary iteration, and the token ids that open an assistant turn in the model's chat template.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from functools import cached_property
from pathlib import Path
from typing import Any, Sequence

from jinja2.sandbox import ImmutableSandboxedEnvironment

Message = dict[str, str]


class Tokenizer(ABC):
    """A loaded tokenizer. ``name`` is the family or path it was loaded from."""

    name: str
    kind: str  # the library that reads it: "tokenizers" | "tiktoken" | "mistral"

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of `text` as plain text: no BOS/EOS added, special-token strings not parsed."""

    @abstractmethod
    def token_bytes(self, token_id: int) -> bytes | None:
        """The exact bytes a single token stands for (a leading space kept); None for special /
        control tokens."""

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids (including special tokens)."""

    @abstractmethod
    def render_chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int] | None:
        """Token ids of a chat rendered with the model's template, or None if it has none."""

    @property
    def unk_id(self) -> int | None:
        return None

    def decode(self, ids: Sequence[int]) -> str:
        """Text of a token sequence exactly as the tokens spell it (special tokens dropped)."""
        return b"".join(self.token_bytes(i) or b"" for i in ids).decode("utf-8", errors="replace")

    def token_text(self, token_id: int) -> str | None:
        """Text of one token, or None for special tokens and incomplete UTF-8 byte pieces."""
        b = self.token_bytes(token_id)
        if b is None:
            return None
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def is_special(self, token_id: int) -> bool:
        return self.token_bytes(token_id) is None

    @cached_property
    def vocab_texts(self) -> list[str | None]:
        """``token_text`` of every id (cached)."""
        return [self.token_text(i) for i in range(self.vocab_size)]

    @cached_property
    def has_chat_template(self) -> bool:
        return self.render_chat([{"role": "user", "content": "Hi"}]) is not None

    def encode_after(self, context: str, text: str) -> list[int] | None:
        """Ids of `text` when it follows `context`: ids(context+text) minus ids(context), or None
        if the tokens merge across the boundary."""
        a, b = self.encode(context), self.encode(context + text)
        return b[len(a):] if b[:len(a)] == a else None

    def assistant_ids(self, text: str) -> list[int] | None:
        """Ids of `text` as the first text of an assistant turn in the chat template; None when
        there is no template or the text merges with the template's last token."""
        return None


# --- Jinja chat templates ----------------------------------------------------------------------


class JinjaChat:
    """Chat rendering for tokenizers whose template is a Jinja string (HF convention)."""

    chat_template: str | None
    bos_token: str | None
    eos_token: str | None
    template_kwargs: dict[str, Any]
    hf: Any = None

    def encode_with_specials(self, text: str) -> list[int]:
        raise NotImplementedError

    def render_text(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str | None:
        if self.hf is not None and self.chat_template:
            return self.hf.apply_chat_template(list(messages), tokenize=False,
                                               add_generation_prompt=add_generation_prompt,
                                               **self.template_kwargs)
        if not self.chat_template:
            return None
        def raise_exception(msg: str) -> None:
            raise ValueError(msg)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "", eos_token=self.eos_token or "", **self.template_kwargs)

    def render_chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int] | None:
        text = self.render_text(messages, add_generation_prompt)
        return None if text is None else self.encode_with_specials(text)

    def assistant_ids(self, text: str) -> list[int] | None:
        prompt = self.render_text([{"role": "user", "content": "Hi"}])
        if prompt is None:
            return None
        a, b = self.encode_with_specials(prompt), self.encode_with_specials(prompt + text)
        return b[len(a):] if b[:len(a)] == a else None


# --- HF tokenizers -----------------------------------------------------------------------------

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _byte_decoder() -> dict[str, int]:
    # GPT-2's bytes_to_unicode, inverted
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class HFTokenizer(JinjaChat, Tokenizer):
    """A ``tokenizers.Tokenizer`` (tokenizer.json) with an optional Jinja chat template."""

    kind = "tokenizers"

    def __init__(self, tk: Any, name: str, chat_template: str | None = None,
                 bos_token: str | None = None, eos_token: str | None = None,
                 template_kwargs: dict[str, Any] | None = None, hf_tokenizer: Any = None) -> None:
        self.tk, self.name = tk, name
        self.chat_template, self.bos_token, self.eos_token = chat_template, bos_token, eos_token
        self.template_kwargs = template_kwargs or {}
        self.hf = hf_tokenizer  # a transformers tokenizer when wrapped from a backend
        self._special = {i for i, t in tk.get_added_tokens_decoder().items() if t.special}
        self._unk = getattr(tk.model, "unk_token", None)
        dec = tk.decoder.__getstate__().decode() if tk.decoder is not None else ""
        self._byte_level = '"ByteLevel"' in dec
        self._metaspace = "\u2581" in dec or '"Metaspace"' in dec
        self._bd = _byte_decoder()
        self._pieces = {i: p for p, i in tk.get_vocab(with_added_tokens=True).items()}

    @classmethod
    def from_transformers(cls, tok: Any, name: str | None = None) -> "HFTokenizer":
        """Wrap a transformers fast tokenizer (e.g. ``backend.tokenizer``)."""
        return cls(tok.backend_tokenizer, name or getattr(tok, "name_or_path", "transformers"),
                   chat_template=getattr(tok, "chat_template", None), bos_token=tok.bos_token,
                   eos_token=tok.eos_token, hf_tokenizer=tok)

    @property
    def vocab_size(self) -> int:
        return max(self.tk.get_vocab_size(with_added_tokens=True), max(self._pieces) + 1)

    @property
    def unk_id(self) -> int | None:
        return self.tk.token_to_id(self._unk) if self._unk else None

    def encode(self, text: str) -> list[int]:
        self.tk.encode_special_tokens = True  # special-token strings are plain text here
        try:
            return self.tk.encode(text, add_special_tokens=False).ids
        finally:
            self.tk.encode_special_tokens = False

    def encode_with_specials(self, text: str) -> list[int]:
        return self.tk.encode(text, add_special_tokens=False).ids

    def token_bytes(self, token_id: int) -> bytes | None:
        if token_id in self._special:
            return None
        piece = self._pieces.get(token_id)
        if piece is None:
            return None
        if self._byte_level:
            try:
                return bytes(self._bd[c] for c in piece)
            except KeyError:  # an added non-special token stored as plain text
                return piece.encode("utf-8")
        m = _BYTE_FALLBACK.match(piece)
        if m:
            return bytes([int(m.group(1), 16)])
        if self._metaspace:
            piece = piece.replace("\u2581", " ")
        return piece.encode("utf-8")


# --- tiktoken --------------------------------------------------------------------------------


class TiktokenTokenizer(JinjaChat, Tokenizer):
    """A tiktoken ``Encoding`` with an optional Jinja chat template."""

    kind = "tiktoken"

    def __init__(self, enc: Any, name: str, chat_template: str | None = None,
                 bos_token: str | None = None, eos_token: str | None = None) -> None:
        self.enc, self.name = enc, name
        self.chat_template, self.bos_token, self.eos_token = chat_template, bos_token, eos_token
        self._special = set(enc._special_tokens.values())
        self.template_kwargs: dict[str, Any] = {}
        self.hf = None

    @property
    def vocab_size(self) -> int:
        return self.enc.n_vocab

    def encode(self, text: str) -> list[int]:
        return self.enc.encode_ordinary(text)

    def encode_with_specials(self, text: str) -> list[int]:
        return self.enc.encode(text, allowed_special="all")

    def token_bytes(self, token_id: int) -> bytes | None:
        if token_id in self._special:
            return None
        try:
            return self.enc.decode_single_token_bytes(token_id)
        except KeyError:
            return None



# --- mistral-common --------------------------------------------------------------------------


class MistralTokenizer(Tokenizer):
    """mistral-common's SentencePiece or Tekken tokenizer with its own chat encoder."""

    kind = "mistral"

    def __init__(self, path: str | Path, name: str) -> None:
        # mistral-common takes ~0.9 s to import: only for Mistral tokenizers
        from mistral_common.tokens.tokenizers.mistral import MistralTokenizer as MT

        self.mt = MT.from_file(str(path))
        self.raw = self.mt.instruct_tokenizer.tokenizer
        self.name = name
        self._tekken = type(self.raw).__name__ == "Tekkenizer"
        self._special = set(range(self.raw.num_special_tokens)) if self._tekken else set()
        if not self._tekken:
            sp = self.raw._model
            self._special = {i for i in range(sp.get_piece_size())
                             if sp.is_control(i) or sp.is_unknown(i)}

    @property
    def vocab_size(self) -> int:
        return self.raw.n_words

    @property
    def unk_id(self) -> int | None:
        return self.raw.unk_id

    def encode(self, text: str) -> list[int]:
        """SentencePiece models add their dummy-prefix '▁' here, as mistral-common does for every
        message segment."""
        return list(self.raw.encode(text, bos=False, eos=False))

    def token_bytes(self, token_id: int) -> bytes | None:
        if token_id in self._special:
            return None
        if self._tekken:
            return self.raw.id_to_byte_piece(token_id)
        piece = self.raw._model.id_to_piece(token_id)
        m = _BYTE_FALLBACK.match(piece)
        return bytes([int(m.group(1), 16)]) if m else piece.replace("\u2581", " ").encode("utf-8")

    def _chat(self, messages: Sequence[Message]) -> list[int]:
        # mistral-common is heavy (see __init__)
        from mistral_common.protocol.instruct.messages import AssistantMessage, SystemMessage, UserMessage
        from mistral_common.protocol.instruct.request import ChatCompletionRequest

        kinds = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}
        msgs = [kinds[m["role"]](content=m["content"]) for m in messages]
        return list(self.mt.encode_chat_completion(ChatCompletionRequest(messages=msgs)).tokens)

    def render_chat(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> list[int] | None:
        """mistral-common always ends a request with ``[/INST]`` (the generation prompt)."""
        return self._chat(messages)

    def assistant_ids(self, text: str) -> list[int] | None:
        user = [{"role": "user", "content": "Hi"}]
        a = self._chat(user)
        b = self._chat(user + [{"role": "assistant", "content": text}, {"role": "user", "content": "x"}])
        if b[:len(a)] != a or self.raw.eos_id not in b[len(a):]:
            return None
        rest = b[len(a):]
        return rest[:rest.index(self.raw.eos_id)]
