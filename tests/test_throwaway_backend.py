"""Issue 47: a throwaway backend from another package, declared by one entry point of the group
``evalaware.backends``, is accepted by ``evalaware run --backend toy`` through the real command
line (a fresh interpreter: the registry reads the entry point, the flag and the choice follow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TOY_PACKAGE = '''
from harness.backends.base import Capabilities
from harness.backends.declare import BackendOption
from harness.backends.specs import BackendSpec
from tests.helpers.scripted import ScriptedScorer


class ToyBackend(ScriptedScorer):
    """Says "evaluation" more often the longer the transcript (a readable, non-constant scorer)."""

    kind = "toy"
    capabilities = Capabilities()

    def __init__(self, model: str, toy_knob: int = 1) -> None:
        from transformers import AutoTokenizer

        super().__init__(AutoTokenizer.from_pretrained(model), lambda t: min(0.9, len(t) / 4000),
                         name="toy")
        self.toy_knob = toy_knob

    @property
    def identity(self):
        return {"backend": "toy", "weights_sha256": "none", "toy_knob": self.toy_knob}


SPEC = BackendSpec(kind="toy", engine="toy_backend:ToyBackend", capabilities=ToyBackend.capabilities,
                   keywords=frozenset({"toy_knob"}),
                   options=(BackendOption("toy_knob", "toy: a knob.", {"min": 1}),))
'''


def _plugin(where: Path) -> Path:
    """An installed-looking package: its module and a dist-info naming the entry point."""
    where.mkdir()
    (where / "toy_backend.py").write_text(TOY_PACKAGE)
    info = where / "toy_backend-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-backend\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[evalaware.backends]\ntoy = toy_backend:SPEC\n")
    return where


def _evalaware(args: list[str], path: Path | None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*([str(path)] if path else []), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "evalaware.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_backend_from_an_entry_point_runs_through_the_real_command_line(tmp_path, smollm2_dir):
    plugin = _plugin(tmp_path / "site")
    out = tmp_path / "run"
    args = ["run", "--backend", "toy", "--toy-knob", "3", "--model", str(smollm2_dir), "--dataset", "demo",
            "--limit", "4", "--methods", "binary", "--out", str(out), "--no-progress"]
    res = _evalaware(args, plugin)
    assert res.returncode == 0, res.stderr[-2000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 4 and {r["method"] for r in records} == {"binary"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert "toy" in json.dumps(manifest)  # the run records the backend it ran on

    help_text = _evalaware(["run", "--help"], plugin).stdout
    assert "--toy-knob" in help_text and "toy" in help_text
    # without the package the name is refused in one line, before any engine
    res = _evalaware([a for a in args if a not in ("--toy-knob", "3")], None)
    assert res.returncode == 2 and "'toy' is not one of" in res.stderr, res.stderr[-500:]
