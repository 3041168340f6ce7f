"""Names for clusters and categories: an LLM reading the members, or keywords as a fallback.

The LLM prompts are data files (``harness/prompts/taxonomy_naming/{cluster,category}.txt``,
overridable with ``--prompts``); the answer is tagged (``<name>``, ``<description>``,
``<artifact>``). Calls go through the run's :class:`~harness.backends.cache.CachedBackend`, in committed
batches, so naming is cached and resumable. An unparseable answer, or no naming model at all,
gives a keyword name (class-based TF-IDF over the members' words), marked ``source: "keywords"``
and shown as such in the reports.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from harness.backends.base import Backend, GenerationRequest, SamplingParams
from harness.methods.prompts import PromptLibrary
from harness.core.render import Renderer
from harness.core.sample import Message
from harness.taxonomy import TaxonomyError

CLUSTER_PROMPT = "taxonomy_naming/cluster"
CATEGORY_PROMPT = "taxonomy_naming/category"
_TAG = {t: re.compile(rf"<\s*{t}\s*>(.*?)<\s*/\s*{t}\s*>", re.I | re.S)
        for t in ("name", "description", "artifact")}
_WORD = re.compile(r"[a-z][a-z0-9'-]*[a-z0-9]")
STOPWORDS = frozenset("""a an the and or of to in on for with about at by from as is are was were be
been being it its this that these those which who whom what when where why how not no nor but if
then than so such very can could would should may might must will shall do does did has have had
i me my we our you your he she they them their his her user users model prompt prompts request
asks asked ask asking question questions mentions mention uses use using like also into via""".split())


@dataclass(frozen=True)
class Name:
    """A cluster's or category's name. `artifact` is the namer's flag (None: not asked/unknown)."""

    name: str
    description: str
    artifact: bool | None
    source: str  # "model" | "keywords"
    error: str | None = None
    raw: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_name(text: str) -> tuple[str, str, bool | None] | None:
    """(name, description, artifact) from a tagged answer, or None when there is no usable name."""
    def tag(t: str) -> str:
        m = _TAG[t].search(text)
        return re.sub(r"\s+", " ", m.group(1)).strip(" *_`\"'") if m else ""

    name = tag("name")
    if not name or len(name) > 120:
        return None
    flag = tag("artifact").lower()
    artifact = True if flag.startswith("yes") else False if flag.startswith("no") else None
    return name, tag("description"), artifact


def keywords(texts_by_group: Sequence[Sequence[tuple[str, int]]], top: int = 3) -> list[list[str]]:
    """Top words per group by class-based TF-IDF: count in the group x log(1 + groups / groups
    containing the word). Input: per group, (text, weight) pairs."""
    tfs = []
    for group in texts_by_group:
        tf: Counter[str] = Counter()
        for text, w in group:
            for word in set(_WORD.findall(text.lower())):
                if word not in STOPWORDS and len(word) > 2:
                    tf[word] += w
        tfs.append(tf)
    df = Counter(w for tf in tfs for w in tf)
    n = len(tfs)
    out = []
    for tf in tfs:
        scored = sorted(tf.items(), key=lambda kv: (-kv[1] * math.log(1 + n / df[kv[0]]), kv[0]))
        out.append([w for w, _ in scored[:top]])
    return out


def keyword_name(words: Sequence[str], error: str | None = None, raw: str | None = None) -> Name:
    label = " / ".join(words) if words else "(no keywords)"
    return Name(f"[keywords] {label}", "Automatic label from the most distinctive member words "
                "(no naming model, or its answer was unparseable).", None, "keywords", error, raw)


class Namer:
    """Asks a (cached) backend to name groups of features; keyword fallback per group."""

    def __init__(self, backend: Backend, prompts: PromptLibrary | None = None,
                 max_tokens: int = 128, batch_size: int = 16,
                 template_kwargs: dict[str, Any] | None = None) -> None:
        if backend.tokenizer is None:
            raise TaxonomyError("the naming model has no tokenizer; pass --tokenizer")
        self.backend, self.prompts = backend, prompts or PromptLibrary()
        self.renderer = Renderer(backend.tokenizer, dict(template_kwargs or {}))
        self.params = SamplingParams(max_tokens=max_tokens, temperature=0.0, top_p=1.0, seed=0)
        self.batch_size = batch_size

    def settings(self) -> dict[str, Any]:
        return {"identity": self.backend.identity, "params": self.params.to_dict(),
                "renderer": self.renderer.info()}

    def fill(self, prompt: str, **fields: str) -> str:
        text = self.prompts.get(prompt).text
        for k, v in fields.items():
            if "{" + k + "}" not in text:
                raise TaxonomyError(f"prompt {prompt!r} lacks the {{{k}}} placeholder")
            text = text.replace("{" + k + "}", v)
        return text

    def name(self, texts: Sequence[str], fallbacks: Sequence[Sequence[str]]) -> list[Name]:
        """One Name per prompt text; keyword name (from `fallbacks`) where parsing fails."""
        out: list[Name] = []
        for s in range(0, len(texts), self.batch_size):
            reqs = [GenerationRequest(self.renderer.render([Message("user", t)]), self.params)
                    for t in texts[s:s + self.batch_size]]
            for g, words in zip(self.backend.generate(reqs), fallbacks[s:s + self.batch_size]):
                parsed = parse_name(g.text)
                out.append(Name(parsed[0], parsed[1], parsed[2], "model", None, g.text) if parsed
                           else keyword_name(words, "no <name> tag in the naming model's answer",
                                             g.text))
        return out
