"""Issue 38: no class over 200 lines in the packages and the benchmarks (the size the run-log
design set); a class past it is split along its seams into modules named for what they do."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers.packages import PACKAGES as OURS

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (*OURS, "scripts")
MAX_CLASS_LINES = 200


def long_classes(root: Path, limit: int = MAX_CLASS_LINES) -> list[str]:
    """"path:line Name (n lines)" for every class (nested ones too) longer than `limit` lines,
    counted from its first decorator or ``class`` line to its last line."""
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                n = node.end_lineno - first + 1  # type: ignore[operator]
                if n > limit:
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_class_over_200_lines():
    found = [c for pkg in PACKAGES for c in long_classes(ROOT / pkg)]
    assert not found, f"classes over {MAX_CLASS_LINES} lines (split them along their seams): {found}"


def test_the_size_check_finds_a_planted_long_class(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_CLASS_LINES - 1))  # class line + 199 = 200
    (pkg / "sub" / "ok.py").write_text(f"class Fits:\n{body}")
    nested = body.replace("    x", "        x")
    (pkg / "sub" / "big.py").write_text(f"@decorated\nclass Outer:\n    class TooLong:\n{nested}"
                                        f"        y = 1\n")
    # Outer: its decorator (line 1) to its last line (203); TooLong: lines 3 to 203
    assert long_classes(pkg) == ["pkg/sub/big.py:2 Outer (203 lines)", "pkg/sub/big.py:3 TooLong (201 lines)"]
    assert long_classes(pkg, limit=199) == ["pkg/sub/big.py:2 Outer (203 lines)",
                                            "pkg/sub/big.py:3 TooLong (201 lines)",
                                            "pkg/sub/ok.py:1 Fits (200 lines)"]
