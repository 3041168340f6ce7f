"""Issue 47: the CLI starts without torch or vLLM. `evalaware --help`, `show`, `export` and `report`
import neither (checked in a fresh interpreter), and no module the CLI imports at start-up imports a
heavy package at module level (checked on the source, so a planted ``import torch`` is named)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.packages import PACKAGES as OURS

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "vllm", "transformers", "sklearn", "scipy", "matplotlib")

_CHILD = """
import json, sys
{plant}
from evalaware.main import cli
try:
    cli.main(args={args!r}, prog_name="evalaware", standalone_mode=False)
except SystemExit:
    pass
mods = sorted(sys.modules)
print(json.dumps({{"heavy": sorted({{m.split(".")[0] for m in mods}} & set({heavy!r})),
                  "ours": [getattr(sys.modules[m], "__file__", None) for m in mods
                           if m.split(".")[0] in {ours!r}]}}))
"""


def _start(args: list[str], plant: str = "") -> dict[str, list[str]]:
    """What a fresh interpreter has imported after running the CLI with `args` (after `plant`)."""
    code = _CHILD.format(plant=plant, args=args, heavy=HEAVY, ours=OURS)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    out: dict[str, list[str]] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


@pytest.fixture(scope="module")
def started() -> dict[str, list[str]]:
    return _start(["--help"])


@pytest.mark.parametrize("args", [["show", "--help"], ["export", "--help"], ["report", "--help"]])
def test_commands_start_without_torch_or_vllm(args):
    assert _start(args)["heavy"] == [], args


def test_help_starts_without_torch_or_vllm(started):
    assert started["heavy"] == []


def test_the_start_up_check_sees_a_planted_torch():
    """The check above can fail: a module-level import of an engine (one that imports torch)
    before the CLI starts is seen."""
    assert "torch" in _start(["--help"], plant="import harness.backends.hf.backend")["heavy"]


def module_level_imports(source: str) -> set[str]:
    """Top-level package names `source` imports when it is imported: module level and class
    bodies, not inside functions nor under ``if TYPE_CHECKING:``."""
    found: set[str] = set()

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    walk(node.body)
                walk(node.orelse)
            elif isinstance(node, (ast.Try, ast.With, ast.ClassDef)):
                walk(node.body)
                for h in getattr(node, "handlers", []):
                    walk(h.body)
                walk(getattr(node, "orelse", []))
                walk(getattr(node, "finalbody", []))

    walk(ast.parse(source).body)
    return found


def test_no_start_up_module_imports_a_heavy_package_at_module_level(started):
    files = [Path(f) for f in started["ours"] if f]
    assert any(f.name == "main.py" and f.parent.name == "evalaware" for f in files)  # the list is the CLI's
    bad = {str(f.relative_to(ROOT)): sorted(module_level_imports(f.read_text()) & set(HEAVY)) for f in files}
    assert not {f: h for f, h in bad.items() if h}, "keep these imports inside the functions that need them"


def test_the_source_check_names_a_planted_module_level_import():
    planted = "import json\nimport torch\n\ndef f():\n    import vllm\n"
    assert module_level_imports(planted) & set(HEAVY) == {"torch"}
    guarded = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
               "else:\n    from scipy import stats\n")
    assert module_level_imports(guarded) & set(HEAVY) == {"scipy"}
    assert module_level_imports("class A:\n    from sklearn import cluster\n") == {"sklearn"}
