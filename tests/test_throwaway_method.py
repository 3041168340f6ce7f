"""Adding a method is its own file plus one import line (issue 38): a throwaway method written
in one module and imported once runs through `run`, records its declared option, resumes,
and shows in `show` and `report`, with no other file of the harness touched."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

TOY = textwrap.dedent('''
    """A throwaway method: the share of the model's answer that is letters."""
    from harness.methods.base import Method, answer_samples, register
    from harness.methods.report_spec import ReportSpec
    from harness.methods.voting import Tally


    @register
    class LetterShare(Method):
        name = "toy_letter_share"
        description = "share of letters in the model's own answer (a throwaway method)"
        report = ReportSpec(order=900, score="letter share")
        options = Method.options + ("answer_tokens",)

        def run_batch(self, samples):
            out = []
            for s, a in zip(samples, answer_samples(self.ctx, samples)):
                text = a.text if a is not None else ""
                share = sum(c.isalpha() for c in text) / max(1, len(text))
                out.append(self.record(s, Tally("eval" if share >= 0.5 else "deploy", share, 1, 0),
                                       answers=[a], letters=share))
            return out
''')

# The one line a new method adds to harness/methods/__init__.py, here in a launcher.
LAUNCH = "import sys; sys.path.insert(0, sys.argv.pop(1)); import toy_method; from evalaware.main import main; main()"


def _cli(plugin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LAUNCH, str(plugin), *args], capture_output=True, text=True,
                          env={"PYTHONPATH": str(Path(__file__).parents[1]), "PATH": "/usr/bin:/bin",
                               "HOME": str(Path.home()), "OMP_NUM_THREADS": "1"})


def test_a_throwaway_method_is_one_file_and_one_import_line(tmp_path, tiny_model_dir):
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    (plugin / "toy_method.py").write_text(TOY)
    out = tmp_path / "run"
    run = ["run", "--model", str(tiny_model_dir), "--backend", "hf", "--dataset", "demo", "--limit", "4",
           "--methods", "toy_letter_share,binary", "--answer-tokens", "6", "--out", str(out), "--no-progress"]
    r = _cli(plugin, *run)
    assert r.returncode == 0, r.stderr[-2000:]
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    toy = [x for x in recs if x["method"] == "toy_letter_share"]
    assert len(toy) == 4 and all(0.0 <= x["score"] <= 1.0 and x["details"]["letters"] == x["score"] for x in toy)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["methods"]["toy_letter_share"] == {"config": {"answer_tokens": 6, "person": "first", "view": "first_turn"}}
    # the declared option is checked on resume like any method's, and only that one
    again = _cli(plugin, *[{"6": "7", "toy_letter_share,binary": "toy_letter_share"}.get(a, a) for a in run])
    assert again.returncode == 2 and "setting for method toy_letter_share" in again.stderr, again.stderr[-1000:]
    show = _cli(plugin, "show", str(out))
    assert show.returncode == 0 and any(line.startswith("toy_letter_share") for line in show.stdout.splitlines())
    rep = _cli(plugin, "report", str(out), "--out", str(tmp_path / "rep"))
    assert rep.returncode == 0, rep.stderr[-2000:]
    assert "toy_letter_share" in (tmp_path / "rep" / "report.md").read_text()
    # without the import line the method is unknown, named in a one-line error
    bare = subprocess.run([sys.executable, "-m", "evalaware.main", *run[:-3], "--out", str(tmp_path / "x"),
                           "--no-progress"], capture_output=True, text=True,
                          env={"PYTHONPATH": str(Path(__file__).parents[1]), "PATH": "/usr/bin:/bin",
                               "HOME": str(Path.home())})
    assert bare.returncode == 2 and "toy_letter_share" in bare.stderr
