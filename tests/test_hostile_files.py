"""Hostile or tiny inputs (issue 35): a report on a 4-sample run, keys in a URL's bare query or
fragment, a zip bomb in an ``.eval`` log, a factor file that exits, ``export --out -``, dataset
text that is Markdown, and sample ids equal after Unicode NFC."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalaware.main import cli
from harness.core.redact import redact_text, redact_url
from harness.data.readers import load_dataset
from harness.data.subset import select
from harness.runlog import RunLog
from tests.helpers.cli import in_process

SECRET = "sk-hostile-0123456789"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return in_process(*args)


def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
          ) -> tuple[int, str]:
    """The real entry point in-process (so a test can lower a constant): (exit code, stderr)."""
    from evalaware.main import main

    monkeypatch.setattr(sys, "argv", ["evalaware", *args])
    with pytest.raises(SystemExit) as e:
        main()
    return int(e.value.code or 0), capsys.readouterr().err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


# --- item 4: a report on a --limit 4 demo run -------------------------------------------------

def _limit_run(run_dir: Path, samples: list) -> Path:
    """A run store of `samples` with probability records, written through the store API."""
    with RunLog(run_dir) as store:
        store.put_samples(samples)
        store.put_results("probability", [
            {"sample_id": s.id, "method": "probability", "label": s.label,
             "prediction": "eval" if i % 2 else "deploy", "score": 0.2 + 0.15 * i, "n_valid": 1,
             "n_invalid": 0, "category": s.metadata.category, "n_turns": s.n_turns,
             "details": {"votes": [{"k": 0, "value": 0.2 + 0.15 * i, "error": None}]}}
            for i, s in enumerate(samples)])
        store.set_meta("manifest", {"model": {"model": "m"},
                                    "methods": {"probability": {"config": {"view": "full"}}}})
    return run_dir


def test_report_on_a_limit_4_demo_run_says_why_a_p_is_missing(tmp_path):
    """`--limit 4` on the demo set: 2 categories and 1- and 2-turn samples, so the cluster-robust
    p of the turns trend is undefined; it crashed the figure's legend (a None formatted)."""
    samples = select(load_dataset("demo"), limit=4)
    assert len({s.metadata.category for s in samples}) == 2 and len({s.n_turns for s in samples}) == 2
    run = _limit_run(tmp_path / "run", samples)
    r = CliRunner().invoke(cli, ["report", str(run), "--out", str(tmp_path / "rep"), "--bootstrap", "20"])
    assert r.exit_code == 0, r.output
    turns = (tmp_path / "rep" / "report.md").read_text().split("## Error vs number of turns")[1].split("\n## ")[0]
    assert "| m | probability | full | 4 |" in turns and "| – (< 3 categories) |" in turns
    assert "the cluster-robust p needs at least 3 categories" in turns
    assert (tmp_path / "rep" / "turns_m.png").read_bytes()[:4] == b"\x89PNG"
    # one turn everywhere: no trend fitted (issue 46), and said so
    one = [s for s in load_dataset("demo") if s.n_turns == 1][:6]
    run1 = _limit_run(tmp_path / "run1", one)
    r = CliRunner().invoke(cli, ["report", str(run1), "--out", str(tmp_path / "rep1"), "--bootstrap", "0"])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "rep1" / "report.md").read_text()
    assert "No trend fitted for m: every sample has 1 turn(s)" in text
    assert not (tmp_path / "rep1" / "turns_m.png").exists()


# --- item 9: a key as a bare query or a fragment ---------------------------------------------

def test_a_bare_query_and_a_fragment_are_masked():
    assert redact_url(f"http://127.0.0.1:8000/v1?{SECRET}") == "http://127.0.0.1:8000/v1?***"
    assert redact_url(f"http://h/v1#{SECRET}") == "http://h/v1#***"
    assert redact_url(f"http://u:{SECRET}@h/v1?a=1&{SECRET}&&b=2#{SECRET}") == \
        "http://***@h/v1?a=***&***&&b=***#***"
    assert redact_url("http://h/v1") == "http://h/v1"
    for url in (f"http://h/?{SECRET}", f"http://h/v1#{SECRET}", f"https://h/v1?x=1#k={SECRET}"):
        assert SECRET not in redact_text(f"evalaware run --base-url {url} --x 1")


def test_a_bare_query_key_is_in_no_manifest_or_setting(monkeypatch):
    from harness.backends.openai.backend import OpenAIBackend
    from harness.runlog.provenance import base_manifest
    from tests.test_hardening import _Models
    from http.server import ThreadingHTTPServer
    import threading

    monkeypatch.setattr(sys, "argv", ["evalaware", "run", "--base-url", f"http://h/?{SECRET}#{SECRET}"])
    assert SECRET not in json.dumps(base_manifest())
    _Models.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        b = OpenAIBackend(f"http://127.0.0.1:{srv.server_address[1]}/?{SECRET}", model=None,
                          chat_mode=True, api_key="k")
        try:
            assert _Models.seen[0][0] == f"/v1/models?{SECRET}"  # sent as given
            shown = json.dumps([b.settings, b.device, b.base_url, b.http.pool.servers[0].to_dict()])
            assert SECRET not in shown and "?***" in shown
        finally:
            b.close()
    finally:
        srv.shutdown()
        srv.server_close()


# --- item 11: an .eval archive whose member unpacks to too much -------------------------------

def _zip(path: Path, member_bytes: int, method: int = zipfile.ZIP_DEFLATED) -> Path:
    if method != zipfile.ZIP_DEFLATED:
        pytest.importorskip("inspect_ai")
        import inspect_ai._util.zipfile  # noqa: F401  (zstd in zipfile, as inspect-ai writes it)
    with zipfile.ZipFile(path, "w", compression=method) as z:
        z.writestr("header.json", "{}")
        z.writestr("samples/big_epoch_1.json", '{"x": "' + "a" * member_bytes + '"}')
    return path


def _lie(path: Path, size: int) -> Path:
    """Rewrite every declared unpacked size (local headers and central directory) to `size`."""
    b = bytearray(path.read_bytes())
    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        i = b.find(sig)
        while i >= 0:
            struct.pack_into("<I", b, i + off, size)
            i = b.find(sig, i + 4)
    path.write_bytes(bytes(b))
    return path


def test_an_eval_member_over_the_cap_is_refused_before_it_is_unpacked(tmp_path, monkeypatch, capsys):
    from harness.core.bounds import UNBOUNDED
    from harness.data import inspect_logs

    monkeypatch.setattr(inspect_logs, "MAX_MEMBER_BYTES", 10_000, raising=False)
    log = _zip(tmp_path / "bomb.eval", 50_000)
    assert log.stat().st_size < 2_000
    rc, err = _main(monkeypatch, capsys, "data", "validate", str(log))
    line = _one_line(err)
    assert rc == 2 and line.startswith(f"error: {log}: ")
    assert "'samples/big_epoch_1.json'" in line and "declares 50009 bytes" in line
    assert "more than 10000 bytes, the cap per member" in line and UNBOUNDED in line
    monkeypatch.setenv(UNBOUNDED, "1")  # lifted: inspect-ai reads it (and finds no log in it)
    rc, err = _main(monkeypatch, capsys, "data", "validate", str(log))
    assert rc == 2 and "the cap per member" not in _one_line(err)


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, 93], ids=["deflate", "zstd"])
def test_an_eval_member_whose_header_lies_is_caught_while_unpacking(tmp_path, monkeypatch, capsys, method):
    from harness.data import inspect_logs

    monkeypatch.setattr(inspect_logs, "MAX_MEMBER_BYTES", 10_000, raising=False)
    log = _lie(_zip(tmp_path / "liar.eval", 50_000, method), 10)
    assert all(i.file_size == 10 for i in zipfile.ZipFile(log).infolist())
    rc, err = _main(monkeypatch, capsys, "data", "validate", str(log))
    line = _one_line(err)
    assert rc == 2 and f"{log}: member 'samples/big_epoch_1.json' of the archive unpacks to more " \
                       "than 10000 bytes, the cap per member" in line


# --- item 12: a factor file is run as code, after parsing, and its exit is one line -----------

def test_a_factor_file_that_exits_is_one_line_and_help_never_runs_it(tmp_path):
    marker = tmp_path / "ran"
    f = tmp_path / "exits.py"
    f.write_text(f"import pathlib, sys\npathlib.Path({str(marker)!r}).write_text('x')\nsys.exit(3)\n")
    h = _cli("cues", "--factors", str(f), "--help")
    assert h.returncode == 0 and not marker.exists()
    assert "run as Python" in " ".join(h.stdout.split())
    args = ["cues", "--model", "m", "--dataset", "demo", "--out", str(tmp_path / "c"), "--report-only"]
    r = _cli(*args, "--factors", f"grading,{f}")
    assert marker.exists() and r.returncode == 2
    assert _one_line(r.stderr) == (f"error: {f}: the factor file (run as Python code) raised SystemExit: 3 "
                                   f"(evalaware cues)")
    boom = tmp_path / "boom.py"
    boom.write_text("raise RuntimeError('broken')\n")
    r = _cli(*args, "--factors", str(boom))
    assert r.returncode == 2 and _one_line(r.stderr).endswith("raised RuntimeError: broken (evalaware cues)")
    assert not (tmp_path / "c").exists()


# --- item 13: export --out - -----------------------------------------------------------------

def test_export_to_standard_output(tmp_path, monkeypatch):
    run = _limit_run(tmp_path / "run", select(load_dataset("demo"), limit=4))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["export", str(run), "--out", "-"])
    assert r.exit_code == 0, r.output
    recs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(recs) == 4 and {x["method"] for x in recs} == {"probability"}
    assert "4 records -> standard output" in r.stderr
    assert not (tmp_path / "-").exists()
    r = CliRunner().invoke(cli, ["export", str(run), "--out", "out.jsonl"])  # a file as before
    assert r.exit_code == 0 and len((tmp_path / "out.jsonl").read_text().splitlines()) == 4


# --- item 14: dataset text is literal in report.md; ids equal after NFC are refused -----------

HOSTILE_MD = "[click me](javascript:alert(1)) `tick` **bold** ![img](http://x/y.png)"


def test_report_markdown_shows_dataset_text_as_itself(tmp_path):
    from harness.reporting.report import write_report
    from tests.test_report import make_run

    run = make_run(tmp_path / "run", model="model `m` [a](javascript:b)", seed=1, n_votes=5,
                   n_samples=24, human=True, human_source=f"raters {HOSTILE_MD}")
    with RunLog(run) as store:
        for m in store.methods():
            recs = [r.to_dict() for r in store.results(m)]
            for i, r in enumerate(recs):
                r["category"] = HOSTILE_MD if i % 2 else r["category"]
            store.replace_results(m, recs)
    md, page = write_report([run], tmp_path / "rep", n_boot=20)
    text = md.read_text()
    assert "click me" in text and "tick" in text  # the text is there ...
    for live in (r"\]\(javascript", r"\]\(http://x", r"`tick`", r"\*\*bold", r"`m`"):
        assert not re.search(r"(?<!\\)" + live, text), live  # ... but opens no link, image, code
    assert "\\`tick\\`" in text and "\\*\\*bold\\*\\*" in text  # span or emphasis
    html_page = page.read_text()
    assert "<code>tick</code>" not in html_page and "<code>m</code>" not in html_page
    assert "`tick`" in html_page and "[click me](javascript:alert(1))" in html_page
    markdown_it = pytest.importorskip("markdown_it")
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(text)
    assert "<a " not in rendered and 'src="http://x/y.png"' not in rendered  # no link, no image
    assert "<code>tick</code>" not in rendered and "<code>m</code>" not in rendered
    assert "<strong>bold</strong>" not in rendered and "[click me](javascript:alert(1))" in rendered


def test_ids_equal_after_nfc_are_refused_naming_both_records(tmp_path):
    nfc, nfd = "demo:caf\u00e9", "demo:cafe\u0301"
    assert nfc != nfd
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": i, "label": lab, "messages": [{"role": "user", "content": "hi"}]})
                            + "\n" for i, lab in ((nfc, "eval"), ("demo:x", "deploy"), (nfd, "deploy"))))
    r = _cli("data", "validate", str(data))
    line = _one_line(r.stderr)
    assert r.returncode == 2 and line.startswith(f"error: {data}: record 3: ")
    assert "'demo:cafe\\u0301' is the same as 'demo:caf\\xe9' (record 1) after Unicode NFC" in line


def test_inspect_sample_ids_equal_after_nfc_are_refused(tmp_path):
    pytest.importorskip("inspect_ai", reason="inspect-ai is not installed (the inspect extra)")
    from inspect_ai import Task
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput
    from inspect_ai.solver import generate

    from tests.inspect_log_fixture import _run

    task = Task(name="toy_nfc", solver=[generate()],
                dataset=[Sample(id=k, input=f"Say {k}.") for k in ("caf\u00e9", "cafe\u0301")])
    log = _run(task, [ModelOutput.from_content("mockllm/model", f"answer {k}") for k in range(2)],
               tmp_path / "logs", "eval")
    r = _cli("data", "validate", str(log))
    line = _one_line(r.stderr)
    assert r.returncode == 2 and line.startswith(f"error: {log}: ")
    assert "'toy_nfc:cafe\\u0301' is the same as 'toy_nfc:caf\\xe9'" in line and "after Unicode NFC" in line
