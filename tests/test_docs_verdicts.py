"""Docs quote generated verdicts, never hand-written ones (issue 44, item 6): a verdict line in the
README or docs (the format `validate` prints under the declared rule) must appear verbatim in a
generated file under docs/generated/, whose first line names the command that wrote it; and the
conclusions the issue found written ahead of their numbers stay out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts.quote_generated import docs

ROOT = Path(__file__).resolve().parents[1]
DOCS = docs()  # README.md and docs/*.md: the docs a verdict line or quote block may sit in
GENERATED = ROOT / "docs" / "generated"
#: A verdict line as `validate` prints it (harness.organisms.verdicts.verdict_lines).
VERDICT = re.compile(r"^\s*[-*]\s+\S.*\[[^\]]*\]:\s+(sensitive|inverted|not shown sensitive|equivalent|moved|"
                     r"inconclusive|no verdict)\b")
#: A steering verdict line as `steer report` prints it (probes.steering.verdicts).
#: Searched anywhere in a line (a list item, a numbered item, prose): the line must be generated.
STEER_VERDICT = re.compile(r"\S+ at alpha \S+:\s+(moves it more than every control|"
                           r"moves it, not shown more than every control|not shown to move it|no verdict)\b")
#: Conclusions the issue found stated without a table under one rule behind them.
WITHDRAWN = ("only the monitor is both sensitive and specific", "reads the meaning, not the words",
             "the null is not the instrument's blindness", "binary and probability do not move on the sham",
             "does not rest on the removable factors", "finds the known cause")


def _generated_lines() -> set[str]:
    out: set[str] = set()
    for p in sorted(GENERATED.glob("*")) if GENERATED.is_dir() else []:
        if p.is_file():
            out |= {line.strip() for line in p.read_text().splitlines()}
    return out


def docs_verdicts_not_generated(docs: list[Path], generated: set[str]) -> list[str]:
    """`file:line: text` of every verdict line in `docs` that no generated file holds. A steering
    verdict is looked for in each paragraph with its line breaks joined (so a hand-written one
    wrapped over two lines is caught): from where it starts, the paragraph must go on with a
    sentence a generated file holds, verbatim."""
    bad = []
    sentences = {re.sub(r"^[-*]\s+", "", g) for g in generated if STEER_VERDICT.search(g)}
    for p in docs:
        lines = p.read_text().splitlines()
        for k, line in enumerate(lines, 1):
            if VERDICT.match(line) and line.strip() not in generated:
                bad.append(f"{p.name}:{k}: {line.strip()}")
        k = 0
        while k < len(lines):
            first = k
            while k < len(lines) and lines[k].strip():
                k += 1
            para = " ".join(" ".join(lines[first:k]).split())
            for m in STEER_VERDICT.finditer(para):
                if not any(para.startswith(g, m.start()) for g in sentences):
                    bad.append(f"{p.name}:{first + 1}: {para[m.start():m.start() + 160]}")
            k += 1
    return bad


def test_every_verdict_line_in_the_docs_was_printed_by_a_command():
    bad = docs_verdicts_not_generated(DOCS, _generated_lines())
    assert not bad, ("verdict lines no command printed (copy the command's output to docs/generated/):\n"
                     + "\n".join(bad))


def test_generated_files_name_the_command_that_made_them():
    for p in sorted(GENERATED.glob("*")) if GENERATED.is_dir() else []:
        if p.is_file() and p.name != "README.md":
            first = p.read_text().splitlines()[0] if p.read_text() else ""
            assert first.startswith("<!-- command:") or first.startswith("# command:"), p


@pytest.mark.parametrize("phrase", WITHDRAWN)
def test_withdrawn_conclusions_stay_out(phrase):
    hits = [p.name for p in DOCS if phrase in " ".join(p.read_text().split()).lower()]  # across line breaks
    assert not hits, f"{phrase!r} in {hits}: a conclusion no table under the declared rule carries"


def test_the_check_catches_a_planted_hand_written_verdict(tmp_path):
    from harness.organisms.verdicts import verdict_lines

    doc = tmp_path / "x.md"
    doc.write_text("Intro.\n\n- monitor [aware vs reference, sensitivity]: sensitive (double difference +1.000 nats)\n")
    assert docs_verdicts_not_generated([doc], set()) == [
        "x.md:3: - monitor [aware vs reference, sensitivity]: sensitive (double difference +1.000 nats)"]
    # a line the tool printed, copied to docs/generated/, passes
    table = {"rule": {"text": "r", "alpha": 0.05}, "family": 1, "spillover": [], "rows": [
        {"readout": "monitor", "kind": "aware", "role": "sensitivity", "models": ["o"], "against": "reference",
         "verdict": "sensitive", "estimate": {"mean": 1.0, "ci": [0.5, 1.5], "units": [6, 5, 7]},
         "estimate_joint": {"ci": [0.4, 1.6]}, "primary": "difference", "p_diff_adj": 0.001, "n_pairs": 60,
         "n_pairs_all": 60, "seeds": []}]}
    printed = verdict_lines(table)[1]
    assert VERDICT.match(printed)
    doc.write_text(printed + "\n")
    assert docs_verdicts_not_generated([doc], {printed}) == []


def test_the_check_catches_a_hand_written_steering_verdict(tmp_path):
    from probes.steering.verdicts import MORE, NOT_SHOWN

    doc = tmp_path / "s.md"
    doc.write_text(f"- behaviour at alpha +0.5: {MORE} (vector delta +0.300)\n"
                   f"* logprob_question at alpha -0.5: {NOT_SHOWN} (vector delta -0.010)\n"
                   "- behaviour at alpha +0.5 is discussed in prose, not a verdict line\n"
                   f"1. In prose: behaviour at alpha +1e-05: {NOT_SHOWN}.\n\n"
                   "Wrapped by hand: behaviour at alpha\n+0.5: moves it more than every control.\n")
    bad = docs_verdicts_not_generated([doc], set())  # file:first line of the paragraph: text
    assert [b.split(": ", 1)[1][:30] for b in bad] == [
        "behaviour at alpha +0.5: moves", "logprob_question at alpha -0.5", "behaviour at alpha +1e-05: not",
        "behaviour at alpha +0.5: moves"] and bad[3].startswith("s.md:6:")
    # a generated sentence quoted whole passes, in a list item or wrapped inside prose
    said = f"behaviour at alpha +0.5: {MORE} (raises it: vector delta +0.300 [+0.2, +0.4]; 36 samples)"
    doc.write_text(f"- {said}\n\nAs printed, {said[:40]}\n{said[40:]}, which ...\n")
    assert docs_verdicts_not_generated([doc], {f"- {said}"}) == []
    doc.write_text(f"- {said.replace('+0.300', '+0.310')}\n")  # one number changed by hand
    assert len(docs_verdicts_not_generated([doc], {f"- {said}"})) == 1


ARCHIVES = sorted(p.parent for p in (ROOT / "docs" / "data").glob("*/*/archive.json"))


@pytest.mark.parametrize("archive", ARCHIVES, ids=[f"{p.parent.name}/{p.name}" for p in ARCHIVES])
def test_a_committed_archive_re_judges_to_its_run_s_table(archive, tmp_path):
    """The records behind a quoted validate table are committed (`organism archive`, docs/data/):
    judged again with no model, they print the run's table line for line, so a quoted verdict is
    re-made from its numbers on every test run (and a change to the rule's code that moves one fails
    here)."""
    from click.testing import CliRunner

    from evalaware.main import cli

    res = CliRunner().invoke(cli, ["organism", "judge", str(archive), "--out", str(tmp_path / "judged")])
    assert res.exit_code == 0, res.output + repr(res.exception)
    assert res.output.strip().splitlines() == (archive / "sensitivity.md").read_text().strip().splitlines()


def test_every_quote_block_in_the_docs_is_its_generated_file_s_current_lines():
    """A block between ``<!-- quote: docs/generated/X.md -->`` and ``<!-- /quote -->`` holds X's
    printed lines as they are now (scripts/quote_generated.py re-makes it)."""
    from scripts.quote_generated import requote

    stale = [s for d in DOCS for s in requote(d)[1]]
    assert not stale, f"stale quote blocks (run python scripts/quote_generated.py): {stale}"


def test_quote_re_makes_a_stale_block_and_names_a_bad_one(tmp_path):
    from scripts.quote_generated import QuoteError, main, requote

    gen = tmp_path / "docs" / "generated"
    gen.mkdir(parents=True)
    (gen / "t.md").write_text("<!-- command: x -->\njudge: status\nVerdicts ...\n- a [k]: sensitive (1)\n"
                              "- b [k]: moved (2)\nSpillover ...\n- a [k]: +0.1\n\n- after the blank: no\n")
    (gen / "h.md").write_text("- a [k]: sensitive (1)\n")  # no command header
    doc = tmp_path / "README.md"
    doc.write_text("Intro.\n<!-- quote: docs/generated/t.md -->\n```\n- a [k]: sensitive (0.9)\n```\n"
                   "<!-- /quote -->\nand <!-- quote: docs/generated/t.md match=^-\\sa\\b -->\n<!-- /quote -->\nEnd.\n")
    text, stale = requote(doc, tmp_path)  # the second block's opening is not alone on its line: untouched
    assert stale == ["README.md:2"]  # the line of its opening
    assert text == ("Intro.\n<!-- quote: docs/generated/t.md -->\n```\n- a [k]: sensitive (1)\n- b [k]: moved (2)\n"
                    "- a [k]: +0.1\n```\n<!-- /quote -->\nand <!-- quote: docs/generated/t.md match=^-\\sa\\b -->\n"
                    "<!-- /quote -->\nEnd.\n")
    doc.write_text(text + "<!-- quote: docs/generated/t.md match=^-\\sa\\b -->\n<!-- /quote -->\n")
    text, stale = requote(doc, tmp_path)
    assert stale == ["README.md:12"] and text.endswith("```\n- a [k]: sensitive (1)\n- a [k]: +0.1\n```\n<!-- /quote -->\n")
    doc.write_text(text)
    assert requote(doc, tmp_path)[1] == []
    for bad, why in (("<!-- quote: docs/generated/none.md -->\n<!-- /quote -->\n", "none.md does not exist"),
                     ("<!-- quote: docs/generated/t.md -->\n```\n", "no '<!-- /quote -->'"),
                     ("<!-- quote: docs/generated/t.md match=zzz -->\n<!-- /quote -->\n", "matches 'zzz'"),
                     ("<!-- quote: docs/generated/t.md match=a b -->\n<!-- /quote -->\n", "not a quote opening"),
                     ("<!-- quote: docs/generated/t.md match=( -->\n<!-- /quote -->\n", "match=\\(: "),
                     ("<!-- quote: docs/generated/t.md -->\n<!-- quote: docs/generated/t.md -->\n<!-- /quote -->\n",
                      "before the next one"),
                     ("<!-- quote: docs/generated/h.md -->\n<!-- /quote -->\n", "h.md: its first line does not name")):
        doc.write_text("x\n" + bad)
        with pytest.raises(QuoteError, match=why) as e:
            requote(doc, tmp_path)
        assert str(e.value).startswith("README.md:2:")
    doc.write_text("<!-- quote: docs/generated/t.md -->\n<!-- /quote -->\n")
    assert main(["--check", "--root", str(tmp_path), str(doc)]) == 1  # --check names it and writes nothing
    assert doc.read_text() == "<!-- quote: docs/generated/t.md -->\n<!-- /quote -->\n"
    assert main(["--root", str(tmp_path), str(doc)]) == 0 and requote(doc, tmp_path)[1] == []
