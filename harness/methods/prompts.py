"""Prompt texts as versioned data files, one per variant, overridable by the user.

Layout: ``harness/prompts/<method>/<variant>.txt`` (variants sorted by name), plus shared
templates at the top level (``third_person.txt``). A user directory given with ``--prompts DIR``
replaces any file it contains (same relative path). Every text's sha256 goes into the manifest,
and :meth:`PromptLibrary.provenance` says which set a run used.

Our binary and probability wordings are our own, written for this project: they are not the
prompts of Needham et al. (2025), whose exact texts are not published with the gated dataset;
give theirs (or any other set) with ``--prompts DIR``.

Templates (:data:`TEMPLATES`) are checked when read, and a ``--prompts DIR``'s when the library
is made (before any model loads): each field they hold must be one the code fills, plain (no
attribute or index access, conversion or format spec: ``str.format`` would evaluate them), and
every field the template must show is there.
"""

from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

from harness.core.errors import EvalAwareError
from harness.core.textio import read_utf8

BUILTIN = Path(str(resources.files("harness") / "prompts"))


@dataclass(frozen=True)
class Template:
    """The fields of a prompt the code fills: with ``str.format`` (`formatted`) or by replacing
    ``{field}`` (the text may then hold other braces, e.g. a JSON example); all are required."""

    fields: tuple[str, ...]
    formatted: bool = False


TEMPLATES = {
    "third_person": Template(("transcript", "question"), formatted=True),
    "judge_motivation/v1": Template(("text",)),
    "judge_reasoning/v1": Template(("text",)),
    "behaviour_judge/v1": Template(("question", "answer")),
    "taxonomy_naming/cluster": Template(("features",)),
    "taxonomy_naming/category": Template(("clusters",)),
}


def check_template(name: str, text: str, where: Path | str) -> None:
    """Refuse a template (read from `where`) with a field the code does not fill, an attribute or
    index access, a conversion or format spec, or without a field it must show."""
    t = TEMPLATES.get(name)
    if t is None:
        return
    if t.formatted:
        shown = "{" + "}, {".join(t.fields) + "}"
        try:
            parts = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(text) if f is not None]
        except ValueError as e:
            raise EvalAwareError(f"{where}: malformed template ({e}); write a literal brace as {{{{ or }}}}") from None
        for f, spec, conv in parts:
            field = "{" + f + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
            if f not in t.fields:
                why = ("attribute or index access is not allowed" if f.split(".")[0].split("[")[0] in t.fields
                       else "not a field of this template")
                raise EvalAwareError(f"{where}: field {field}: {why} (its fields: {shown})")
            if conv or spec:
                raise EvalAwareError(f"{where}: field {field}: no conversion or format spec is allowed; "
                                     f"write {{{f}}}")
        present = {f for f, _, _ in parts}
    else:
        present = {f for f in t.fields if "{" + f + "}" in text}
    for f in t.fields:
        if f not in present:
            raise EvalAwareError(f"{where}: field {{{f}}} is missing (this template must show it)")


@dataclass(frozen=True)
class Prompt:
    name: str  # e.g. "binary/v1"
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


class PromptLibrary:
    """Finds prompt files, user overrides first."""

    def __init__(self, override: str | Path | None = None) -> None:
        self.override = Path(override) if override else None
        if self.override and not self.override.is_dir():
            raise EvalAwareError(f"{self.override}: prompt override directory does not exist")
        self.used: dict[str, str] = {}
        #: Called with (name, sha256, path) on every read (the run loop refuses a text other than
        #: the one the run directory's records were made with).
        self.on_use: Callable[[str, str, Path], None] | None = None
        self.overridden: set[str] = set()
        for name in TEMPLATES if self.override else ():  # the user's templates: now, not mid-run
            if (p := self.override / (name + ".txt")).exists():
                self._read(name, p)

    def _path(self, rel: str) -> Path:
        if self.override and (self.override / rel).exists():
            return self.override / rel
        return BUILTIN / rel

    def find(self, name: str) -> tuple[Prompt, Path] | None:
        """The text this library would give for `name` and its file, without using it; None when
        it has none."""
        p = self._path(name + ".txt")
        return (self._read(name, p), p) if p.exists() else None

    def get(self, name: str) -> Prompt:
        found = self.find(name)
        if found is None:
            raise EvalAwareError(f"prompt {name!r} not found ({self._path(name + '.txt')})")
        prompt, p = found
        if self.on_use is not None:
            self.on_use(name, prompt.sha256, p)
        self.used[name] = prompt.sha256
        if p.parent != BUILTIN and not p.is_relative_to(BUILTIN):
            self.overridden.add(name)
        return prompt

    @staticmethod
    def _read(name: str, path: Path) -> Prompt:
        prompt = Prompt(name, read_utf8(path).strip())
        check_template(name, prompt.text, path)
        return prompt

    def variants(self, method: str) -> list[Prompt]:
        names = {p.stem for p in (BUILTIN / method).glob("*.txt")}
        if self.override and (self.override / method).is_dir():
            names |= {p.stem for p in (self.override / method).glob("*.txt")}
        if not names:
            raise EvalAwareError(f"no prompt variants for method {method!r}")
        return [self.get(f"{method}/{n}") for n in sorted(names)]

    def provenance(self) -> dict[str, object]:
        """Which prompt set the texts used so far came from (for the manifest and report)."""
        over = sorted(self.overridden)
        return {"set": "custom" if over else "evalaware", "override_dir": str(self.override) if over else None,
                "overridden": over}
