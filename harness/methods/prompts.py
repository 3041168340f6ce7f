"""Prompt texts as versioned data files, one per variant, overridable by the user.

Layout: ``harness/prompts/<method>/<variant>.txt`` (variants sorted by name), plus shared
templates at the top level (``third_person.txt``). A user directory given with ``--prompts DIR``
replaces any file it contains (same relative path). Every text's sha256 goes into the manifest,
and :meth:`PromptLibrary.provenance` says which set a run used.

Our binary and probability wordings are our own, written for this project: they are not the
prompts of Needham et al. (2025), whose exact texts are not published with the gated dataset;
give theirs (or any other set) with ``--prompts DIR``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from harness.core.errors import EvalAwareError
from harness.core.textio import read_utf8

BUILTIN = Path(str(resources.files("harness") / "prompts"))


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
        self.overridden: set[str] = set()

    def _path(self, rel: str) -> Path:
        if self.override and (self.override / rel).exists():
            return self.override / rel
        return BUILTIN / rel

    def get(self, name: str) -> Prompt:
        p = self._path(name + ".txt")
        if not p.exists():
            raise EvalAwareError(f"prompt {name!r} not found ({p})")
        prompt = Prompt(name, read_utf8(p).strip())
        self.used[name] = prompt.sha256
        if p.parent != BUILTIN and not p.is_relative_to(BUILTIN):
            self.overridden.add(name)
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
