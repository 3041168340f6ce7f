"""The project's top-level packages, found in the repository (a folder with an ``__init__.py``), so
that a test walking the packages' files walks a package added later too."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES: tuple[str, ...] = tuple(sorted(p.parent.name for p in ROOT.glob("*/__init__.py")
                                         if p.parent.name != "tests"))
