"""Package boundaries: tokenization needs nothing from harness, no import cycles between modules,
no test fixtures inside the installed packages."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.packages import PACKAGES

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str) -> list[str]:
    return sorted(".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                  for p in (ROOT / package).rglob("*.py"))


def test_tokenization_imports_nothing_from_harness() -> None:
    code = ("import importlib, json, sys\n"
            f"for m in {_modules('tokenization')!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('evalaware', 'harness', 'probes'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert json.loads(out.stdout) == []


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(path: Path, module: str) -> set[str]:
    """Project modules `module` imports (module level and inside functions alike)."""
    pkg = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for b in ast.walk(tree) if isinstance(b, ast.If) and _is_type_checking(b.test)
                   for stmt in b.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:  # `if TYPE_CHECKING:` imports never run
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return {m for m in out if m.split(".")[0] in PACKAGES}


def _graph() -> dict[str, set[str]]:
    mods = {m: ROOT / (m.replace(".", "/") + ".py") for p in PACKAGES for m in _modules(p)}
    for m in list(mods):
        if not mods[m].exists():
            mods[m] = ROOT / m.replace(".", "/") / "__init__.py"
    # edges between modules (a package's __init__ is not an edge target: importing a submodule
    # runs it, but it re-exports rather than depends)
    return {m: {d for d in _imports(p, m) if d in mods and d != m and not (ROOT / d.replace(".", "/")).is_dir()}
            for m, p in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (c := visit(d)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_no_import_cycle_between_modules() -> None:
    assert _cycle(_graph()) is None, " -> ".join(_cycle(_graph()) or [])


def test_cycle_detector_finds_a_planted_cycle(tmp_path) -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    mod = tmp_path / "m.py"
    mod.write_text("from typing import TYPE_CHECKING\nfrom harness import x\n"
                   "if TYPE_CHECKING:\n    from harness import y\n"
                   "def f():\n    from probes import z\n")
    assert _imports(mod, "harness.m") == {"harness", "harness.x", "probes", "probes.z"}


def test_no_test_fixture_in_the_packages() -> None:
    """Modules imported only by tests and benchmarks live under tests/helpers."""
    for old in ("harness/tiny.py", "probes/synthetic.py", "harness/taxonomy/synthetic.py"):
        assert not (ROOT / old).exists(), old
    users = {m for p in PACKAGES for m in _modules(p)}
    for helper in (ROOT / "tests" / "helpers").glob("*.py"):
        name = f"tests.helpers.{helper.stem}"
        for m in users:
            path = ROOT / (m.replace(".", "/") + ".py")
            path = path if path.exists() else ROOT / m.replace(".", "/") / "__init__.py"
            assert name not in path.read_text(), f"{m} imports the test helper {name}"


# --- the layer contract (pyproject.toml, [tool.importlinter]) --------------------------------

def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the packages found under `root` (its pyproject.toml's contracts)."""
    code = ("import sys\nfrom importlinter.cli import lint_imports\n"
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": str(root)})


def test_layer_contract_holds() -> None:
    r = _lint_imports(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 kept, 0 broken" in r.stdout


def _copy_tree(dst: Path) -> None:
    import shutil

    for p in PACKAGES:
        shutil.copytree(ROOT / p, dst / p, ignore=shutil.ignore_patterns("__pycache__", "*.jsonl"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")


@pytest.mark.parametrize("module, line, broken", [
    ("harness/core/sample.py", "from harness.run import loop", "harness's layers"),  # upward
    ("harness/stats/cv.py", "import probes.io", "top-level packages"),  # harness -> probes
    ("harness/core/sample.py", "from evalaware import main", "top-level packages"),  # -> the CLI
    ("probes/io.py", "from evalaware import options", "top-level packages"),
    ("tokenization/words.py", "from harness.core import errors", "top-level packages"),
    ("probes/activations/store.py", "from probes import train", "probes: steering"),
])
def test_layer_contract_fails_on_a_planted_import(tmp_path, module, line, broken) -> None:
    _copy_tree(tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n\ndef _planted() -> None:\n    {line}\n")
    r = _lint_imports(tmp_path)
    assert r.returncode != 0, r.stdout
    assert f"{broken}" in r.stdout and "BROKEN" in r.stdout, r.stdout


def test_no_probes_or_cli_import_in_harness() -> None:
    """Only evalaware, the application layer, composes harness and probes commands."""
    for m in _modules("harness"):
        path = ROOT / (m.replace(".", "/") + ".py")
        path = path if path.exists() else ROOT / m.replace(".", "/") / "__init__.py"
        assert not {d for d in _imports(path, m) if d.split(".")[0] in ("probes", "evalaware")}, m


def test_the_command_line_is_one_package_on_top() -> None:
    """Every click command and group is defined in evalaware (report's and tokens' too), and the
    layer contract puts that package alone on top."""
    import tomllib

    for p in PACKAGES:
        for f in (ROOT / p).rglob("*.py"):
            if f.relative_to(ROOT).parts[0] == "evalaware":
                continue
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for d in node.decorator_list:
                        call = d.func if isinstance(d, ast.Call) else d
                        name = ast.unparse(call)
                        assert not name.endswith((".command", ".group")), f"{f.relative_to(ROOT)}: {name}"
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "top")["layers"]
    assert layers[0] == "evalaware"


def test_no_top_level_package_is_split_around_another() -> None:
    """The top contract's layers are whole top-level packages, each once, every one of them: a
    package cannot sit partly above and partly below another (as probes once sat between the
    CLI, then in harness, and the rest of harness)."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "top")["layers"]
    assert sorted(layers) == list(PACKAGES)  # every package the repository has
    assert all("." not in x and "|" not in x and ":" not in x for x in layers)
    others = [c for c in contracts if c["id"] != "top" and c["type"] == "layers"]
    assert all(len(c.get("containers", [])) == 1 for c in others), "a sub-contract spans packages"
